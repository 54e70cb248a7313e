"""Compact forms of what run records repeat: a window as ranges of the thread's message
order, a text (the rolling summary) as a delta of an earlier version.

A run record names what each model call was shown. Listing every message id per call and the
whole summary each time made the records ~3–8× the transcript of a long thread; here

- a **window** is a tuple of *segments*: ``(start, end)`` — the messages at positions
  ``start ≤ p < end`` of the thread's *order* (``thread_order``: human messages and final
  answers, which every profile's transcript keeps, in the same order), relative to the run's
  human message (position 0) — or an explicit id (a tool call or result, a truncated tool
  result's new id, anything not in the order);
- a **text** version is a tuple of segments over the lines of a base version: ``(start,
  end)`` keeps the base's lines ``start ≤ i < end``, a string is a new line. The rolling
  summary grows by a few lines per turn (and drops its oldest ones), so a version costs about
  the lines it adds.

Both are pure: ``decode(encode(x, order), order) == x`` for any ``x`` and ``order``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.domain.tokens import message_text

Segment = tuple[int, int] | str
"""A range ``(start, end)`` of an order (end exclusive), or one item given explicitly."""


def in_order(message: BaseMessage) -> bool:
    """Whether ``message`` is in the thread's order: a human message, or an answer (an AI
    message with text and no tool calls) — what the archive keeps and checkpoint state holds,
    in the same order, on every profile."""
    if isinstance(message, HumanMessage):
        return True
    if not isinstance(message, AIMessage) or message.tool_calls:
        return False
    text = message_text(message)
    return bool(text) and not text.isspace()  # text.strip(), without copying the text


def thread_order(messages: Sequence[BaseMessage]) -> list[str]:
    """The ids of the thread's messages that ``in_order`` keeps, oldest first."""
    return [str(m.id) for m in messages if in_order(m)]


def order_since(messages: Sequence[BaseMessage], wanted: Iterable[str], anchor: str) -> list[str]:
    """The end of ``thread_order(messages)`` from the oldest of ``wanted`` and ``anchor``
    (the whole order when one of them is not in it), read from the newest message back.

    Positions relative to the anchor's newest occurrence are the same in any part of the
    order that holds it and reaches the end, so ``encode_window(ids, order_since(messages,
    ids, anchor), anchor)`` equals ``encode_window(ids, thread_order(messages), anchor)``
    whenever every id of ``ids`` the order has is in ``wanted`` (a run's windows are the
    newest part of a long thread: its whole order need not be walked per run)."""
    missing = {*wanted, anchor}
    newest_first: list[str] = []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if in_order(message):
            name = str(message.id)
            newest_first.append(name)
            missing.discard(name)
            if not missing:
                break
    newest_first.reverse()
    return newest_first


def encode_segments(items: Sequence[str], order: Sequence[str]) -> tuple[Segment, ...]:
    """``items`` as ranges of ``order`` where consecutive items are consecutive in it, and as
    explicit items elsewhere."""
    size = len(order)
    first: dict[str, int] | None = None  # built when a few lookups have been needed
    lookups = 0
    out: list[Segment] = []
    for item in items:
        last = out[-1] if out else None
        if isinstance(last, tuple) and last[1] < size and order[last[1]] == item:
            out[-1] = (last[0], last[1] + 1)
            continue
        if first is None and lookups < _SCANS:  # a window is a few ranges: scan (in C)
            lookups += 1
            try:
                at: int | None = order.index(item)
            except ValueError:
                at = None
        else:
            if first is None:
                first = {}
                for index, known in enumerate(order):
                    first.setdefault(known, index)
            at = first.get(item)
        out.append(item if at is None else (at, at + 1))
    return tuple(out)


_SCANS = 8
"""Items ``encode_segments`` finds by a scan of the order before it indexes the order."""


def decode_segments(segments: Sequence[Segment], order: Sequence[str]) -> list[str]:
    """The items ``encode_segments`` encoded.

    Raises:
        ValueError: a range outside ``order`` (not the order the segments were made for).
    """
    out: list[str] = []
    for segment in segments:
        if isinstance(segment, str):
            out.append(segment)
            continue
        start, end = segment
        if not 0 <= start <= end <= len(order):
            raise ValueError(f"range {start}..{end} is outside an order of {len(order)}")
        out.extend(order[start:end])
    return out


def _anchor(order: Sequence[str], anchor: str) -> int | None:
    for index in range(len(order) - 1, -1, -1):
        if order[index] == anchor:
            return index
    return None


def encode_window(ids: Sequence[str], order: Sequence[str], anchor: str) -> tuple[Segment, ...]:
    """A model call's window ``ids`` as segments of the thread's ``order``, positions relative
    to ``anchor`` (the run's human message: its newest occurrence is position 0). Without the
    anchor in ``order`` every id is explicit."""
    at = _anchor(order, anchor)
    if at is None:
        return tuple(ids)
    return tuple(
        s if isinstance(s, str) else (s[0] - at, s[1] - at) for s in encode_segments(ids, order)
    )


def decode_window(segments: Sequence[Segment], order: Sequence[str], anchor: str) -> list[str]:
    """The ids ``encode_window`` encoded, given the thread's order then or since: the order
    only grows at its end (checkpoints), or is the archive, which the state's order is a
    contiguous part of — positions around the anchor are the same.

    Raises:
        ValueError: a range and no anchor in ``order``, or a range outside it.
    """
    if all(isinstance(s, str) for s in segments):
        return [str(s) for s in segments]
    at = _anchor(order, anchor)
    if at is None:
        raise ValueError(f"the window's anchor {anchor!r} is not in the thread's order")
    shifted = [s if isinstance(s, str) else (s[0] + at, s[1] + at) for s in segments]
    return decode_segments(shifted, order)


def text_digest(text: str) -> str:
    """A text's content address: 128 bits of its SHA-256, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def encode_text(text: str, base: str) -> tuple[Segment, ...]:
    """``text`` as segments over the lines of ``base`` (kept ranges, new lines)."""
    return encode_segments(text.split("\n"), base.split("\n"))


def decode_text(segments: Sequence[Segment], base: str) -> str:
    """The text ``encode_text`` encoded against ``base``."""
    return "\n".join(decode_segments(segments, base.split("\n")))


def delta_size(segments: Sequence[Segment]) -> int:
    """About how many bytes ``segments`` take stored (to choose a delta or the whole text)."""
    return sum(len(s.encode("utf-8")) + 3 if isinstance(s, str) else 12 for s in segments)


__all__ = [
    "Segment",
    "decode_segments",
    "decode_text",
    "decode_window",
    "delta_size",
    "encode_segments",
    "encode_text",
    "encode_window",
    "in_order",
    "order_since",
    "text_digest",
    "thread_order",
]
