"""``EstimatingCounter``: a fast estimate of ``o200k_base`` token counts for fa / zh / en chat text.

The estimate is a weighted count of the text's characters, by class, taken in one of two ways:

* **Arabic-script text** (text with an alef ``ا``, of whose characters at most 1 in 8 are
  outside the code page below): ``codecs.charmap_encode`` maps each
  character to one byte through ``PERSIAN_CHARS``, a single-byte "code page" of ASCII plus 100
  Persian/Arabic letters, digits, marks, ZWNJ and punctuation; every character of that page has
  a class (``PERSIAN_CLASSES``: ``fa_d8`` letters, ``fa_digit``, ``zwnj``, ...), and the characters
  it lacks (emoji, other scripts) are dropped by the encoder and priced at the ``other`` weight
  each (their number is ``len(text) - len(encoded)``).
* **All other text** (Chinese, English, code, ...): the UTF-8 bytes. Every byte value belongs to a
  class (``BYTE_CLASSES``): ASCII space, lower- or upper-case letter, digit, six kinds of
  punctuation, ...; for a multi-byte character the lead byte tells the script (``E4``-``E9`` CJK
  ideographs; ``F0`` emoji, ...), and every continuation byte adds a small weight. A Persian
  digit ``۰``-``۹`` (``DB B0``-``DB B9``) in text without an alef is found as a pair of table
  values (``persian_digit``).

Both ways share the ASCII weights, except the space's (``fa_space`` on the code page). Each class
has a weight in 1/``SCALE`` tokens; two more terms are added: ``space_pair`` (two spaces in a row,
counted only in text with a markdown code fence, where o200k packs indentation into one token)
and ``CONSTANT`` per text (the first word of a text has no leading space, so it is a token the
space weights do not pay: one more space's weight). So

    tokens ~ round((sum of the weights + space pairs * space_pair + CONSTANT) / SCALE)

Everything runs at C speed: ``str.encode`` or ``codecs.charmap_encode`` gives the bytes,
``bytes.translate`` replaces each byte by its weight (plus an offset, so that every table entry
is >= 0), ``zlib.adler32`` sums them (its low half is the byte sum modulo 65521, so the bytes
are summed in chunks small enough never to wrap), ``str.count`` counts the space pairs (fenced
code only), and ``bytes.count`` on the weight string finds the Persian digits of the UTF-8 way
(the weights of ``DB`` and of ``B0``-``B9`` are unique table values; only text with a ``DB``).

The weights were fitted offline by ``tests/data/token_corpus/fit_estimator.py`` on the FIT files
of ``tests/data/token_corpus`` against the exact counts of ``TiktokenCounter("o200k_base")``
(least squares on the relative error, each language x kind of text weighted equally, then
rounded to integers by coordinate descent on the same data). The errors on held-out text
(``heldout.jsonl`` and the EVAL corpora under ``eval/`` and ``eval2/``, never fitted on) and the
speed are measured by ``tests/unit/domain/test_estimate.py`` and
``benchmarks/test_bench_estimator.py``; see ``docs/token-estimator.md``.
"""

from __future__ import annotations

from codecs import charmap_build, charmap_encode
from collections.abc import Callable, Mapping
from types import MappingProxyType
from zlib import adler32

from threadkeeper.domain.tokens import TokenCounter

__all__ = [
    "BYTE_CLASSES",
    "CLASS_WEIGHTS",
    "CONSTANT",
    "OFFSET",
    "PAIR_WEIGHTS",
    "PERSIAN_CHARS",
    "PERSIAN_CLASSES",
    "PERSIAN_WEIGHTS",
    "SCALE",
    "EstimatingCounter",
    "byte_class",
    "persian_class",
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

#: The Arabic-script code page: the characters that bytes 0x80, 0x81, ... stand for (ASCII is
#: 0x00-0x7F as itself). Persian and Arabic letters, marks, Arabic-Indic and Persian digits,
#: Arabic punctuation, ZWNJ and the other format characters, and the punctuation Persian text
#: uses from other blocks. 100 characters; the rest of the page is unused.
PERSIAN_CHARS = (
    "\u060c\u061b\u061f"  # ، ؛ ؟
    + "".join(map(chr, range(0x0621, 0x063B)))  # ء-غ
    + "".join(map(chr, range(0x0640, 0x0653)))  # ـ ف-ي, harakat
    + "\u0654"
    + "".join(map(chr, range(0x0660, 0x066D)))  # ٠-٩ ٪ ٫ ٬
    + "\u0670\u067e\u0686\u0698\u06a9\u06af\u06be\u06c0\u06c1\u06cc\u06d2"  # پ چ ژ ک گ ... ی
    + "".join(map(chr, range(0x06F0, 0x06FA)))  # ۰-۹
    + "\u200c\u200d\u200e\u200f\ufe0f"  # ZWNJ, ZWJ, LRM, RLM, VS16
    + "\u2013\u2014\u2018\u2019\u201c\u201d\u2026\u2022"  # – — ‘ ’ “ ” … •
    + "\u00ab\u00bb\u00a0"  # « » NBSP
)


def persian_class(char: str) -> str:
    """The class of one character of ``PERSIAN_CHARS`` (or of an ASCII character)."""
    code = ord(char)
    if code < 0x80:
        return byte_class(code)
    if char in "\u060c\u061b\u061f\u066a\u066b\u066c":
        return "fa_punct"
    if 0x0660 <= code <= 0x0669 or 0x06F0 <= code <= 0x06F9:
        return "fa_digit"
    if 0x064B <= code <= 0x0654 or code == 0x0670:
        return "fa_mark"  # harakat, hamza above, superscript alef
    if code == 0x200C:
        return "zwnj"
    if char in "\u200d\u200e\u200f\ufe0f":
        return "fa_format"
    if code < 0x0600 or code >= 0x2000:
        return "fa_general"
    return f"fa_{0xC0 + (code >> 6):02x}"  # a letter, by its UTF-8 lead byte: fa_d8 ... fa_db


#: The class of every character of ``PERSIAN_CHARS``, in page order.
PERSIAN_CLASSES: tuple[str, ...] = tuple(persian_class(c) for c in PERSIAN_CHARS)

#: Weight of each UTF-8 class in 1/SCALE tokens, as printed by the offline fitting script
#: ``tests/data/token_corpus/fit_estimator.py``. A multi-byte character weighs its lead byte plus
#: its continuation bytes: e.g. a Han ideograph ``han`` + 2 continuations. Lead weights may be
#: negative (the continuation bytes carry part of the character); the table stores weight +
#: ``OFFSET``. Not fitted (no data): ``two_byte`` (0.2 token per character: Cyrillic, Greek,
#: Hebrew letters) and ``three_byte`` (0.4: Indic, Thai, Hangul), from o200k counts of a few
#: sentences, not validated; ``control`` counts as one token, ``invalid`` never occurs. The
#: ``arabic_*`` leads are not fitted either: they are the Arabic-script way's letter weights less
#: one continuation byte, so that a letter costs the same either way.
CLASS_WEIGHTS: Mapping[str, int] = MappingProxyType(
    {
        "space": 28,
        "tab": 4,
        "newline": 31,
        "upper": 0,
        "lower": 1,
        "digit": 15,
        "period": 37,
        "bracket": 18,
        "quote": 14,
        "dash": 37,
        "colon": 25,
        "symbol": -2,
        "control": 32,
        "continuation_b0": 13,
        "continuation": 12,
        "arabic_d8": -9,
        "arabic_d9": -2,
        "arabic_da": -1,
        "arabic_db": -4,
        "two_byte": -6,
        "general": -1,
        "cjk_symbol": 25,
        "han": -2,
        "fullwidth": 28,
        "three_byte": -11,
        "astral": 37,
        "invalid": 0,
    }
)
#: Weight of each class of the Arabic-script way in 1/SCALE tokens (fitted with the others):
#: ``fa_space`` is the ASCII space there (a word start in Persian text costs other than in
#: English), ``other`` the weight of each character the code page lacks; the other ASCII
#: characters weigh as in ``CLASS_WEIGHTS``.
PERSIAN_WEIGHTS: Mapping[str, int] = MappingProxyType(
    {
        "fa_space": 24,
        "fa_d8": 3,
        "fa_d9": 10,
        "fa_da": 11,
        "fa_db": 8,
        "fa_digit": 30,
        "fa_mark": 10,
        "fa_punct": 56,
        "zwnj": 21,
        "fa_format": 29,
        "fa_general": 33,
        "other": 66,
    }
)
#: Weight of each pair feature in 1/SCALE tokens: ``space_pair`` fitted, ``persian_digit`` (UTF-8
#: way only) set so that a Persian digit costs ``fa_digit`` there too.
PAIR_WEIGHTS: Mapping[str, int] = MappingProxyType({"space_pair": -38, "persian_digit": 21})
#: Added once per (non-empty, non-whitespace) text, in 1/SCALE tokens: one word start, i.e. the
#: ``space`` weight (``fa_space`` on the code page). The first word of a text is a token of its
#: own like a word after a space, but has no space to pay for it.
CONSTANT = CLASS_WEIGHTS["space"]
_P_CONSTANT = PERSIAN_WEIGHTS["fa_space"]

#: Added to every class weight in the UTF-8 translate table, so that every entry is >= 0; the sum
#: then subtracts ``OFFSET`` per byte.
OFFSET = -min(0, *CLASS_WEIGHTS.values())
_P_OFFSET = -min(0, *PERSIAN_WEIGHTS.values(), *(CLASS_WEIGHTS[c] for c in BYTE_CLASSES[:128]))

_TABLE = bytes(CLASS_WEIGHTS[name] + OFFSET for name in BYTE_CLASSES)
_P_TABLE = bytes(
    [CLASS_WEIGHTS[name] + _P_OFFSET for name in BYTE_CLASSES[:32]]
    + [PERSIAN_WEIGHTS["fa_space"] + _P_OFFSET]
    + [CLASS_WEIGHTS[name] + _P_OFFSET for name in BYTE_CLASSES[33:128]]
    + [PERSIAN_WEIGHTS[name] + _P_OFFSET for name in PERSIAN_CLASSES]
    + [0] * (128 - len(PERSIAN_CLASSES))
)
_P_MAP = charmap_build("".join(map(chr, range(128))) + PERSIAN_CHARS.ljust(128, "\ufffe"))
_OTHER = PERSIAN_WEIGHTS["other"]
#: Bytes summed per ``adler32`` call: the sum of a chunk's weights stays below 65521.
_CHUNK = 65520 // max(_TABLE)
_P_CHUNK = 65520 // max(_P_TABLE)
_HALF = SCALE // 2 + CONSTANT
_SPACE_PAIR = PAIR_WEIGHTS["space_pair"]
_PERSIAN_DIGIT = PAIR_WEIGHTS["persian_digit"]
#: The two table values of a Persian digit, DB then B0..B9: unique values of the table (checked).
_DIGIT_NEEDLE = bytes((_TABLE[0xDB], _TABLE[0xB0]))
_DB = _DIGIT_NEEDLE[:1]


def _unique_values() -> bool:
    return all(_TABLE.count(_TABLE[b]) == n for b, n in ((0xDB, 1), (0xB0, 10)))


if not _unique_values():  # pragma: no cover - guards a hand edit of CLASS_WEIGHTS
    raise ValueError("the weights of arabic_db and continuation_b0 must be unique table values")
if len(PERSIAN_CHARS) > 128 or len(set(PERSIAN_CHARS)) != len(PERSIAN_CHARS):  # pragma: no cover
    raise ValueError("PERSIAN_CHARS must be at most 128 distinct characters")


#: Upward bias of a safe count, in percent of the point estimate, by the way the text was
#: counted: ``fa`` (the Arabic-script code page), ``ascii`` (UTF-8, ASCII only: English, code),
#: ``utf8`` (UTF-8 with other characters: Chinese, mixed). Chosen so that the windows a
#: ``TurnWindowPolicy`` builds with the safe count stay within their budget in exact o200k
#: tokens on at least 99.9 % of model calls over every committed corpus
#: (``tests/unit/domain/test_estimate.py``, ``test_windows_stay_within_budget_in_exact_tokens``);
#: the over-count it costs is in docs/token-estimator.md.
SAFETY_PERCENT: Mapping[str, int] = MappingProxyType({"fa": 5, "ascii": 6, "utf8": 12})


class EstimatingCounter(TokenCounter):
    """Estimated ``o200k_base`` counts: no vocabulary, standard library only, ~20-30x tiktoken.

    ``safe`` (the default, and what ``THREADKEEPER_TOKENIZER=estimate`` uses): the count is
    biased upward (``SAFETY_PERCENT`` per way, rounded up), so that a window chosen under a
    budget by it fits that budget in exact tokens (budget safety, not mean accuracy: issue 28).
    ``safe=False``: the fitted point estimate, rounded to nearest (its mean error is what the
    accuracy tables of ``docs/token-estimator.md`` report). Use ``TiktokenCounter`` where a
    count must be exact.
    """

    name = "estimate"

    def __init__(self, *, safe: bool = True) -> None:
        super().__init__()
        self.safe = safe

    def count_text(self, text: str) -> int:
        """Estimated tokens of ``text``: 0 for ``""``, at least 1 otherwise."""
        if not text:
            return 0
        if text.isspace():  # o200k packs runs of one whitespace character into few tokens (16
            # newlines, 80 spaces) but not mixed ones (1,000 random spaces, tabs and newlines
            # are 786 tokens): the safe count is a token per character
            return len(text) if self.safe else len(text) // 16 or 1
        total, way = _estimate(text)
        if self.safe:  # ceil((total + CONSTANT) * (100 + margin) / (100 * SCALE))
            tokens = -(-(total + CONSTANT) * (100 + SAFETY_PERCENT[way]) // (100 * SCALE))
        else:
            tokens = (total + _HALF) // SCALE
        return tokens if tokens > 0 else 1


def _sum(
    weights: bytes, chunk: int, _adler32: Callable[[bytes | memoryview, int], int] = adler32
) -> int:
    """The sum of the byte values, by ``adler32`` over chunks that cannot wrap modulo 65521."""
    if len(weights) <= chunk:
        return _adler32(weights, 0) & 0xFFFF
    total = 0
    view = memoryview(weights)
    for start in range(0, len(weights), chunk):
        total += _adler32(view[start : start + chunk], 0) & 0xFFFF
    return total


def _utf8_total(text: str) -> int:
    """The UTF-8 way's weighted sum (the code path of ``_estimate``, for a rare fallback)."""
    weights = text.encode("utf-8", "surrogatepass").translate(_TABLE)
    total = _sum(weights, _CHUNK) - OFFSET * len(weights)
    if _DB in weights:
        total += _PERSIAN_DIGIT * weights.count(_DIGIT_NEEDLE)
    return total


def _estimate(
    text: str,
    _table: bytes = _TABLE,
    _p_table: bytes = _P_TABLE,
    _p_map: object = _P_MAP,
    _chunk: int = _CHUNK,
    _p_chunk: int = _P_CHUNK,
    _adler32: Callable[[bytes | memoryview, int], int] = adler32,
) -> tuple[int, str]:
    """The weighted sum of a non-empty, non-whitespace text (module constants bound as locals),
    and the way it was counted (a key of ``SAFETY_PERCENT``)."""
    if "\u0627" in text:  # Arabic script (alef; O(1) on ASCII text): the code page
        data = charmap_encode(text, "ignore", _p_map)[0]  # type: ignore[arg-type]
        other = len(text) - len(data)  # the characters the code page lacks
        if other * 8 <= len(text):
            weights = data.translate(_p_table)
            size = len(weights)
            if size <= _p_chunk:
                total = (_adler32(weights, 0) & 0xFFFF) - _P_OFFSET * size
            else:
                total = _sum(weights, _p_chunk) - _P_OFFSET * size
            total += _OTHER * other + _P_CONSTANT - CONSTANT
            way = "fa"
        else:  # mostly other scripts (Persian and Chinese together, ...): the UTF-8 way
            total = _utf8_total(text)
            way = "utf8"
    else:
        way = "ascii" if text.isascii() else "utf8"
        weights = text.encode("utf-8", "surrogatepass").translate(_table)
        size = len(weights)
        if size <= _chunk:
            total = (_adler32(weights, 0) & 0xFFFF) - OFFSET * size
        else:
            total = _sum(weights, _chunk) - OFFSET * size
        if not text.isascii() and _DB in weights:  # DB: ی and the Persian digits
            total += _PERSIAN_DIGIT * weights.count(_DIGIT_NEEDLE)
    if "`" in text and "```" in text:  # fenced code (memchr first): a run of spaces is 1 token
        total += _SPACE_PAIR * text.count("  ")
    return total, way
