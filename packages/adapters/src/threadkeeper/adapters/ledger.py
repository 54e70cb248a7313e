"""Each message of a thread stored once: the checkpoint's message list becomes a list of refs.

With ``add_messages`` every checkpoint carries the thread's whole message list, so a turn
deserializes and re-serializes all of it and writes it again as one blob: per-turn time and
write volume grow with the thread (docs/storage-postgres.md). ``MessageLedger`` wraps a
LangGraph saver and changes only how that one channel is stored; where the rows live is a
:class:`LedgerRows` (``tk_checkpoint_messages`` on PostgreSQL, ``postgres.ledger``, and in the
embedded profile's SQLite file, ``embedded.ledger``):

- ``aput``: each message of the list that is not already stored with the same content goes to
  the rows table (one row per message version, ``seq`` from a sequence that never hands out a
  number twice, the message in the compact form of ``ledger_codec``: its non-default fields);
  the checkpoint's value for the channel is ``{"tk_message_refs": [seq, …]}`` instead of the
  messages. A turn writes its own new messages and a list of integers.
- ``aget_tuple`` / ``alist``: refs are resolved back into the message list — from an
  in-process cache of message objects by ``seq`` (a ``seq`` names one immutable row for ever,
  so a cached object can never be stale, whichever replica wrote the thread meanwhile), and
  from one query for what the cache lacks (another replica's writes, a restart). The cache is
  an LRU of ``cache_messages`` message objects (20,000 by default: the messages of 50 threads
  of 200 turns; a ~900-byte message object takes ~3 KB, so ~60 MB) of at most ``cache_bytes``
  (:data:`CACHE_BYTES`, 64 MiB, estimated by ``caches.message_bytes``), plus, for the
  ``hot_threads`` (64) most recently used threads — at most ``cache_messages`` messages and
  ``cache_bytes`` in all — the last list read or written: a turn that starts from it resolves
  and stores that prefix by identity, so the time per turn does not grow with the thread.
  A deleted thread's objects (every one cached, whether or not its newest checkpoint still
  refers to it) are dropped with its rows; on another replica they are never served again
  (a ``seq`` is never reused, and the thread's checkpoints that named them are gone) and go
  with the bounds.
- ``aprune(keep_latest)`` prunes the checkpoints, then deletes message rows the newest
  checkpoint no longer refers to — only for threads where this process replaced or dropped a
  message, or failed to store a checkpoint after storing its messages (append-only threads have
  nothing to collect). ``adelete_thread`` deletes the thread's rows.

The graph still sees ``add_messages`` state with the whole list: ``GET /messages``, replay and
trimming at the model call are unchanged. A checkpoint written before the ledger (a list in the
stored value) is read as it is and converted by the next ``aput``.

Messages are never mutated in place (LangGraph's reducers and threadkeeper's hooks replace a
message, keeping or changing its id), so the cache can hand the same objects to every read.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from threadkeeper.adapters.ledger_codec import decode as decode_row
from threadkeeper.adapters.ledger_codec import encode as encode_row
from threadkeeper.adapters.serde import reading, thread_of
from threadkeeper.domain.caches import message_bytes

log = logging.getLogger(__name__)

TABLE = "tk_checkpoint_messages"
CACHE_BYTES = 64 << 20
"""The message cache's bound in bytes, and the hot lists' (``caches.message_bytes``), unless
a ledger is given its own."""
REFS = "tk_message_refs"
CHANNEL = "messages"


async def _replay(items: list[CheckpointTuple]) -> AsyncIterator[CheckpointTuple]:
    for item in items:
        yield item


class LedgerCorrupt(RuntimeError):
    """A checkpoint refers to message rows that are not there."""


def refs_of(value: Any) -> list[int] | None:
    """The seqs of a stored refs value; None when the value is not one."""
    if isinstance(value, dict) and REFS in value:
        return list(map(int, value[REFS]))
    return None


class LedgerRows(ABC):
    """Where a ledger's rows live: ``TABLE`` (``seq``, ``thread_id``, ``type``, ``body``) in one
    database. ``seq`` is assigned by the database and never reused, even after a delete."""

    @abstractmethod
    async def fetch(self, thread_id: str, seqs: list[int]) -> list[tuple[int, str, bytes]]:
        """``(seq, type, body)`` of the thread's rows among ``seqs`` (never another thread's)."""

    @abstractmethod
    async def insert(
        self, thread_id: str, rows: list[tuple[str, bytes]], conn: Any = None
    ) -> list[int]:
        """Insert ``(type, body)`` rows in order, on ``conn`` (in its transaction) or, without
        one, committed on a connection of the rows' own; their seqs, in the same order."""

    @abstractmethod
    async def delete_thread(self, thread_id: str) -> None:
        """Delete every row of the thread."""

    @abstractmethod
    async def delete_except(self, thread_id: str, keep: list[int], conn: Any = None) -> int:
        """Delete the thread's rows whose seq is not in ``keep``; how many."""


@dataclass
class _Thread:
    """What this process last read or wrote of one thread: message id → seq (the objects
    themselves live only in the bounded message cache)."""

    head: dict[str, int] = field(default_factory=dict)
    built_from: int = 0
    """How many messages the list ``head`` was built from had (with the hot list of the same
    length — the two are always set together — a store that extends that list by identity
    updates ``head`` for the new messages only)."""
    dirty: bool = False
    """Rows may exist that the newest checkpoint does not refer to."""


@dataclass(frozen=True, slots=True)
class _Cached:
    """A cached message object, the thread it was read or written in, and its bytes."""

    message: BaseMessage
    thread_id: str
    size: int


@dataclass(frozen=True, slots=True)
class _Hot:
    """A thread's last list read or written: its seqs, its messages, their bytes."""

    seqs: list[int]
    messages: list[BaseMessage]
    size: int


def _size(messages: Sequence[BaseMessage]) -> int:
    return sum(map(message_bytes, messages))


@dataclass(frozen=True, slots=True)
class StoredRefs:
    """A checkpoint about to be stored with refs (``MessageLedger.refs_in``)."""

    checkpoint: Checkpoint
    """The checkpoint to store: the message list replaced by refs."""
    apply: Callable[[], None]
    """The cache update, to run once the rows are committed."""
    replaced: bool
    """A message this process last knew in the thread is no longer referred to: its row is
    garbage once this checkpoint is the thread's newest."""


class MessageLedger(BaseCheckpointSaver[Any]):
    """Wraps a LangGraph saver (see the module docstring). Async API only.

    ``whole_checkpoints``: the saver stores each checkpoint with every channel's value (SQLite)
    rather than only the channels in ``new_versions`` (PostgreSQL's blobs): then every put
    carries the list, changed or not, and every put is given refs. ``buffered_lists``: the
    saver's ``alist`` holds a lock the rows' reads need until it is exhausted
    (``AsyncSqliteSaver`` holds its connection's lock across the iteration): ``alist`` reads
    the saver's listing whole before it resolves refs."""

    def __init__(
        self,
        base: BaseCheckpointSaver[Any],
        rows: LedgerRows,
        *,
        whole_checkpoints: bool = False,
        buffered_lists: bool = False,
        cache_messages: int = 20_000,
        cache_threads: int = 2_000,
        hot_threads: int = 64,
        cache_bytes: int | None = None,
    ) -> None:
        super().__init__(serde=base.serde)
        self.base = base
        self.rows = rows
        self.whole_checkpoints = whole_checkpoints
        self.buffered_lists = buffered_lists
        self._messages: OrderedDict[int, _Cached] = OrderedDict()
        self._of_thread: dict[str, set[int]] = {}
        """The seqs of ``_messages`` by thread: a deleted thread's are all dropped."""
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._hot: OrderedDict[str, _Hot] = OrderedDict()
        """The last list read or written, per recently used thread: a turn that starts from
        it resolves and stores its prefix by identity, without a per-message lookup."""
        self._max_messages = cache_messages
        self._max_threads = cache_threads
        self._max_hot = hot_threads
        self._budget = cache_bytes
        self._message_bytes = 0
        self._hot_messages = 0
        self._hot_bytes = 0

    # -- cache ------------------------------------------------------------------------------

    def _thread(self, thread_id: str) -> _Thread:
        entry = self._threads.get(thread_id)
        if entry is None:
            entry = self._threads[thread_id] = _Thread()
            if len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)
        else:
            self._threads.move_to_end(thread_id)
        return entry

    @property
    def max_bytes(self) -> int:
        return CACHE_BYTES if self._budget is None else self._budget

    def _cached(self, seq: int) -> BaseMessage | None:
        entry = self._messages.get(seq)
        return entry.message if entry is not None else None

    def _remember(self, thread_id: str, seq: int, message: BaseMessage) -> None:
        entry = self._messages.get(seq)
        if entry is not None and entry.message is message:
            self._messages.move_to_end(seq)
            return
        if entry is not None:
            self._uncache(seq)
        entry = _Cached(message, thread_id, message_bytes(message))
        self._messages[seq] = entry
        self._of_thread.setdefault(thread_id, set()).add(seq)
        self._message_bytes += entry.size
        limit = self.max_bytes
        while self._messages and (
            len(self._messages) > self._max_messages or self._message_bytes > limit
        ):
            self._uncache(next(iter(self._messages)))

    def _uncache(self, seq: int) -> None:
        entry = self._messages.pop(seq, None)
        if entry is None:
            return
        self._message_bytes -= entry.size
        seqs = self._of_thread.get(entry.thread_id)
        if seqs is not None:
            seqs.discard(seq)
            if not seqs:
                del self._of_thread[entry.thread_id]

    def _set_hot(self, thread_id: str, hot: _Hot) -> None:
        self._pop_hot(thread_id)
        self._hot[thread_id] = hot
        self._hot_messages += len(hot.messages)
        self._hot_bytes += hot.size
        # bounded by threads, by messages and by bytes: a few very long threads must not hold
        # more than the message cache itself
        limit = self.max_bytes
        while self._hot and (
            len(self._hot) > self._max_hot
            or self._hot_messages > self._max_messages
            or self._hot_bytes > limit
        ):
            self._pop_hot(next(iter(self._hot)))

    def _pop_hot(self, thread_id: str) -> None:
        hot = self._hot.pop(thread_id, None)
        if hot is not None:
            self._hot_messages -= len(hot.messages)
            self._hot_bytes -= hot.size

    @property
    def cached_bytes(self) -> int:
        """The bytes of the cached messages and of the hot lists (``caches.message_bytes``;
        a message in both counted twice)."""
        return self._message_bytes + self._hot_bytes

    def forget(self) -> None:
        """Drop the in-process cache (tests and benchmarks: what a fresh replica sees)."""
        self._messages.clear()
        self._of_thread.clear()
        self._threads.clear()
        self._hot.clear()
        self._message_bytes = self._hot_messages = self._hot_bytes = 0

    # -- refs -> messages -------------------------------------------------------------------

    async def _resolve(self, thread_id: str, seqs: list[int]) -> list[BaseMessage]:
        hot = self._hot.get(thread_id)
        if hot is not None and hot.seqs == seqs:  # what this process last read or wrote
            self._hot.move_to_end(thread_id)
            return list(hot.messages)
        found: dict[int, BaseMessage] = {}
        missing: list[int] = []
        for seq in seqs:
            message = self._cached(seq)
            if message is None:
                missing.append(seq)
            else:
                found[seq] = message
        if missing:
            for seq, type_, body in await self.rows.fetch(thread_id, missing):
                found[seq] = decode_row(type_, body, self.serde)
            absent = [s for s in missing if s not in found]
            if absent:
                raise LedgerCorrupt(
                    f"thread {thread_id!r}: checkpoint refers to {len(absent)} missing "
                    f"message rows (first seq {absent[0]})"
                )
        messages = [found[seq] for seq in seqs]
        for seq in seqs:
            self._remember(thread_id, seq, found[seq])
        entry = self._thread(thread_id)
        entry.head = {m.id: seq for seq, m in zip(seqs, messages, strict=True) if m.id is not None}
        entry.built_from = len(messages)
        self._set_hot(thread_id, _Hot(list(seqs), list(messages), _size(messages)))
        return messages

    async def _loaded(self, item: CheckpointTuple | None) -> CheckpointTuple | None:
        if item is None:
            return None
        values = item.checkpoint["channel_values"]
        seqs = refs_of(values.get(CHANNEL))
        if seqs is not None:
            thread_id = str(item.config["configurable"]["thread_id"])
            values[CHANNEL] = await self._resolve(thread_id, seqs)
        return item

    # -- messages -> refs -------------------------------------------------------------------

    def _hot_prefix(self, thread_id: str, messages: Sequence[Any]) -> int:
        """How many leading messages are those of the hot list (0 without one): the same
        objects (or equal ones), so the same rows."""
        hot = self._hot.get(thread_id)
        if hot is None or not hot.messages or len(messages) < len(hot.messages):
            return 0
        known = hot.messages
        # a list comparison: identity first, in C, then equality for what is not identical
        return len(known) if list(messages[: len(known)]) == known else 0

    async def _store(
        self, thread_id: str, messages: Sequence[BaseMessage], conn: Any = None, prefix: int = 0
    ) -> tuple[list[int], Callable[[], None], bool]:
        """Insert the messages not yet stored (on ``conn``, in its transaction, or committed
        by the rows' own connection); their seqs, the cache update to apply once the rows are
        committed (a rolled-back insert must leave the cache as it was: its seqs never
        existed), and whether a message last known here is no longer referred to. ``prefix``:
        the leading messages that are the hot list's (``_hot_prefix``)."""
        entry = self._thread(thread_id)
        seqs: list[int | None] = []
        new: list[tuple[int, BaseMessage]] = []  # (position, message)
        hot = self._hot[thread_id] if prefix else None
        if hot is not None:
            seqs.extend(hot.seqs)  # the same objects as last time: the same rows
        for position in range(prefix, len(messages)):
            message = messages[position]
            known = entry.head.get(message.id) if message.id is not None else None
            cached = self._cached(known) if known is not None else None
            if (
                known is not None
                and cached is not None
                and (cached is message or cached == message)
            ):
                seqs.append(known)
            else:  # new, replaced, or no longer cached (stored again; the old row is collected)
                seqs.append(None)
                new.append((position, message))
        if new:
            inserted = await self.rows.insert(
                thread_id, [encode_row(message, self.serde) for _, message in new], conn
            )
            for (position, _), seq in zip(new, inserted, strict=True):
                seqs[position] = seq
        final = [s for s in seqs if s is not None]
        added = [(seqs[position], message) for position, message in new]
        # extending the list ``head`` was built from keeps every seq ``head`` names
        extends = bool(prefix) and entry.built_from == prefix
        replaced = not extends and not set(entry.head.values()).issubset(final)
        tail = list(zip(final[prefix:], messages[prefix:], strict=True))

        # the hot list's bytes and the new messages': no pass over the whole list per turn
        size = hot.size + _size(messages[prefix:]) if hot is not None else _size(messages)

        def apply() -> None:
            for seq, message in added:
                assert seq is not None
                self._remember(thread_id, seq, message)
            entry = self._thread(thread_id)
            if extends and entry.built_from == prefix:
                entry.head.update((m.id, seq) for seq, m in tail if m.id is not None)
            else:
                if not set(entry.head.values()).issubset(final):  # a message replaced or dropped
                    entry.dirty = True
                entry.head = {
                    m.id: seq for seq, m in zip(final, messages, strict=True) if m.id is not None
                }
            entry.built_from = len(messages)
            self._set_hot(thread_id, _Hot(final, list(messages), size))

        return final, apply, replaced

    @staticmethod
    def _stored(checkpoint: Checkpoint, seqs: list[int]) -> Checkpoint:
        return {
            **checkpoint,
            "channel_values": {**checkpoint["channel_values"], CHANNEL: {REFS: seqs}},
        }

    def _message_list(
        self, config: RunnableConfig, checkpoint: Checkpoint, new_versions: ChannelVersions
    ) -> tuple[str, list[BaseMessage], int] | None:
        """The thread, the checkpoint's message list and its hot prefix (``_hot_prefix``), if
        the channel is to be stored as refs: a list of messages only (another graph's channel
        of that name is stored as it is)."""
        value = checkpoint["channel_values"].get(CHANNEL)
        if not (self.whole_checkpoints or CHANNEL in new_versions) or not isinstance(value, list):
            return None
        thread_id = str(config["configurable"]["thread_id"])
        prefix = self._hot_prefix(thread_id, value)
        if not all(isinstance(m, BaseMessage) for m in value[prefix:]):
            return None
        return thread_id, value, prefix

    async def refs_in(
        self,
        conn: Any,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> StoredRefs:
        """The checkpoint as it is to be stored in the caller's transaction on ``conn`` (a
        round's): its new messages inserted there, the list replaced by refs. A checkpoint
        without a message list is returned as it is."""
        found = self._message_list(config, checkpoint, new_versions)
        if found is None:
            return StoredRefs(checkpoint, lambda: None, replaced=False)
        thread_id, messages, prefix = found
        seqs, apply, replaced = await self._store(thread_id, messages, conn, prefix)
        return StoredRefs(self._stored(checkpoint, seqs), apply, replaced)

    def discard(self, thread_id: str) -> None:
        """After a rolled-back round: forget what this process knew of the thread (its next
        read fetches the committed state)."""
        self._pop_hot(thread_id)
        self._threads.pop(thread_id, None)

    # -- BaseCheckpointSaver ----------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with reading(thread_of(config)):  # a refused checkpoint or row: named and logged
            try:
                return await self._loaded(await self.base.aget_tuple(config))
            except LedgerCorrupt:
                # read again: the thread may have been deleted or pruned (by another replica)
                # between reading its checkpoint and reading its rows
                return await self._loaded(await self.base.aget_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        with reading(thread_of(config)):  # a refused checkpoint or row: named and logged
            listing = self.base.alist(config, filter=filter, before=before, limit=limit)
            if self.buffered_lists:
                listing = _replay([item async for item in listing])
            async for item in listing:
                with reading(thread_of(item.config)):
                    try:
                        loaded = await self._loaded(item)
                    except LedgerCorrupt:
                        if await self.base.aget_tuple(item.config) is None:
                            continue  # deleted or pruned while listed
                        raise
                assert loaded is not None
                yield loaded

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        found = self._message_list(config, checkpoint, new_versions)
        if found is None:
            return await self.base.aput(config, checkpoint, metadata, new_versions)
        thread_id, messages, prefix = found
        seqs, apply, _ = await self._store(thread_id, messages, prefix=prefix)
        apply()  # the rows are committed (autocommit)
        try:
            return await self.base.aput(
                config, self._stored(checkpoint, seqs), metadata, new_versions
            )
        except BaseException:
            self._thread(thread_id).dirty = True  # rows stored for a checkpoint that is not
            raise

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.base.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.base.adelete_thread(thread_id)
        await self.rows.delete_thread(str(thread_id))
        self._drop(str(thread_id))

    def _drop(self, thread_id: str) -> None:
        """Forget a deleted thread, and every message object of it this process caches —
        those its newest checkpoint no longer refers to, and those of a thread whose entry was
        evicted, too."""
        self._pop_hot(thread_id)
        self._threads.pop(thread_id, None)
        for seq in list(self._of_thread.get(thread_id, ())):
            self._uncache(seq)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.base.aprune(thread_ids, strategy=strategy)
        if strategy != "keep_latest":  # "delete": the threads' checkpoints are gone
            for thread_id in thread_ids:
                await self.rows.delete_thread(str(thread_id))
                self._drop(str(thread_id))
            return
        for thread_id in thread_ids:
            entry = self._threads.get(str(thread_id))
            if entry is not None and entry.dirty:
                await self.collect(str(thread_id))

    async def collect(self, thread_id: str) -> int:
        """Delete the thread's message rows that its newest checkpoint does not refer to."""
        latest = await self.base.aget_tuple({"configurable": {"thread_id": thread_id}})
        keep = refs_of(latest.checkpoint["channel_values"].get(CHANNEL)) if latest else None
        deleted = await self.rows.delete_except(thread_id, keep or [])
        entry = self._threads.get(thread_id)
        if entry is not None:
            entry.dirty = False
        return max(deleted, 0)

    def dirty(self, thread_id: str) -> bool:
        """Whether the thread may have message rows its newest checkpoint does not refer to
        (this process replaced or dropped a message, or stored rows for a checkpoint that was
        not stored), not yet deleted."""
        entry = self._threads.get(thread_id)
        return entry is not None and entry.dirty

    def collected(self, thread_id: str) -> None:
        """The thread's unreferenced rows were deleted by the caller (in its round)."""
        entry = self._threads.get(thread_id)
        if entry is not None:
            entry.dirty = False

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return self.base.get_next_version(current, channel)
