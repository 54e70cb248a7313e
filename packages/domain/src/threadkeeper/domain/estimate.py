"""``EstimatingCounter``: a fast estimate of ``o200k_base`` token counts for fa / zh / en chat text.

The estimate is a weighted count of the text's UTF-8 bytes plus two pair counts. Every byte value
belongs to a class: ASCII space, lower- or upper-case letter, digit, six kinds of punctuation,
...; for a multi-byte character the lead byte tells the script (``D8``-``DB`` Arabic/Persian, one
class per lead byte; ``E4``-``E9`` CJK ideographs; ``F0`` emoji, ...), and every continuation byte
adds a small weight (``B0``-``B9`` a weight of its own). Each class has a weight in 1/``SCALE``
tokens, and so has each pair feature:

* ``space_pair``: two spaces in a row (non-overlapping), counted only in text with a markdown
  code fence (```` ``` ````), i.e. indented code: o200k packs a run of spaces into one token,
  where the byte weights would pay every space as a word start (the fence test is a cheap
  ``in``; counting pairs in every text with a newline cost a third of the speed);
* ``persian_digit``: a Persian digit ``۰``-``۹`` (``DB B0``-``DB B9``), ~1 token each in o200k,
  where the byte weights alone would price it like a Persian letter (~1/4).

So

    tokens ~ round((sum of the byte weights + sum of the pair weights * pair counts) / SCALE)

Everything runs at C speed: ``str.encode`` gives the bytes, ``bytes.translate`` replaces each
byte by its weight (plus ``OFFSET``, so that every table entry is >= 0), ``zlib.adler32`` sums
them (its low half is the byte sum modulo 65521, so the bytes are summed in chunks small enough
never to wrap), ``str.count`` counts the space pairs (fenced code only), and ``bytes.count`` on
the weight string finds the Persian digits (the weights of ``DB`` and of ``B0``-``B9`` are
unique table values, so that pair of values occurs only there; only for non-ASCII text).

The weights were fitted offline, once, by ``tests/data/token_corpus/fit_estimator.py`` on
``tests/data/token_corpus/fit.jsonl`` and ``fit_extra.jsonl`` against the exact counts of
``TiktokenCounter("o200k_base")`` (least squares on the relative error, each language x kind of
text weighted equally, then rounded to integers by coordinate descent on the same data). The
errors on held-out text (``heldout.jsonl`` and the EVAL corpora under ``eval/``, which were never
fitted on) and the speed are measured by ``tests/unit/domain/test_estimate.py`` and
``benchmarks/test_bench_estimator.py``; see ``docs/token-estimator.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from zlib import adler32

from threadkeeper.domain.tokens import TokenCounter

__all__ = [
    "BYTE_CLASSES",
    "CLASS_WEIGHTS",
    "OFFSET",
    "PAIR_WEIGHTS",
    "SCALE",
    "EstimatingCounter",
    "byte_class",
]

#: A weight of ``SCALE`` is one token.
SCALE = 32

_PUNCT = {
    **dict.fromkeys(b".,", "period"),
    **dict.fromkeys(b"()[]{}<>", "bracket"),
    **dict.fromkeys(b"\"'`", "quote"),
    **dict.fromkeys(b"-_/", "dash"),
    **dict.fromkeys(b":;!?", "colon"),
}


def byte_class(byte: int) -> str:
    """The class of one UTF-8 byte value (for a multi-byte character, of its lead byte)."""
    if byte == 0x20:
        return "space"
    if byte == 0x09:
        return "tab"
    if byte in b"\n\v\f\r":
        return "newline"
    if 0x41 <= byte <= 0x5A:
        return "upper"
    if 0x61 <= byte <= 0x7A:
        return "lower"
    if 0x30 <= byte <= 0x39:
        return "digit"
    if 0x21 <= byte <= 0x7E:
        return _PUNCT.get(byte, "symbol")  # symbol: # $ % & * + = @ \ ^ | ~
    if byte < 0x80:
        return "control"
    if 0xB0 <= byte <= 0xB9:
        return "continuation_b0"  # after DB: the Persian digits U+06F0-U+06F9
    if byte < 0xC0:
        return "continuation"
    if 0xD8 <= byte <= 0xDB:
        return f"arabic_{byte:02x}"  # U+0600-U+06FF: Persian/Arabic letters, digits, punctuation
    if byte < 0xE0:
        return "two_byte"  # Latin-1, Latin Extended, Greek, Cyrillic, Hebrew, Syriac, ...
    if byte == 0xE2:
        return "general"  # U+2000-U+2FFF: ZWNJ, dashes, quotes, bullets, symbols, dingbats
    if byte == 0xE3:
        return "cjk_symbol"  # U+3000-U+3FFF: 、。「」, kana, CJK Extension A
    if 0xE4 <= byte <= 0xE9:
        return "han"  # U+4000-U+9FFF: CJK Unified Ideographs
    if byte == 0xEF:
        return "fullwidth"  # U+F000-U+FFFF: ，！？（）, variation selectors, presentation forms
    if byte < 0xF0:
        return "three_byte"  # Indic, Thai, Hangul, other scripts; lone surrogates
    if byte <= 0xF4:
        return "astral"  # emoji and other characters beyond U+FFFF
    return "invalid"  # never produced by a UTF-8 encoder


#: The class of every byte value, indexed by the byte.
BYTE_CLASSES: tuple[str, ...] = tuple(byte_class(b) for b in range(256))

#: Weight of each class in 1/SCALE tokens, as printed by the offline fitting script
#: ``tests/data/token_corpus/fit_estimator.py``. A multi-byte character weighs its lead byte plus
#: its continuation bytes: e.g. a Han ideograph ``han`` + 2 continuations. Lead weights may be
#: negative (the continuation bytes carry part of the character); the table stores weight +
#: ``OFFSET``. Not fitted (no data): ``two_byte`` (0.2 token per character: Cyrillic, Greek,
#: Hebrew letters) and ``three_byte`` (0.4: Indic, Thai, Hangul), from o200k counts of a few
#: sentences, not validated; ``control`` counts as one token, ``invalid`` never occurs.
CLASS_WEIGHTS: Mapping[str, int] = MappingProxyType(
    {
        "space": 27,
        "tab": -4,
        "newline": 30,
        "upper": 1,
        "lower": 1,
        "digit": 15,
        "period": 39,
        "bracket": 18,
        "quote": 21,
        "dash": 36,
        "colon": 29,
        "symbol": -2,
        "control": 32,
        "continuation_b0": 13,
        "continuation": 12,
        "arabic_d8": -11,
        "arabic_d9": 2,
        "arabic_da": 21,
        "arabic_db": -14,
        "two_byte": -6,
        "general": 1,
        "cjk_symbol": 16,
        "han": -2,
        "fullwidth": 25,
        "three_byte": -11,
        "astral": 59,
        "invalid": 0,
    }
)
#: Weight of each pair feature in 1/SCALE tokens (fitted with the class weights).
PAIR_WEIGHTS: Mapping[str, int] = MappingProxyType({"space_pair": -47, "persian_digit": 33})

#: Added to every class weight in the translate table, so that every entry is >= 0; the sum then
#: subtracts ``OFFSET`` per byte.
OFFSET = -min(0, *CLASS_WEIGHTS.values())

_TABLE = bytes(CLASS_WEIGHTS[name] + OFFSET for name in BYTE_CLASSES)
#: Bytes summed per ``adler32`` call: the sum of a chunk's weights stays below 65521.
_CHUNK = 65520 // max(_TABLE)
_HALF = SCALE // 2
_SPACE_PAIR = PAIR_WEIGHTS["space_pair"]
_PERSIAN_DIGIT = PAIR_WEIGHTS["persian_digit"]
#: The two table values of a Persian digit, DB then B0..B9: unique values of the table (checked).
_DIGIT_NEEDLE = bytes((_TABLE[0xDB], _TABLE[0xB0]))
_DB = _DIGIT_NEEDLE[:1]


def _unique_values() -> bool:
    return all(_TABLE.count(_TABLE[b]) == n for b, n in ((0xDB, 1), (0xB0, 10)))


if not _unique_values():  # pragma: no cover - guards a hand edit of CLASS_WEIGHTS
    raise ValueError("the weights of arabic_db and continuation_b0 must be unique table values")


class EstimatingCounter(TokenCounter):
    """Estimated ``o200k_base`` counts: no vocabulary, standard library only, ~20-30x tiktoken.

    Accuracy (on held-out text from three sources) and speed are documented in
    ``docs/token-estimator.md``. Use ``TiktokenCounter`` where a count must be exact.
    """

    name = "estimate"

    def count_text(self, text: str) -> int:
        """Estimated tokens of ``text``: 0 for ``""``, at least 1 otherwise."""
        if not text:
            return 0
        if text.isspace():  # o200k packs whitespace runs into few tokens (16 newlines, 80 spaces)
            return len(text) // 16 or 1
        return _estimate(text)


def _estimate(
    text: str,
    _table: bytes = _TABLE,
    _chunk: int = _CHUNK,
    _adler32: Callable[[bytes | memoryview, int], int] = adler32,
) -> int:
    """The weighted sum of a non-empty, non-whitespace text (module constants bound as locals)."""
    weights = text.encode("utf-8", "surrogatepass").translate(_table)
    size = len(weights)
    if size <= _chunk:
        total = (_adler32(weights, 0) & 0xFFFF) - OFFSET * size
    else:
        total = -OFFSET * size
        view = memoryview(weights)
        for start in range(0, size, _chunk):
            total += _adler32(view[start : start + _chunk], 0) & 0xFFFF
    if "`" in text and "```" in text:  # fenced code (memchr first): a run of spaces is 1 token
        total += _SPACE_PAIR * text.count("  ")
    if not text.isascii() and _DB in weights:  # DB: ی and the Persian digits
        total += _PERSIAN_DIGIT * weights.count(_DIGIT_NEEDLE)
    tokens = (total + _HALF) // SCALE
    return tokens if tokens > 0 else 1
