"""``EstimatingCounter``: a fast estimate of ``o200k_base`` token counts for fa / zh / en chat text.

The estimate is a weighted count of the text's UTF-8 bytes. Every byte value belongs to a class:
ASCII space, letter, digit, punctuation, ...; for a multi-byte character the lead byte tells the
script (``D8``-``DB`` Arabic/Persian, ``E4``-``E9`` CJK ideographs, ``F0`` emoji, ...) and every
continuation byte adds the same small weight. Each class has a weight in 1/``SCALE`` tokens, so

    tokens ~ round(sum of the weights of the text's bytes / SCALE)

Everything runs at C speed: ``str.encode`` gives the bytes, ``bytes.translate`` replaces each
byte by its weight, and ``zlib.adler32`` sums them (its low half is the byte sum modulo 65521, so
the bytes are summed in chunks small enough never to wrap).

The weights were fitted offline, once, by ``tests/data/token_corpus/fit_estimator.py`` on
``tests/data/token_corpus/fit.jsonl`` against the exact counts of ``TiktokenCounter("o200k_base")``
(least squares on the relative error, then rounded to integers by coordinate descent on the same
data). The held-out error and the speed are measured by ``tests/unit/domain/test_estimate.py`` and
``benchmarks/test_bench_estimator.py``; see ``docs/token-estimator.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from zlib import adler32

from threadkeeper.domain.tokens import TokenCounter

__all__ = [
    "BYTE_CLASSES",
    "CLASS_WEIGHTS",
    "SCALE",
    "EstimatingCounter",
    "byte_class",
]

#: A weight of ``SCALE`` is one token.
SCALE = 24

_WHITESPACE = frozenset(b"\t\n\v\f\r")


def byte_class(byte: int) -> str:
    """The class of one UTF-8 byte value (for a multi-byte character, of its lead byte)."""
    if byte == 0x20:
        return "space"
    if byte in _WHITESPACE:
        return "newline"
    if 0x41 <= byte <= 0x5A or 0x61 <= byte <= 0x7A:
        return "letter"
    if 0x30 <= byte <= 0x39:
        return "digit"
    if 0x21 <= byte <= 0x7E:
        return "punct"
    if byte < 0x80:
        return "control"
    if byte < 0xC0:
        return "continuation"
    if 0xD8 <= byte <= 0xDB:
        return "arabic"  # U+0600-U+06FF: Persian/Arabic letters, digits and punctuation
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
#: ``tests/data/token_corpus/fit_estimator.py`` (least squares on fit.jsonl, rounded by coordinate
#: descent). A multi-byte character weighs its lead byte plus ``continuation`` per further byte:
#: a Persian letter 1 + 5 = 6/24 token, a Han ideograph 7 + 2 * 5 = 17/24, an emoji code point
#: 45 + 3 * 5 = 60/24 (emoji in chat break the merges around them). ``continuation`` is set by hand
#: (it only moves weight off the lead bytes, keeping the largest byte weight small), and so are
#: the classes without fitting data: ``two_byte`` (0.2 token per character: Cyrillic, Greek,
#: Hebrew letters), ``three_byte`` (0.4: Indic, Thai, Hangul), from o200k counts of a few
#: sentences, not validated; ``control`` counts as one token.
CLASS_WEIGHTS: Mapping[str, int] = MappingProxyType(
    {
        "space": 16,
        "newline": 13,
        "letter": 2,
        "digit": 10,
        "punct": 19,
        "control": 24,
        "continuation": 5,
        "arabic": 1,
        "two_byte": 0,
        "general": 12,
        "cjk_symbol": 28,
        "han": 7,
        "fullwidth": 21,
        "three_byte": 0,
        "astral": 45,
        "invalid": 0,
    }
)

_TABLE = bytes(CLASS_WEIGHTS[name] for name in BYTE_CLASSES)
#: Bytes summed per ``adler32`` call: the sum of a chunk's weights stays below 65521.
_CHUNK = 65520 // max(_TABLE)
_HALF = SCALE // 2


class EstimatingCounter(TokenCounter):
    """Estimated ``o200k_base`` counts: no vocabulary, standard library only, ~30x tiktoken.

    Accuracy and speed on held-out fa / zh / en / mixed chat messages are documented in
    ``docs/token-estimator.md``. Use ``TiktokenCounter`` where a count must be exact.
    """

    name = "estimate"

    def count_text(self, text: str) -> int:
        """Estimated tokens of ``text``: 0 for ``""``, at least 1 otherwise."""
        if not text:
            return 0
        if text.isspace():  # o200k packs whitespace runs into few tokens (16 newlines, 80 spaces)
            return len(text) // 16 or 1
        weights = text.encode("utf-8", "surrogatepass").translate(_TABLE)
        size = len(weights)
        if size <= _CHUNK:
            total = adler32(weights, 0) & 0xFFFF
        else:
            total = start = 0
            while start < size:
                total += adler32(weights[start : start + _CHUNK], 0) & 0xFFFF
                start += _CHUNK
        return (total + _HALF) // SCALE or 1
