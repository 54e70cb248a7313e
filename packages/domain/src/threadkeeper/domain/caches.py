"""The process caches that can hold a user's text: bounded by bytes, and told of deletions.

A run passes over a thread's messages, its summary and its prompt several times, and caches
keep what those passes compute by the objects or the texts themselves (the message ledger's
objects, the checkpoint serializer's memo, token counts by message, turn indexes, the
channel's merge indexes, the previous summary of each thread). So a cache holds the text
it was computed from, and two rules apply to every one (issue 26):

- **Bounded by bytes**, not only by entries: a cache counts what it keeps with
  :func:`text_bytes` / :func:`message_bytes` (an estimate of the memory the text or message
  object takes) and evicts, or empties, past its bound — 600 runs of ~11 KB messages grew
  count-bounded caches by 45 MB.
- **Told of deletions**: a cache that can hold a user's text registers itself here
  (:func:`register`); a thread's deletion and a user's erasure (and a memory reset) call
  :func:`forget` once the stores have deleted, and each cache drops what it holds of the
  threads or the user — exactly where it can tell (its entries are keyed by thread or user),
  everything where it cannot (a message object or a text says nothing of whose it is).

The caches that hand back a value (or a message) by the message *object* rest on a third
rule: **messages are values** — LangGraph and threadkeeper replace a message, never change one
in place. An assignment to a field is noticed (the caches compare the fields' identities), a
list of content blocks or tool calls changed in place is not. :func:`check_mutations` turns on
a mode that fingerprints what a cache remembered a message by and raises
:class:`CachedMessageMutated` when it is handed back changed; the test suites run with it on
(``tests/conftest.py``), so a change that mutates a cached message fails there.

Only this process's caches are reached: another replica's caches keep a deleted thread's
entries until their bounds evict them, and never serve them again (the keys they are found by
— a ledger row's ``seq``, a thread's stored texts — are gone with the thread).
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Iterable
from typing import Any, Final, Protocol

from langchain_core.messages import BaseMessage

MESSAGE_OVERHEAD: Final = 2048
"""Bytes a message object takes besides its text: the pydantic object, its ``__dict__``, id,
metadata dicts (a short human message ~0.9 KB, an answer with its metadata ~2.2 KB)."""
_BLOCK_OVERHEAD: Final = 256


def text_bytes(text: str) -> int:
    """The memory ``text`` takes (``sys.getsizeof``: 1, 2 or 4 bytes a character, and the
    object's header)."""
    return sys.getsizeof(text)


def message_bytes(message: BaseMessage) -> int:
    """An estimate of the memory ``message`` keeps alive: its text content (and the string
    values of its content blocks) plus :data:`MESSAGE_OVERHEAD` — read without a pass over
    the text."""
    content = message.__dict__.get("content")
    if isinstance(content, str):
        return sys.getsizeof(content) + MESSAGE_OVERHEAD
    size = MESSAGE_OVERHEAD
    for block in content or ():
        if isinstance(block, str):
            size += sys.getsizeof(block)
        elif isinstance(block, dict):
            size += _BLOCK_OVERHEAD + sum(
                sys.getsizeof(v) for v in block.values() if isinstance(v, str)
            )
    return size


def messages_bytes(messages: Iterable[BaseMessage]) -> int:
    return sum(map(message_bytes, messages))


class CachedMessageMutated(AssertionError):
    """A message a cache remembered was changed in place (``check_mutations`` mode): a bug —
    messages are values."""


_checking = False


def check_mutations(on: bool = True) -> None:
    """Fingerprint every message the identity caches remember, and check the fingerprint
    whenever one is handed back (costly: for tests)."""
    global _checking
    _checking = on


def fingerprint(message: BaseMessage) -> str | None:
    """What a cache remembers ``message`` by in ``check_mutations`` mode — the ``repr`` of what
    of it can change in place (a list content, tool calls) — or ``None`` when the mode is off
    (the default: no cost)."""
    if not _checking:
        return None
    fields = message.__dict__
    content = fields.get("content")
    mutable = [
        None if isinstance(content, str) else content,  # a str cannot change in place
        fields.get("tool_calls") or None,
        fields.get("invalid_tool_calls") or None,
    ]
    if mutable == [None, None, None]:
        return ""  # nothing that can change in place (an empty list growing is seen: not "")
    return repr(mutable)  # 2.5x cheaper than JSON; keys in their order (a reorder is a change)


def verify(message: BaseMessage, remembered: str | None, cache: str) -> None:
    """Raise :class:`CachedMessageMutated` if ``message`` no longer has the fingerprint
    ``cache`` remembered it by (nothing to check when none was taken)."""
    if remembered is not None and fingerprint(message) != remembered:
        text = (
            f"message {message.id!r} ({type(message).__name__}) held by {cache} was changed "
            "in place: messages are values (replace it, e.g. model_copy(update=...))"
        )
        # logged too: raised inside a msgpack ext hook, the exception itself is replaced by
        # the decoder's ValueError("ext_hook failed")
        logging.getLogger("threadkeeper.caches").error(text)
        raise CachedMessageMutated(text)


class Forgets(Protocol):
    """A cache that can hold a user's text."""

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        """Drop what is held of the threads (their keys) and of the user (tenant, user id):
        exactly, or everything where the cache cannot tell whose an entry is."""


_caches: weakref.WeakSet[Any] = weakref.WeakSet()


def register(cache: Forgets) -> None:
    """Tell ``cache`` of every deletion from now on (held weakly: a cache that goes away is
    forgotten)."""
    _caches.add(cache)


def forget(threads: Iterable[str] = (), user: tuple[str, str] | None = None) -> None:
    """The threads (keys) were deleted, or the user (tenant, user id) erased or their memory
    reset: every registered cache drops what it holds of them. Every cache is told even if
    one fails; the first failure is raised after."""
    deleted = frozenset(threads)
    failure: Exception | None = None
    for cache in list(_caches):
        try:
            cache.forget(deleted, user)
        except Exception as exc:  # pragma: no cover - a cache's bug; the rest still forget
            failure = failure or exc
    if failure is not None:  # pragma: no cover
        raise failure


__all__ = [
    "MESSAGE_OVERHEAD",
    "CachedMessageMutated",
    "Forgets",
    "check_mutations",
    "fingerprint",
    "forget",
    "message_bytes",
    "messages_bytes",
    "register",
    "text_bytes",
    "verify",
]
