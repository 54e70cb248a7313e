"""fa / zh / en text: one folding, one definition of each script, one set of stop words.

Every rule that reads what users write goes through this module: the memory extractor
(:mod:`threadkeeper.domain.extraction`), the escalation rules
(:mod:`threadkeeper.domain.escalation`), the FAQ tokenizer
(``threadkeeper.adapters.knowledge.tokenizer``) and the builtin chat model. Each used to keep a
copy of its own; the copies disagreed (see *Reconciled* below), so the same character could be
Chinese to one and not to another.

**Folding** (:func:`fold`) gives the form text is compared in, never shown to anyone:

1. Unicode NFKC (full-width Latin letters, digits and punctuation become ASCII, Arabic
   presentation forms and ligatures become letters, most CJK compatibility ideographs become
   the unified ideograph), then ``str.casefold``.
2. Arabic letter variants become the Persian letter (:data:`LETTER_FOLDS`): Arabic yeh ``ي``,
   alef maksura ``ى`` and yeh with hamza ``ئ`` → ``ی``; Arabic kaf ``ك`` → ``ک``; ``ۀ``/``ة`` →
   ``ه``; ``أ``/``إ``/``آ``/``ٱ`` → ``ا``; ``ؤ`` → ``و``. Typographic single quotes become
   ``'`` ("I’m" is "i'm").
3. Persian ``۰``-``۹`` and Arabic-Indic ``٠``-``٩`` digits become ``0``-``9``.
4. Arabic diacritics (harakat, shadda, sukun, U+064B-U+065F; superscript alef U+0670; Quranic
   annotation marks U+06D6-U+06ED), tatweel, ZWJ, the bidi marks (LRM, RLM, ALM) and the soft
   hyphen are removed.
5. The zero-width non-joiner (ZWNJ, U+200C, the Persian half-space inside ``می‌شود``,
   ``هزینه‌ها``) becomes a space (``zwnj="space"``, the default: phrase rules see the word
   parts) or is removed (``zwnj="join"``: the index sees one word, ``هزینهها``).
6. Runs of whitespace become one space; the ends are stripped.

**Scripts** are ranges of code points (:data:`HAN_RANGES`, :data:`KANA_RANGES`,
:data:`CJK_RANGES`, :data:`ARABIC_RANGES`, :data:`LATIN_RANGES`), with :func:`is_han`,
:func:`is_cjk`, :func:`is_arabic`, :func:`script_of` and :func:`script_counts` over them, and
the same ranges as regex classes (:data:`HAN_CLASS`, :data:`CJK_CLASS`, :data:`ARABIC_CLASS`,
:data:`ARABIC_LETTER_CLASS`, to put inside ``[...]``).

- *Han* is what a Chinese character is: CJK Unified Ideographs (U+4E00-U+9FFF), Extension A
  (U+3400-U+4DBF), the compatibility ideographs (U+F900-U+FAFF; NFKC turns most of them into
  unified ones, twelve such as ``﨑`` stay), all of planes 2 and 3 (U+20000-U+3FFFF: Extensions
  B-F and I, the compatibility supplement, Extensions G and H; the two planes hold nothing
  else, so later extensions are in too), and the four Han characters of the CJK Symbols block
  (``々`` U+3005, ``〇`` U+3007 as in ``二〇二六年``, the Hangzhou numerals U+3021-U+3029 and
  U+3038-U+303B). The radicals (U+2E80-U+2FDF) are symbols, not text (NFKC turns the Kangxi
  radicals into the ideographs they look like).
- *Kana* is Hiragana and Katakana with their extensions and half-width forms.
- *CJK* is Han plus kana: the scripts written without spaces between words, so the index and
  the builtin model cut them into character bigrams, the builtin model streams them one
  character at a time and counts each as about one token. Hangul is written with spaces and is
  not CJK here.
- CJK punctuation (U+3000-U+303F apart from the Han characters above, the full-width forms) is
  not in any range: it is not a letter, so it separates words like any punctuation.
- *Arabic script* is the Arabic blocks (Arabic, Supplement, Extended-A and -B, Presentation
  Forms-A and -B); Persian is written in it, so a word in it is Persian to every rule here.
  :data:`ARABIC_LETTER_CLASS` is the letters among them (no digits, marks or punctuation), the
  class a Persian word boundary is made of.
- *Latin* is Basic Latin, Latin-1, Latin Extended-A to -E, IPA and Latin Extended Additional
  letters, and the full-width Latin letters.

**Stop words**: :data:`EN_STOPWORDS`, :data:`FA_STOPWORDS` (written folded), and for Chinese
:data:`ZH_STOP_CHARS` and :data:`ZH_STOP_WORDS` are function words: they say nothing about
what a text is about, and neither the index nor the builtin model matches on them.
:data:`ZH_WEAK_STOP_CHARS` and :data:`ZH_WEAK_STOP_WORDS` are function characters and words
that also overlap content words (``在线``, ``就医``, ``被保险人``, ``还款``; ``可能不``,
``一个月``): the index keeps them (cutting a run at them would cut those words), the builtin
model does not count a bigram holding one (or being one) as overlap.
:data:`EN_REQUEST_WORDS`, :data:`FA_REQUEST_WORDS` and :data:`ZH_REQUEST_WORDS` are the words of
asking (explain, details, give, need, ``توضیح``, ``می‌دهد``, ``介绍``, ``需要``): they say what the
user wants done, not what about, so the builtin model does not match a question to a sentence
on them; the index keeps them, because a document may well be about "information" or
"details", and a heading that repeats the question's verb (``... پوشش می‌دهد``) is a better
match.

**Reconciled** (issue 11). The copies differed in:

- *CJK ranges*: the tokenizer had Han with Extension A, the compatibility ideographs and
  U+20000-U+2FA1F; the extractor had only the BMP ideographs (no Extension B+: ``𠮷`` was not
  Chinese to it); the builtin model had the tokenizer's ranges plus Hiragana/Katakana. None had
  plane 3 (Extensions G and H: ``𰻞`` of ``𰻞𰻞面``) nor ``〇``/``々``. Now: the Han ranges above
  everywhere Chinese is meant (extraction's language, the reply language), CJK (Han + kana)
  everywhere "no spaces between words" is meant (bigrams, streaming, token estimates); the
  builtin model's kana is kept that way, and the index now cuts kana runs into bigrams too
  (as Lucene's CJK bigram filter does) instead of keeping a whole kana run as one word.
- *Arabic ranges*: the tokenizer lacked Arabic Extended-A, the extractor knew only the Arabic
  block's letters; now one set of blocks, and one letter class that adds the Supplement and
  Extended letters to the extractor's.
- *Folding*: the extractor turned ZWNJ into a space, the tokenizer removed it, the builtin
  model made it a space (both kept, as ``zwnj``); only the builtin model folded ``ئ``/``ؤ``
  and the Quranic marks, only the tokenizer removed ALM and the soft hyphen, the extractor did
  not fold ``آ``/``ٱ`` and removed only part of the diacritics (U+064B-U+0652), only the
  extractor folded typographic quotes and squeezed whitespace, and it lowered (``lower``)
  where the others case-folded. Now all of them, for everyone: spelling variants that mean the
  same word (``جزئیات``/``جزییات``, ``مسؤول``/``مسوول``, ``آتش``/``اتش``) match everywhere.
- *Stop words*: the tokenizer and the builtin model had different lists; now one list of
  function words per language (the union of theirs), the builtin model's words of asking as
  their own lists, and the Chinese characters and words it did not count but which must not
  cut a run in the index as :data:`ZH_WEAK_STOP_CHARS` and :data:`ZH_WEAK_STOP_WORDS`.

Pure: standard library only.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from collections import Counter
from typing import Final, Literal

__all__ = [
    "ARABIC_CLASS",
    "ARABIC_LETTER_CLASS",
    "ARABIC_RANGES",
    "CJK_CLASS",
    "CJK_RANGES",
    "EN_REQUEST_WORDS",
    "EN_STOPWORDS",
    "FA_REQUEST_WORDS",
    "FA_STOPWORDS",
    "HAN_CLASS",
    "HAN_RANGES",
    "KANA_RANGES",
    "LATIN_RANGES",
    "LETTER_FOLDS",
    "ZH_REQUEST_WORDS",
    "ZH_STOP_CHARS",
    "ZH_STOP_WORDS",
    "ZH_WEAK_STOP_CHARS",
    "ZH_WEAK_STOP_WORDS",
    "Script",
    "fold",
    "is_arabic",
    "is_cjk",
    "is_han",
    "is_kana",
    "is_latin",
    "script_counts",
    "script_of",
]

Range = tuple[int, int]
"""An inclusive range of code points."""

# ============================================================================================
# Scripts
# ============================================================================================

HAN_RANGES: Final[tuple[Range, ...]] = (
    (0x3005, 0x3005),  # 々 ideographic iteration mark
    (0x3007, 0x3007),  # 〇 ideographic number zero
    (0x3021, 0x3029),  # Hangzhou numerals one-nine
    (0x3038, 0x303B),  # Hangzhou numerals ten-thirty, vertical iteration mark
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x3FFFF),  # planes 2 and 3: Extensions B-I, compatibility supplement
)
"""Chinese characters (see the module docstring)."""

KANA_RANGES: Final[tuple[Range, ...]] = (
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x1AFF0, 0x1B16F),  # Kana Extended-B, Kana Supplement, Extended-A, Small Kana Extension
)
"""Japanese syllabaries."""

CJK_RANGES: Final[tuple[Range, ...]] = tuple(sorted(HAN_RANGES + KANA_RANGES))
"""Han and kana: the scripts written without spaces between words."""

ARABIC_RANGES: Final[tuple[Range, ...]] = (
    (0x0600, 0x06FF),  # Arabic
    (0x0750, 0x077F),  # Arabic Supplement
    (0x0870, 0x089F),  # Arabic Extended-B
    (0x08A0, 0x08FF),  # Arabic Extended-A
    (0xFB50, 0xFDFF),  # Arabic Presentation Forms-A
    (0xFE70, 0xFEFF),  # Arabic Presentation Forms-B
)
"""The Arabic script, in which Persian is written (letters, digits, marks and punctuation)."""

_ARABIC_LETTER_RANGES: Final[tuple[Range, ...]] = (
    (0x0620, 0x064A),  # hamza, alef ... yeh (incl. the tatweel, which folding removes)
    (0x066E, 0x066F),  # dotless beh, dotless qaf
    (0x0671, 0x06D3),  # alef wasla ... yeh barree with hamza (پ چ ژ ک گ ی ...)
    (0x06D5, 0x06D5),  # ae
    (0x06EE, 0x06EF),  # dal, reh with inverted v
    (0x06FA, 0x06FF),  # sheen, dad, ghain with dot below ... heh with inverted v
    (0x0750, 0x077F),  # Arabic Supplement (letters only)
    (0x0870, 0x0887),  # Arabic Extended-B letters
    (0x0889, 0x088E),
    (0x08A0, 0x08C9),  # Arabic Extended-A letters
)

LATIN_RANGES: Final[tuple[Range, ...]] = (
    (0x0041, 0x005A),  # A-Z
    (0x0061, 0x007A),  # a-z
    (0x00AA, 0x00AA),  # ª
    (0x00BA, 0x00BA),  # º
    (0x00C0, 0x00D6),  # Latin-1 letters (not ×)
    (0x00D8, 0x00F6),  # (not ÷)
    (0x00F8, 0x02AF),  # Latin-1, Latin Extended-A and -B, IPA
    (0x1E00, 0x1EFF),  # Latin Extended Additional
    (0x2C60, 0x2C7F),  # Latin Extended-C
    (0xA720, 0xA7FF),  # Latin Extended-D
    (0xAB30, 0xAB6F),  # Latin Extended-E
    (0xFB00, 0xFB06),  # Latin ligatures ﬀ ﬁ ...
    (0xFF21, 0xFF3A),  # full-width Ａ-Ｚ
    (0xFF41, 0xFF5A),  # full-width ａ-ｚ
)
"""Latin letters."""


def _char_class(ranges: tuple[Range, ...]) -> str:
    """``ranges`` as the inside of a regex character class."""
    return "".join(chr(low) if low == high else f"{chr(low)}-{chr(high)}" for low, high in ranges)


HAN_CLASS: Final = _char_class(HAN_RANGES)
""":data:`HAN_RANGES` as the inside of a regex class: ``re.compile(f"[{HAN_CLASS}]+")``."""
CJK_CLASS: Final = _char_class(CJK_RANGES)
""":data:`CJK_RANGES` as the inside of a regex class."""
ARABIC_CLASS: Final = _char_class(ARABIC_RANGES)
""":data:`ARABIC_RANGES` as the inside of a regex class."""
ARABIC_LETTER_CLASS: Final = _char_class(_ARABIC_LETTER_RANGES)
"""The letters of the Arabic script (after :func:`fold`) as the inside of a regex class: what a
Persian word is made of, and so what a Persian word boundary looks at."""


def _bounds(ranges: tuple[Range, ...]) -> tuple[int, ...]:
    return tuple(edge for low, high in sorted(ranges) for edge in (low, high + 1))


_HAN: Final = _bounds(HAN_RANGES)
_KANA: Final = _bounds(KANA_RANGES)
_CJK: Final = _bounds(CJK_RANGES)
_ARABIC: Final = _bounds(ARABIC_RANGES)
_LATIN: Final = _bounds(LATIN_RANGES)


def _within(char: str, bounds: tuple[int, ...]) -> bool:
    return bisect_right(bounds, ord(char)) % 2 == 1


def is_han(char: str) -> bool:
    """Whether ``char`` is a Chinese character (:data:`HAN_RANGES`)."""
    return _within(char, _HAN)


def is_kana(char: str) -> bool:
    """Whether ``char`` is Hiragana or Katakana (:data:`KANA_RANGES`)."""
    return _within(char, _KANA)


def is_cjk(char: str) -> bool:
    """Whether ``char`` is written without spaces between words: Han or kana."""
    return _within(char, _CJK)


def is_arabic(char: str) -> bool:
    """Whether ``char`` belongs to the Arabic script (:data:`ARABIC_RANGES`), Persian included."""
    return _within(char, _ARABIC)


def is_latin(char: str) -> bool:
    """Whether ``char`` is a Latin letter (:data:`LATIN_RANGES`)."""
    return _within(char, _LATIN)


Script = Literal["han", "kana", "arabic", "latin", "other"]


def script_of(char: str) -> Script | None:
    """The script of the letter ``char``; ``None`` when it is not a letter (digits, marks,
    punctuation, spaces, ``〇``)."""
    if not char.isalpha():
        return None
    if char.isascii():
        return "latin"
    if _within(char, _HAN):
        return "han"
    if _within(char, _KANA):
        return "kana"
    if _within(char, _ARABIC):
        return "arabic"
    if _within(char, _LATIN):
        return "latin"
    return "other"


def script_counts(text: str) -> Counter[Script]:
    """How many letters of each script ``text`` holds (non-letters are not counted)."""
    counts: Counter[Script] = Counter()
    for char in text:
        script = script_of(char)
        if script is not None:
            counts[script] += 1
    return counts


# ============================================================================================
# Folding
# ============================================================================================

LETTER_FOLDS: Final[dict[str, str]] = {
    "ي": "ی",  # Arabic yeh -> Persian yeh
    "ى": "ی",  # alef maksura
    "ئ": "ی",  # yeh with hamza above: جزئیات = جزییات
    "ك": "ک",  # Arabic kaf -> Persian kaf
    "ۀ": "ه",  # heh with yeh above (ezafe)
    "ة": "ه",  # teh marbuta
    "أ": "ا",  # alef with hamza above
    "إ": "ا",  # alef with hamza below
    "آ": "ا",  # alef with madda above
    "ٱ": "ا",  # alef wasla
    "ؤ": "و",  # waw with hamza above: مؤسسه = موسسه
    "\u2018": "'",  # ‘
    "\u2019": "'",  # ’
}
"""Letters folded to the letter they are compared as (after NFKC and case folding)."""

_REMOVED: Final = (
    *(chr(c) for c in range(0x064B, 0x0660)),  # harakat, shadda, sukun, maddah, hamza marks
    "\u0670",  # superscript alef
    *(chr(c) for c in range(0x06D6, 0x06EE)),  # Quranic annotation marks
    "\u0640",  # tatweel
    "\u200d",  # zero-width joiner
    "\u200e",  # left-to-right mark
    "\u200f",  # right-to-left mark
    "\u061c",  # Arabic letter mark
    "\u00ad",  # soft hyphen
)
_DIGITS: Final = (
    *((chr(0x06F0 + d), str(d)) for d in range(10)),  # Persian ۰-۹
    *((chr(0x0660 + d), str(d)) for d in range(10)),  # Arabic-Indic ٠-٩
)
_ZWNJ: Final = "\u200c"

# One str.replace per pair that occurs is several times faster than str.translate over Persian
# and Chinese text (translate looks every non-ASCII character up in the table).
_FOLD_PAIRS: Final[tuple[tuple[str, str], ...]] = (
    *LETTER_FOLDS.items(),
    *_DIGITS,
    *((char, "") for char in _REMOVED),
)


def fold(text: str, *, zwnj: Literal["space", "join"] = "space") -> str:
    """The form ``text`` is compared in (see the module docstring): NFKC, case-folded, Arabic
    letter variants folded to Persian, digits to ASCII, diacritics and invisible marks
    removed, whitespace squeezed. The half-space (ZWNJ) becomes a space, or with
    ``zwnj="join"`` is removed so the word parts make one word."""
    text = unicodedata.normalize("NFKC", text).casefold()
    for old, new in _FOLD_PAIRS:
        if old in text:
            text = text.replace(old, new)
    if _ZWNJ in text:
        text = text.replace(_ZWNJ, " " if zwnj == "space" else "")
    return " ".join(text.split())


# ============================================================================================
# Stop words
# ============================================================================================

EN_STOPWORDS: Final = frozenset(
    """
    a about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing don done down during each few for
    from further get got had has have having he hello her here hers hi him his how i if in
    into is it its itself just let me mine more most my myself no nor not now of off on once
    only or other our ours out over own please same she should so some such than thank thanks
    that the their them then there these they this those through tell to too under until up
    us very was we were what when where which while who whom whose why will with would you
    your yours yourself
    """.split()
)
"""English function words: articles, pronouns, auxiliaries, prepositions, question words,
greetings. A superset of Lucene's (and bm25s') 33: question words, pronouns and auxiliaries
matter here because users ask questions."""

FA_STOPWORDS: Final = frozenset(
    fold(word)
    for word in """
    و در به از که این آن را با است هست نیست برای یا تا هم اما ولی اگر می نمی شود میشود نمیشود
    شده شد شوند کنم کنی کنید کند کنند کرد کردم کرده ها های ام ای یک یه من ما شما او آنها ایشان
    چه چی چیه چیست چطور چطوری چگونه آیا کجا کی چرا بر نیز باید هر خود دارم داری دارد داریم
    دارید دارند داره هستم هستید هستند بود بودم دیگر همه چند چقدر کدام پس روی مثل مانند اینکه
    وقتی درباره باشد باشم باشید میخواهم میخوام خواهم لطفا سلام ممنون مرسی
    """.split()
)
"""Persian function words, folded (``آن`` is ``ان``; a word written with a half-space is here
without it, as ``zwnj="join"`` gives it and as its parts are also listed)."""

ZH_STOP_CHARS: Final = frozenset("的了吗呢吧啊呀嘛么什怎我你您他她它们这那是和")
"""Chinese function characters that are (nearly) never part of a content word."""

ZH_WEAK_STOP_CHARS: Final = frozenset("与及或在也都就还把被哪些")
"""Chinese function characters that also begin or end content words (在线, 就医, 被保险人,
还款, 或许): not a word boundary, but not a topic either (see the module docstring)."""

ZH_STOP_WORDS: Final = frozenset(
    """
    可以 如果 如何 哪些 哪个 多少 怎样 请问 一下 时候 能否 是否 应该 已经 因为 所以 或者 以及
    关于 有关
    """.split()
)
"""Chinese function words of two characters that are (nearly) never part of a content word."""

ZH_WEAK_STOP_WORDS: Final = frozenset("能不 不能 一个".split())
"""Chinese function words that overlap content words (可能不, 不能退保, 一个月): not a word
boundary, but not a topic either (see the module docstring)."""

EN_REQUEST_WORDS: Final = frozenset(
    """
    detail details document explain full give info information know like need show want whole
    """.split()
)
"""English words of asking ("I want to know the details", "give me", "show me"), beyond the
stop words."""

FA_REQUEST_WORDS: Final = frozenset(
    fold(word)
    for word in """
    اطلاعات بدانم بدونم بگویید بگید بیشتر توضیح جزئیات کامل مورد دهد دهند میدهد میدهند
    """.split()
)
"""Persian words of asking (``جزئیات بیشتر``, ``توضیح کامل``) and the forms of "give"
(``پوشش می‌دهد``, like English "give"), folded."""

ZH_REQUEST_WORDS: Final = frozenset("介绍 告诉 想要 知道 需要".split())
"""Chinese words of asking (请介绍一下, 我想知道)."""
