"""Which representation of a run the caller gets: SSE unless ``Accept``'s best match is JSON.

RFC 9110 §12.5.1 with the usual tie-breaks: each offered type takes the quality of the most
specific media range matching it (``q=0`` refuses it); the higher quality wins, then the
more specific range (``application/json, */*`` → JSON), then the range listed first, then
SSE. No ``Accept`` (or ``*/*``, as curl sends) → SSE; nothing acceptable → ``None`` (406).
"""

from __future__ import annotations

import math
from typing import Final

SSE: Final = "text/event-stream"
JSON: Final = "application/json"
OFFERED: Final = (SSE, JSON)


def _ranges(accept: str) -> list[tuple[str, str, float]]:
    ranges: list[tuple[str, str, float]] = []
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        maintype, slash, subtype = media.lower().partition("/")
        if not slash or not maintype or not subtype:
            continue
        quality: float | None = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = math.nan
                # a malformed range is ignored
                quality = min(max(q, 0.0), 1.0) if math.isfinite(q) else None
        if quality is not None:
            ranges.append((maintype, subtype, quality))
    return ranges


def choose_representation(accept: str | None) -> str | None:
    """``SSE``, ``JSON``, or ``None`` when the caller accepts neither."""
    if accept is None or not accept.strip():
        return SSE
    ranges = _ranges(accept)
    best: tuple[float, int, int, int] | None = None
    chosen: str | None = None
    for preference, offered in enumerate(OFFERED):
        maintype, subtype = offered.split("/")
        match: tuple[int, int, float] | None = None  # specificity, -position, quality
        for position, (r_main, r_sub, quality) in enumerate(ranges):
            if r_main == "*" and r_sub == "*":
                specificity = 0
            elif r_main == maintype and r_sub == "*":
                specificity = 1
            elif r_main == maintype and r_sub == subtype:
                specificity = 2
            else:
                continue
            if match is None or (specificity, -position) > match[:2]:
                match = (specificity, -position, quality)
        if match is None or match[2] <= 0:
            continue
        rank = (match[2], match[0], match[1], -preference)
        if best is None or rank > best:
            best, chosen = rank, offered
    return chosen
