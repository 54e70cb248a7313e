"""The FAQ retriever's tokenizer: one function for documents and queries, in fa, zh and en.

BM25 only matches tokens that are equal, so the documents and the queries go through exactly the
same steps. Nothing is downloaded and no dictionary is needed; the rules are:

1. **Normalize** (:func:`normalize`): Unicode NFKC (full-width Latin letters and digits become
   ASCII, Arabic presentation forms become letters), ``str.casefold`` (lowercase), then the
   Persian/Arabic spelling variants fold together, as Lucene's ``PersianAnalyzer`` does: Arabic
   yeh ``ي``/``ى`` → ``ی``, Arabic kaf ``ك`` → ``ک``, ``ۀ``/``ة`` → ``ه``, ``أ``/``إ``/``آ``/``ٱ``
   → ``ا``; Persian ``۰``-``۹`` and Arabic-Indic ``٠``-``٩`` digits → ``0``-``9``; the zero-width
   non-joiner U+200C (and ZWJ, bidi marks, tatweel, soft hyphen) and the Arabic diacritics
   (harakat, U+064B-U+065F, U+0670) are removed, so ``هزینه‌ها`` and ``هزینهها`` are one word.
2. **Split** into runs of CJK ideographs and runs of other letters/digits; everything else
   (spaces, punctuation, ``_``, ``-``, Persian ``،``) separates tokens.
3. **Chinese** runs: overlapping character **bigrams** (``种植牙`` → ``种植 植牙``); a run of a
   single character is kept as a unigram. A few very frequent function characters
   (:data:`ZH_STOP_CHARS`: 的 了 吗 是 我 您 …) and function words (:data:`ZH_STOP_WORDS`:
   可以 如何 哪些 …) end a run like punctuation does, so ``费用可以报销吗`` gives ``费用 报销``
   and not the cross-boundary bigrams ``用可 以报``.
   Why bigrams: Chinese has no spaces, and word segmentation needs a dictionary (jieba and
   friends) that must be shipped, loaded and kept in step with the vocabulary. Most Chinese
   words are two characters, so bigrams index every word without knowing where words end; a
   short query (``理赔材料``, ``种植牙``) produces the same bigrams as the document text, and an
   unknown word or a typo costs one bigram instead of the whole query. The price — a few
   meaningless bigrams across word boundaries — is small in BM25, because they are rare and
   queries seldom contain them.
4. **Persian and English** words: stop words (:data:`FA_STOPWORDS`, :data:`EN_STOPWORDS`) and
   one-letter words are dropped, then a tiny suffix stemmer folds plurals and a few inflections
   (Persian plural ``ها``/``های``/``هایی``, else a final ``ی``: ``ویزای`` → ``ویزا``; English
   ``-s``/``-es``/``-ies``/``-ed``/``-ing`` and a final ``e``). Digit runs are kept (``14`` days;
   ``30,000`` gives ``30`` ``000``), in every script, so ``۱۴`` matches ``14``.
   Words of other scripts (Cyrillic, Hangul, …) are kept as they are.

bm25s' own tokenizer is not used: its stop words and stemmer are English-only and it splits on
``\\w`` runs, which would make every Chinese sentence one token.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = [
    "EN_STOPWORDS",
    "FA_STOPWORDS",
    "ZH_STOP_CHARS",
    "ZH_STOP_WORDS",
    "normalize",
    "tokenize",
]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
# findall gives (cjk_run, "") or ("", word) pairs; it is 3x faster than finditer + group().
_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_ARABIC_SCRIPT = re.compile(r"[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]")

_FOLD: tuple[tuple[str, str], ...] = (
    ("ي", "ی"),
    ("ى", "ی"),
    ("ك", "ک"),
    ("ۀ", "ه"),
    ("ة", "ه"),
    ("أ", "ا"),
    ("إ", "ا"),
    ("آ", "ا"),
    ("ٱ", "ا"),
    *((chr(0x06F0 + d), str(d)) for d in range(10)),  # Persian digits
    *((chr(0x0660 + d), str(d)) for d in range(10)),  # Arabic-Indic digits
    *((chr(c), "") for c in range(0x064B, 0x0660)),  # harakat, shadda, sukun, ...
    ("\u0670", ""),  # superscript alef
    ("\u0640", ""),  # tatweel
    ("\u200c", ""),  # zero-width non-joiner
    ("\u200d", ""),  # zero-width joiner
    ("\u200e", ""),  # left-to-right mark
    ("\u200f", ""),  # right-to-left mark
    ("\u061c", ""),  # Arabic letter mark
    ("\u00ad", ""),  # soft hyphen
)


def normalize(text: str) -> str:
    """NFKC, lowercase, Persian/Arabic letter and digit folding, ZWNJ and diacritics removed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    for old, new in _FOLD:  # a str.replace per pair is ~5x faster than str.translate here
        if old in text:
            text = text.replace(old, new)
    return text


#: English words that carry no topic. A superset of Lucene's (and bm25s') 33 English stop words:
#: question words, pronouns and auxiliaries matter here because users ask questions.
EN_STOPWORDS = frozenset(
    """
    a about after all also am an and any are as at be been being both but by can could did do
    does doing don done each for from get got had has have having he hello her hers hi him his
    how i if in into is it its just me mine more most my myself no not of on only or other our
    ours please she should so some such than thank thanks that the their them then there these
    they this those tell to too us very was we were what when where which who whom whose why will
    with would you your yours
    """.split()
)

#: Persian function words, written as they are after :func:`normalize` (``آن`` → ``ان``).
FA_STOPWORDS = frozenset(
    normalize(word)
    for word in """
    و در به از که این آن را با است هست نیست برای یا تا هم اما ولی اگر می نمی شود میشود نمیشود
    شده شد کنم کنی کنید کند کنند کرد کردم کرده ها های یک من ما شما او آنها ایشان چه چی چیست
    چطور چطوری چگونه آیا کجا کی چرا بر نیز باید هر خود دارم داری دارد داریم دارید دارند داره
    هستم هستید بود بودم ای دیگر همه چند چقدر کدام پس روی مثل مانند اینکه وقتی باشد باشم باشید
    میخواهم میخوام خواهم لطفا سلام ممنون مرسی
    """.split()
)

#: Chinese function characters that end a CJK run, like punctuation.
ZH_STOP_CHARS = frozenset("的了吗呢吧啊呀嘛么什怎我你您他她它们这那是和")

#: Chinese function words that end a CJK run, like punctuation.
ZH_STOP_WORDS = frozenset(
    "可以 如果 如何 哪些 哪个 多少 怎样 请问 一下 时候 能否 应该 已经 因为 所以 或者 以及".split()
)

_ZH_SPLIT = re.compile(
    "|".join(sorted(ZH_STOP_WORDS)) + "|[" + "".join(sorted(ZH_STOP_CHARS)) + "]"
)


def _stem_en(word: str) -> str:
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "shes", "ches", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


_FA_PLURALS = ("هایی", "های", "ها")


def _stem_fa(word: str) -> str:
    for suffix in _FA_PLURALS:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    # The final ی of the ezafe, the indefinite and adjectives: ویزای → ویزا, درمانی → درمان.
    if word.endswith("ی") and len(word) >= 4:
        return word[:-1]
    return word


@lru_cache(maxsize=1 << 16)
def _cjk_tokens(run: str) -> tuple[str, ...]:
    out: list[str] = []
    for part in _ZH_SPLIT.split(run):
        if len(part) == 1:
            out.append(part)
        else:
            out.extend(part[i : i + 2] for i in range(len(part) - 1))
    return tuple(out)


@lru_cache(maxsize=1 << 16)
def _word_token(word: str) -> str | None:
    if word.isdigit():
        return word
    if len(word) < 2:
        return None
    if word.isascii():
        return None if word in EN_STOPWORDS else _stem_en(word)
    if _ARABIC_SCRIPT.search(word):
        return None if word in FA_STOPWORDS else _stem_fa(word)
    return word


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` in order (with repeats), as described in the module docstring."""
    out: list[str] = []
    for run, word in _TOKEN.findall(normalize(text)):
        if run:
            out.extend(_cjk_tokens(run))
        elif (token := _word_token(word)) is not None:
            out.append(token)
    return out
