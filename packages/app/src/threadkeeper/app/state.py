"""The agent state's messages channel reducer: :func:`merge_messages` is LangGraph's
``add_messages`` without its passes over the whole history on every merge (the agent's
``AgentState`` declares it, ``app.agent``).

``add_messages`` coerces the left list, checks every message for an id and builds an id →
position index of the whole list, on each merge into the channel (three a run: the input,
the model's answer, and the routing edge's fresh read of that answer): at 400 messages the
run's largest cost that grows with the thread (issue 12; ``turn_growth.py``,
"channel merges"). :func:`merge_messages` keeps the index of the list it returned, and the
next merge — whose left side is that very list — reuses it: the merge costs the new messages
plus a copy of the list and a comparison with its copy, both done in C, instead of Python
passes over the history.

A run's first merge is onto a new list — the checkpoint read back — of the messages the
thread's last merge returned: the index is found again by the list's first message. A kept
index is used only for a list equal, element by element, to the one it was made for; a
message changed in place (its id reassigned) would not be noticed — messages are values
here, as the checkpoint serializer's memo and the message ledger already assume.

The kept lists hold the thread's messages: they are emptied past ``_KEPT`` indexes or
:data:`KEPT_BYTES` of messages (``domain.caches.message_bytes``: an index made from a kept
one adds its new messages only — the rest are the same objects), and on every thread
deletion, erasure and memory reset of this process (``domain.caches.forget``).
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import BaseMessage, BaseMessageChunk, RemoveMessage
from langgraph.graph.message import add_messages

from threadkeeper.domain import caches
from threadkeeper.domain.caches import messages_bytes

_KEPT = 256
"""Indexes kept: one per thread whose run is in flight in this process, with room to spare."""
KEPT_BYTES = 64 << 20
"""... and messages of at most this many bytes (64 MiB) in all."""

_Entry = tuple[list[Any], list[Any], dict[str, int]]
"""(the merged list, a copy of it as returned, its id → position index)."""

_INDEXES: dict[int, _Entry] = {}
"""``id(merged)`` → its entry."""
_BY_FIRST: dict[int, _Entry] = {}
"""``id(merged[0])`` → the same entry: a run's first merge is onto the list its checkpoint
was read as — a new list, but of the messages the thread's last merge returned."""


class _Kept:
    """The bytes of the kept entries' messages (each message counted once per entry that
    added it), and their forgetting (``caches.forget``)."""

    size = 0

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        _INDEXES.clear()
        _BY_FIRST.clear()
        self.size = 0


_kept = _Kept()
caches.register(_kept)


def _plain(messages: list[Any]) -> bool:
    """Messages ``add_messages`` would leave as they are (no dicts, strings or chunks to
    coerce, no removals)."""
    return all(
        issubclass(kind, BaseMessage)
        and not issubclass(kind, BaseMessageChunk)
        and not issubclass(kind, RemoveMessage)
        for kind in set(map(type, messages))
    )


def _index_of(left: list[Any]) -> tuple[dict[str, int], int] | None:
    """The id → position index of ``left`` — the one kept for it when ``left`` is a list this
    function returned and is unchanged since (compared element by element, by identity first,
    in C) — with the bytes of ``left``'s messages a new entry adds to those kept (none when
    its index was kept: they are kept already), or ``None`` where ``add_messages`` must do
    the merge (a message without an id, which it would give one)."""
    known = _INDEXES.get(id(left))
    if known is not None and known[0] is left and known[1] == left:
        return known[2].copy(), 0  # left may be merged again (a conditional edge's fresh read)
    if left:  # the list the thread's last merge returned, read back from the checkpoint
        known = _BY_FIRST.get(id(left[0]))
        if known is not None and known[1][0] is left[0] and known[1] == left:
            return known[2].copy(), 0
    if not _plain(left):
        return None
    index = {m.id: i for i, m in enumerate(left)}
    return None if None in index else (index, messages_bytes(left))


def merge_messages(left: Any, right: Any) -> Any:
    """``add_messages(left, right)``: the same list, the same message objects, the same ids
    given to new messages that had none. Delegates to ``add_messages`` for anything but plain
    messages with ids on the left and plain messages on the right (``RemoveMessage``, dicts,
    chunks)."""
    if not isinstance(right, list):
        right = [right]
    if not isinstance(left, list) or not _plain(right):
        return add_messages(left, right)
    found = _index_of(left)
    if found is None:
        return add_messages(left, right)
    index, size = found
    for message in right:  # as add_messages does: a new message gets an id
        if message.id is None:
            message.id = str(uuid.uuid4())
    merged = left.copy()
    for message in right:
        position = index.get(message.id)
        if position is None:
            index[message.id] = len(merged)
            merged.append(message)
        else:
            merged[position] = message
    size += messages_bytes(right)
    if len(_INDEXES) >= _KEPT or _kept.size + size > KEPT_BYTES:
        _kept.forget(frozenset(), None)
        size = messages_bytes(merged)  # the one entry kept holds them all
    entry = (merged, merged.copy(), index)
    _INDEXES[id(merged)] = entry
    _kept.size += size
    if merged:
        _BY_FIRST[id(merged[0])] = entry
    return merged


__all__ = ["merge_messages"]
