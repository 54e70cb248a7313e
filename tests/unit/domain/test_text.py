"""The one fa/zh/en text module (threadkeeper.domain.text): folding, digits, scripts, stop words.

Its users used to keep copies that disagreed: the FAQ tokenizer, the memory extractor and the
builtin model each had their own CJK ranges (the extractor stopped at the BMP, so ``𠮷`` of
Extension B was Chinese to the other two only; none knew plane 3, so ``𰻞`` of Extension G was
Chinese to no one), their own folding (ZWNJ removed or a space, ``آ`` folded or not, ``ئ``
folded by the builtin model alone) and their own stop words. The last tests here run the same
characters through all of them.
"""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from langchain_core.messages import HumanMessage

from threadkeeper.adapters.builtin_model import estimate_input_tokens, stream_tokens
from threadkeeper.adapters.knowledge import tokenizer
from threadkeeper.domain import escalation, extraction
from threadkeeper.domain.text import (
    ARABIC_LETTER_CLASS,
    CJK_RANGES,
    EN_REQUEST_WORDS,
    EN_STOPWORDS,
    FA_REQUEST_WORDS,
    FA_STOPWORDS,
    HAN_RANGES,
    KANA_RANGES,
    ZH_REQUEST_WORDS,
    ZH_STOP_CHARS,
    ZH_STOP_WORDS,
    ZH_WEAK_STOP_CHARS,
    ZH_WEAK_STOP_WORDS,
    fold,
    is_arabic,
    is_cjk,
    is_han,
    is_kana,
    is_latin,
    script_counts,
    script_of,
)

# --- folding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("بيمه", "بیمه"),  # Arabic yeh
        ("كودك", "کودک"),  # Arabic kaf
        ("بیمه\u200cی عمر", "بیمه ی عمر"),  # ZWNJ
        ("لطفاً", "لطفا"),  # tanwin dropped
        ("۲ فرزند", "2 فرزند"),  # Persian digits
        ("٣ فرزند", "3 فرزند"),  # Arabic-Indic digits
        ("متأهل", "متاهل"),  # hamza on alef
        ("Ｈｅｌｌｏ  World", "hello world"),  # full-width, case, spaces
        ("I’m", "i'm"),  # typographic apostrophe
    ],
)
def test_text_is_folded(text: str, folded: str) -> None:
    # moved from tests/unit/domain/test_extraction.py (extraction.normalize_text was this fold)
    assert fold(text) == folded


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("ى", "ی"),  # alef maksura
        ("جزئیات", "جزییات"),  # yeh with hamza: both spellings are one word
        ("مؤسسه", "موسسه"),  # waw with hamza
        ("آتش سوزی", "اتش سوزی"),  # alef with madda
        ("ٱلله", "الله"),  # alef wasla
        ("إ أ", "ا ا"),
        ("خانۀ", "خانه"),  # heh with yeh
        ("مدرسة", "مدرسه"),  # teh marbuta
        ("بِیمَه", "بیمه"),  # harakat
        ("قرآنۖ", "قران"),  # a Quranic annotation mark (U+06D6)
        ("بیــمه", "بیمه"),  # tatweel
        ("\u200fبیمه\u200e\u061c", "بیمه"),  # RLM, LRM, ALM
        ("bi\u00admeh", "bimeh"),  # soft hyphen
        ("\u200dبیمه", "بیمه"),  # ZWJ
        ("ﺑﻴﻤﻪ ﻛﺎﺭ", "بیمه کار"),  # presentation forms (NFKC), then the Arabic yeh and kaf
        ("ﻻ", "لا"),  # the lam-alef ligature
        ("STRASSE Straße", "strasse strasse"),  # casefold, not lower
        ("  a \n\t b  ", "a b"),  # whitespace squeezed and stripped
        ("‘quoted’", "'quoted'"),
    ],
)
def test_spelling_variants_fold_together(text: str, folded: str) -> None:
    assert fold(text) == folded


def test_the_half_space_is_a_space_or_joins_the_word() -> None:
    assert fold("هزینه\u200cها می\u200cشود") == "هزینه ها می شود"
    assert fold("هزینه\u200cها می\u200cشود", zwnj="join") == "هزینهها میشود"
    # the tokenizer's normalization is this fold, joining
    assert tokenizer.normalize("هزینه\u200cها") == fold("هزینه\u200cها", zwnj="join")


def test_folding_is_idempotent() -> None:
    text = "آيا بيمه‌ی تكميلي ۱۴ روزه، مؤسسه و جزئیات Ｆｕｌｌ  Straße؟ 牙科保险𠮷"
    for zwnj in ("space", "join"):
        once = fold(text, zwnj=zwnj)
        assert fold(once, zwnj=zwnj) == once


# --- digits ----------------------------------------------------------------------------------


def test_every_persian_and_arabic_indic_digit_is_ascii() -> None:
    assert fold("۰۱۲۳۴۵۶۷۸۹") == "0123456789"
    assert fold("٠١٢٣٤٥٦٧٨٩") == "0123456789"
    assert fold("０１２３４５６７８９") == "0123456789"  # full-width, by NFKC
    assert fold("۳۰٬۰۰۰ تومان") == "30٬000 تومان"  # the Arabic thousands separator stays


# --- scripts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("char", "han"),
    [
        ("\u33ff", False),  # ㏿ square gal, just before Extension A
        ("\u3400", True),  # 㐀 first of Extension A
        ("\u4dbf", True),  # last of Extension A
        ("\u4dc0", False),  # ䷀ Yijing hexagram, between Extension A and the unified block
        ("\u4e00", True),  # 一
        ("\u9fff", True),  # last of CJK Unified Ideographs
        ("\ua000", False),  # ꀀ Yi
        ("\uf900", True),  # 豈 first compatibility ideograph
        ("\ufa11", True),  # 﨑 a compatibility ideograph NFKC keeps
        ("\ufaff", True),
        ("\ufb00", False),  # ﬀ Latin ligature
        ("\U00020000", True),  # first of Extension B
        ("\U00020bb7", True),  # 𠮷 Extension B
        ("\U0002a6df", True),  # last of Extension B
        ("\U0002b740", True),  # Extension D
        ("\U0002f800", True),  # compatibility supplement
        ("\U0002fa1f", True),  # last of the compatibility supplement
        ("\U00030000", True),  # first of Extension G
        ("\U00030ede", True),  # 𰻞 (biang) Extension G
        ("\U00031350", True),  # first of Extension H
        ("\U0001f600", False),  # 😀
        ("\u3005", True),  # 々 iteration mark
        ("\u3007", True),  # 〇 as in 二〇二六年
        ("\u3006", False),  # 〆 is a symbol, not Han
        ("\u3000", False),  # ideographic space
        ("\u3001", False),  # 、
        ("\u3002", False),  # 。
        ("\uff0c", False),  # ， full-width comma
        ("\u3041", False),  # ぁ kana is not Han
        ("\uac00", False),  # 가 Hangul
        ("a", False),
    ],
)
def test_han_ranges_edges(char: str, han: bool) -> None:
    assert is_han(char) is han
    if han:
        assert is_cjk(char)
        assert not is_kana(char)


@pytest.mark.parametrize("char", ["ぁ", "ん", "ア", "ヿ", "ㇰ", "ｱ", "\U0001b001"])
def test_kana_is_cjk_but_not_han(char: str) -> None:
    assert is_kana(char)
    assert is_cjk(char)
    assert not is_han(char)


def test_the_ranges_are_sorted_and_disjoint() -> None:
    for ranges in (HAN_RANGES, KANA_RANGES, CJK_RANGES):
        assert all(low <= high for low, high in ranges)
        assert all(a[1] < b[0] for a, b in pairwise(ranges))
    assert set(CJK_RANGES) == set(HAN_RANGES) | set(KANA_RANGES)


@pytest.mark.parametrize(
    ("char", "script"),
    [
        ("a", "latin"),
        ("Z", "latin"),
        ("é", "latin"),
        ("ß", "latin"),
        ("Ａ", "latin"),  # full-width
        ("ب", "arabic"),
        ("ی", "arabic"),
        ("ي", "arabic"),
        ("\u0750", "arabic"),  # Arabic Supplement
        ("\u08a0", "arabic"),  # Arabic Extended-A: the tokenizer's old range lacked it
        ("ﺑ", "arabic"),  # presentation form
        ("牙", "han"),
        ("\U00030ede", "han"),
        ("の", "kana"),
        ("ж", "other"),  # Cyrillic
        ("가", "other"),  # Hangul
        ("α", "other"),  # Greek
        ("1", None),
        ("۱", None),  # a Persian digit is not a letter
        ("〇", None),  # Han, but a number
        ("،", None),
        ("。", None),
        (" ", None),
        ("\u064e", None),  # a haraka
    ],
)
def test_script_of_a_letter(char: str, script: str | None) -> None:
    assert script_of(char) == script


def test_is_arabic_and_is_latin() -> None:
    for char in "،۱\u064eب":  # the script, not only its letters
        assert is_arabic(char)
    assert not is_arabic("a")
    assert is_latin("é")
    assert not is_latin("ж")
    assert not is_latin("×")


def test_script_counts_count_letters_only() -> None:
    counts = script_counts("بیمه SMS 牙科 の ж 123 ،。")
    assert counts == {"arabic": 4, "latin": 3, "han": 2, "kana": 1, "other": 1}
    assert script_counts("") == {}


def test_the_arabic_letter_class_is_letters() -> None:
    letter = re.compile(f"[{ARABIC_LETTER_CLASS}]")
    assert all(letter.fullmatch(c) for c in "ابپتثجچحخدذرزژسشصضطظعغفقکگلمنوهی")
    assert letter.fullmatch("\u0750")  # Supplement letters: extraction's class lacked them
    assert not any(letter.fullmatch(c) for c in "،؛؟۰۱٠١\u064e\u0670\u06d6 a")


# --- stop words ------------------------------------------------------------------------------


def test_stop_words_hold_function_words() -> None:
    assert {"the", "is", "what", "how", "does", "my", "under", "during"} <= EN_STOPWORDS
    assert {"و", "در", "از", "که", "این", "را", "است", "چیست", "ان"} <= FA_STOPWORDS
    assert "آن" not in FA_STOPWORDS  # written folded
    assert set("的了吗是我您") <= ZH_STOP_CHARS
    assert {"可以", "如何", "哪些", "是否", "关于"} <= ZH_STOP_WORDS
    # content words are not stop words
    assert not {"dental", "cover", "claim", "insurance"} & EN_STOPWORDS
    assert not {"بیمه", "دندان", "پوشش"} & FA_STOPWORDS
    assert not {"保险", "理赔", "报销"} & ZH_STOP_WORDS


def test_stop_words_are_folded() -> None:
    for words in (FA_STOPWORDS, FA_REQUEST_WORDS, EN_STOPWORDS, EN_REQUEST_WORDS):
        assert all(fold(w) == w and fold(w, zwnj="join") == w for w in words)


def test_the_tiers_do_not_overlap() -> None:
    assert not EN_STOPWORDS & EN_REQUEST_WORDS
    assert not FA_STOPWORDS & FA_REQUEST_WORDS
    assert not ZH_STOP_CHARS & ZH_WEAK_STOP_CHARS
    assert not ZH_STOP_WORDS & (ZH_WEAK_STOP_WORDS | ZH_REQUEST_WORDS)
    assert all(len(w) == 2 for w in ZH_STOP_WORDS | ZH_WEAK_STOP_WORDS | ZH_REQUEST_WORDS)


def test_the_tokenizer_uses_these_lists() -> None:
    assert tokenizer.EN_STOPWORDS is EN_STOPWORDS
    assert tokenizer.FA_STOPWORDS is FA_STOPWORDS
    assert tokenizer.ZH_STOP_CHARS is ZH_STOP_CHARS
    assert tokenizer.ZH_STOP_WORDS is ZH_STOP_WORDS
    # weak function characters and words of asking do not cut or vanish from the index
    assert tokenizer.tokenize("就医") == ["就医"]
    assert tokenizer.tokenize("被保险人") == ["被保", "保险", "险人"]
    assert tokenizer.tokenize("information details") == ["information", "detail"]


# --- one behaviour everywhere ----------------------------------------------------------------


@pytest.mark.parametrize(
    "char",
    [
        "\u3400",  # 㐀 Extension A: every copy had it
        "\U00020bb7",  # 𠮷 Extension B: the extractor's copy did not (BMP only)
        "\U00030ede",  # 𰻞 Extension G (plane 3): no copy had it
        "\ufa11",  # 﨑 a compatibility ideograph NFKC keeps
    ],
)
def test_a_han_character_is_chinese_to_every_user(char: str) -> None:
    assert is_han(char)
    assert fold(char) == char
    # the FAQ index: one CJK run, cut into a bigram (𰻞 used to be a one-letter "word", dropped)
    assert tokenizer.tokenize(f"{char}面") == [f"{char}面"]
    # the memory extractor: Chinese (𠮷 and 𰻞 used to be "another script")
    assert extraction.detect_language(char * 5) == "zh"
    # the escalation rules: the reply language (𰻞 used to count as a Latin letter)
    assert escalation.detect_language(f"{char}{char} ok") == "zh"
    # the builtin model: streamed one character at a time, one token each
    assert stream_tokens(char * 3, "zh") == [char] * 3
    assert estimate_input_tokens([HumanMessage(char * 4)]) == 4


def test_ideographic_zero_is_part_of_a_chinese_run() -> None:
    # 〇 used to split 二〇二六年 in the index (and was dropped as a one-letter word)
    assert tokenizer.tokenize("二〇二六年") == ["二〇", "〇二", "二六", "六年"]
    assert stream_tokens("二〇二六年", "zh") == ["二", "〇", "二", "六", "年"]


def test_kana_is_written_without_spaces_but_is_not_chinese() -> None:
    # the index cuts kana runs into bigrams, as the builtin model always did
    assert tokenizer.tokenize("ほけん") == ["ほけ", "けん"]
    assert stream_tokens("ほけん", "zh") == ["ほ", "け", "ん"]
    # the extractor does not take Japanese for Chinese; the reply language stays Chinese
    assert extraction.detect_language("ほけんについて") is None
    assert escalation.detect_language("ほけんについて") == "zh"


def test_spelling_variants_match_in_every_user() -> None:
    # ئ/ی and آ/ا: the tokenizer and the extractor used to keep them apart
    assert tokenizer.tokenize("جزئیات مسئولیت") == tokenizer.tokenize("جزییات مسیولیت")
    assert extraction.detect_products("بیمه اتش سوزی") == extraction.detect_products("بیمه آتش‌سوزی")
    assert [p.slug for p in extraction.detect_products("بیمه اتش سوزی")] == ["home"]
    # a typographic apostrophe in a request for a person
    assert escalation.asks_for_person("I’d like a representative")
