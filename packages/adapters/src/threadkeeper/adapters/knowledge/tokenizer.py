"""The FAQ retriever's tokenizer: one function for documents and queries, in fa, zh and en.

BM25 only matches tokens that are equal, so the documents and the queries go through exactly the
same steps. Nothing is downloaded and no dictionary is needed; the rules are:

1. **Normalize** (:func:`normalize`): :func:`threadkeeper.domain.text.fold`, the one fa/zh/en
   folding every rule uses: Unicode NFKC (full-width Latin letters and digits become ASCII,
   Arabic presentation forms become letters), ``str.casefold`` (lowercase), then the
   Persian/Arabic spelling variants fold together, as Lucene's ``PersianAnalyzer`` does and
   more: Arabic yeh ``ي``/``ى`` and ``ئ`` → ``ی``, Arabic kaf ``ك`` → ``ک``, ``ۀ``/``ة`` → ``ه``,
   ``أ``/``إ``/``آ``/``ٱ`` → ``ا``, ``ؤ`` → ``و``; Persian ``۰``-``۹`` and Arabic-Indic
   ``٠``-``٩`` digits → ``0``-``9``; ZWJ, bidi marks, tatweel, soft hyphen and the Arabic
   diacritics (harakat U+064B-U+065F, U+0670, Quranic marks) are removed. The zero-width
   non-joiner U+200C is removed too (``zwnj="join"``), so ``هزینه‌ها`` and ``هزینهها`` are one
   word.
2. **Split** into runs of CJK characters (:data:`threadkeeper.domain.text.CJK_RANGES`: Han
   ideographs of every plane, and kana) and runs of other letters/digits; everything else
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
4. **Persian and English** words: stop words (:data:`FA_STOPWORDS`, :data:`EN_STOPWORDS`, the
   function words of :mod:`threadkeeper.domain.text`) and one-letter words are dropped, then a
   tiny suffix stemmer folds plurals and a few inflections (Persian plural
   ``ها``/``های``/``هایی``, else a final ``ی``: ``ویزای`` → ``ویزا``; English
   ``-s``/``-es``/``-ies``/``-ed``/``-ing`` and a final ``e``). Digit runs are kept (``14`` days;
   ``30,000`` gives ``30`` ``000``), in every script, so ``۱۴`` matches ``14``.
   Words of other scripts (Cyrillic, Hangul, …) are kept as they are; kana runs are cut into
   bigrams like Chinese ones.

bm25s' own tokenizer is not used: its stop words and stemmer are English-only and it splits on
``\\w`` runs, which would make every Chinese sentence one token.
"""

from __future__ import annotations

import re
from functools import lru_cache

from threadkeeper.domain.text import (
    ARABIC_CLASS,
    CJK_CLASS,
    EN_STOPWORDS,
    FA_STOPWORDS,
    ZH_STOP_CHARS,
    ZH_STOP_WORDS,
    fold,
)

__all__ = [
    "EN_STOPWORDS",
    "FA_STOPWORDS",
    "ZH_STOP_CHARS",
    "ZH_STOP_WORDS",
    "normalize",
    "tokenize",
]

# findall gives (cjk_run, "") or ("", word) pairs; it is 3x faster than finditer + group().
_TOKEN = re.compile(rf"([{CJK_CLASS}]+)|([^\W_{CJK_CLASS}]+)")
_ARABIC_SCRIPT = re.compile(f"[{ARABIC_CLASS}]")


def normalize(text: str) -> str:
    """:func:`threadkeeper.domain.text.fold` with the half-space removed (``zwnj="join"``)."""
    return fold(text, zwnj="join")


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


def _cjk_bigrams(run: str) -> tuple[str, ...]:
    out: list[str] = []
    for part in _ZH_SPLIT.split(run):
        if len(part) == 1:
            out.append(part)
        else:
            out.extend(part[i : i + 2] for i in range(len(part) - 1))
    return tuple(out)


def _word(word: str) -> str | None:
    if word.isdigit():
        return word
    if len(word) < 2:
        return None
    if word.isascii():
        return None if word in EN_STOPWORDS else _stem_en(word)
    if _ARABIC_SCRIPT.search(word):
        return None if word in FA_STOPWORDS else _stem_fa(word)
    return word


_cjk_tokens = lru_cache(maxsize=1 << 16)(_cjk_bigrams)
_word_token = lru_cache(maxsize=1 << 16)(_word)
"""The knowledge base's runs and words, each read once (its chunks are tokenized when a
tenant's index is built); a query's are not kept (``tokenize(remember=False)``): they are a
user's words."""


def tokenize(text: str, *, remember: bool = True) -> list[str]:
    """The tokens of ``text`` in order (with repeats), as described in the module docstring.
    ``remember=False`` (a query: the user's text): nothing of ``text`` is cached."""
    cjk, words = (_cjk_tokens, _word_token) if remember else (_cjk_bigrams, _word)
    out: list[str] = []
    for run, word in _TOKEN.findall(normalize(text)):
        if run:
            out.extend(cjk(run))
        elif (token := words(word)) is not None:
            out.append(token)
    return out
