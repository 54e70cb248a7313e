"""The in-memory backend: langgraph's ``InMemorySaver`` and ``InMemoryStore`` with the domain's
fakes, behind the same ``adapters.profile.StorageBackend`` contract as the real profiles.

What a database's transaction gives the real profiles, one ``asyncio.Lock`` gives here
(``InMemoryBackend.transaction``): a round is stored under it — the claim checked, the round
archived (``archive=True``), the staged checkpoints replayed into the saver, the run record
saved — and whatever fails on the way puts the saver and the archive back as they were, so
nothing of a failed round remains. Claiming a thread takes the same lock (as the real
profiles' claim rows are locked ``FOR UPDATE``): a claim never lands between a round's check
and its writes.

Two transcript designs, chosen by ``archive``:

- ``False``: the checkpoint state is the transcript (``CheckpointTranscript``, as embedded
  and postgres);
- ``True``: an ``InMemoryTranscriptArchive`` is, the checkpoints are a cache of the recent
  context (``ArchiveTranscript``, as redis-mysql), so a thread whose checkpoints are gone or
  behind starts cold from the archive.

A thread's activity (retention) is its newest run record's ``created_at``, as on embedded.
Everything is lost when the backend is dropped: it is for tests, demos and as the worked
example of ``docs/writing-a-backend.md``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from threadkeeper.adapters.atomic import SaverSink
from threadkeeper.adapters.checkpoint_retention import idle_memory
from threadkeeper.adapters.rounds import RoundsOf, RoundStore, RoundWrite
from threadkeeper.adapters.sql import CANCEL_WAIT_SECONDS
from threadkeeper.adapters.transcripts import ArchiveTranscript, CheckpointTranscript
from threadkeeper.domain.errors import ClaimLost
from threadkeeper.domain.followups import InMemoryFollowUps
from threadkeeper.domain.locks import ClaimedLock, InMemoryRunFences, InMemoryRunLock
from threadkeeper.domain.memory import MemoryKind, memory_namespace, user_namespace
from threadkeeper.domain.retention import ErasureReceipt, HeldDeletion
from threadkeeper.domain.runs import InMemoryRunRecords
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.summary import InMemorySummariesAhead
from threadkeeper.domain.transcript import InMemoryTranscriptArchive, Round, to_transcript

if TYPE_CHECKING:
    from threadkeeper.adapters.profile import ProfileRetention, StorageBackend
    from threadkeeper.domain.transcript import ToolInvocation

__all__ = [
    "InMemoryBackend",
    "MemoryArchive",
    "MemoryFences",
    "MemoryRetention",
    "MemoryRoundStore",
    "MemoryRunRecords",
]


# --- the stores, with what the backend needs beyond their ports ---------------------------


class MemoryRunRecords(InMemoryRunRecords):
    """``InMemoryRunRecords`` plus each thread's newest activity (retention)."""

    def _newest(self) -> dict[str, datetime]:
        newest: dict[str, datetime] = {}
        for (key, _), record in list(self._runs.items()):
            if key not in newest or record.created_at > newest[key]:
                newest[key] = record.created_at
        return newest

    async def thread_newest(self, thread_key: str) -> datetime | None:
        """When the thread's newest run was recorded (``None``: no run recorded)."""
        return self._newest().get(thread_key)

    async def thread_activity(self, before: datetime, *, limit: int) -> list[str]:
        """Keys of the threads whose newest run is older than ``before``, oldest first."""
        idle = sorted((at, key) for key, at in self._newest().items() if at < before)
        return [key for _, key in idle[:limit]]


@dataclass(frozen=True)
class _ArchiveState:
    rounds: list[Round] | None
    run_ids: set[tuple[str, str]]
    tools: dict[tuple[str, str], list[ToolInvocation]]


class MemoryArchive(InMemoryTranscriptArchive):
    """``InMemoryTranscriptArchive`` whose thread can be put back as it was (a round's
    rollback), and which lists a user's threads (erasure)."""

    def snapshot(self, thread_key: str) -> _ArchiveState:
        with self._mutex:
            rounds = self._rounds.get(thread_key)
            return _ArchiveState(
                rounds=None if rounds is None else list(rounds),
                run_ids={k for k in self._run_ids if k[0] == thread_key},
                tools={k: list(v) for k, v in self.tools.items() if k[0] == thread_key},
            )

    def restore(self, thread_key: str, state: _ArchiveState) -> None:
        with self._mutex:
            self._rounds.pop(thread_key, None)
            if state.rounds is not None:
                self._rounds[thread_key] = state.rounds
            self._run_ids.difference_update([k for k in self._run_ids if k[0] == thread_key])
            self._run_ids.update(state.run_ids)
            for key in [k for k in self.tools if k[0] == thread_key]:
                del self.tools[key]
            self.tools.update(state.tools)

    def user_threads(self, tenant_id: str, user_id: str) -> set[str]:
        return {
            key
            for key, rounds in list(self._rounds.items())
            if any((r.tenant_id, r.user_id) == (tenant_id, user_id) for r in rounds)
        }


class MemoryFences(InMemoryRunFences):
    """``InMemoryRunFences`` whose changes wait for a round being stored (``transaction``)."""

    def __init__(self, transaction: asyncio.Lock) -> None:
        super().__init__()
        self.transaction = transaction

    async def claim(self, thread_key: str, tenant_id: str, user_id: str, run_id: str) -> str:
        async with self.transaction:
            return await super().claim(thread_key, tenant_id, user_id, run_id)

    async def revoke_user(self, tenant_id: str, user_id: str) -> list[str]:
        async with self.transaction:
            return await super().revoke_user(tenant_id, user_id)

    async def forget_user(self, tenant_id: str, user_id: str) -> None:
        async with self.transaction:
            await super().forget_user(tenant_id, user_id)

    async def forget(self, thread_key: str) -> None:
        async with self.transaction:
            await super().forget(thread_key)


@dataclass(frozen=True)
class _SaverState:
    storage: dict[str, dict[str, Any]] | None
    writes: dict[tuple[str, str, str], dict[Any, Any]]
    blobs: dict[tuple[Any, ...], Any]


def saver_snapshot(saver: InMemorySaver, thread_id: str) -> _SaverState:
    """What ``saver`` holds of ``thread_id`` (its entries are immutable tuples)."""
    stored = saver.storage.get(thread_id)
    return _SaverState(
        storage=None if stored is None else {ns: dict(c) for ns, c in stored.items()},
        writes={k: dict(v) for k, v in saver.writes.items() if k[0] == thread_id},
        blobs={k: v for k, v in saver.blobs.items() if k[0] == thread_id},
    )


def saver_restore(saver: InMemorySaver, thread_id: str, state: _SaverState) -> None:
    """Put ``saver``'s entries of ``thread_id`` back to ``state``."""
    saver.delete_thread(thread_id)
    if state.storage is not None:
        saver.storage[thread_id] = defaultdict(dict, state.storage)
    saver.writes.update(state.writes)
    saver.blobs.update(state.blobs)


# --- the round -------------------------------------------------------------------------------


class MemoryRoundStore(RoundStore):
    """A round under the backend's ``transaction``: the claim checked, the round archived
    (archive backends), the staged checkpoints replayed into the saver, the run record saved;
    on any failure the saver and the archive are put back as they were."""

    def __init__(self, backend: InMemoryBackend) -> None:
        self.backend = backend

    async def commit(self, write: RoundWrite) -> str | None:
        backend, key = self.backend, write.thread_key
        async with backend.transaction:
            if not await backend.fences.holds(key, write.claim):
                raise ClaimLost("the run lost its claim on the thread before storing its round")
            record = write.stored_record()
            usage_before = memory_usage(backend, key).by_kind()
            saver_before = saver_snapshot(backend.saver, key)
            archive_before = backend.archive.snapshot(key) if backend.archive else None
            try:
                if backend.archive is not None:
                    if not write.round.ai.content.strip():
                        raise RuntimeError("the round has no answer text to archive")
                    await backend.archive.append_round(write.round, write.tools)
                await write.staging.replay(SaverSink(backend.saver))
                if not await backend.runs.save(record):  # as a unique key refuses it
                    raise RuntimeError(f"run {record.run_id} is already stored in this thread")
                backend.followups.record(
                    write.followups, key, record.tenant_id, record.user_id, record.run_id
                )
            except BaseException:
                saver_restore(backend.saver, key, saver_before)
                if backend.archive is not None and archive_before is not None:
                    backend.archive.restore(key, archive_before)
                raise
            after = memory_usage(backend, key).by_kind()
        for kind, size in after.items():  # what the round added: its payloads' bytes
            if size > usage_before[kind]:
                write.written[kind] = size - usage_before[kind]
        return write.checkpoint_id()


# --- retention -------------------------------------------------------------------------------


async def delete_prefix(store: BaseStore, prefix: tuple[str, ...]) -> int:
    """Delete every item under a namespace prefix; how many were deleted."""
    deleted = 0
    for namespace in await store.alist_namespaces(prefix=prefix, limit=10_000):
        while items := await store.asearch(namespace, limit=1000):
            for item in items:
                await store.adelete(namespace, item.key)
                deleted += 1
    return deleted


class MemoryRetention(HeldDeletion):
    """``ProfileRetention`` over the backend; deletions hold the thread (``HeldDeletion``)."""

    def __init__(self, backend: InMemoryBackend) -> None:
        self.backend = backend
        self.lock = backend.lock

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        return await self.backend.runs.thread_activity(cutoff, limit=limit)

    async def is_idle(self, thread_key: str, cutoff: datetime) -> bool:
        newest = await self.backend.runs.thread_newest(thread_key)
        return newest is None or newest < cutoff

    async def _counted(self, thread_key: str) -> tuple[int, bool]:
        """(the transcript's messages, whether the thread has a checkpoint)."""
        head = await self.backend.saver.aget_tuple(
            {"configurable": {"thread_id": thread_key, "checkpoint_ns": ""}}
        )
        if self.backend.archive is not None:
            return await self.backend.archive.count(thread_key), head is not None
        if head is None:
            return 0, False
        messages = head.checkpoint.get("channel_values", {}).get("messages") or []
        return len(to_transcript(messages)), True

    async def _delete_held(self, thread_key: str) -> ErasureReceipt:
        messages, exists = await self._counted(thread_key)
        if self.backend.archive is not None:
            messages = await self.backend.archive.delete_thread(thread_key)
        await self.backend.saver.adelete_thread(thread_key)
        await self.backend.followups.cancel_thread(thread_key, wait_seconds=CANCEL_WAIT_SECONDS)
        runs, feedback = await self.backend.runs.delete_thread(thread_key)
        self.backend.summaries.forget(thread_key=thread_key)
        await self.backend.fences.forget(thread_key)
        found = exists or runs > 0 or messages > 0
        return ErasureReceipt(threads=int(found), messages=messages, feedback=feedback)

    async def would_delete(self, thread_keys: Sequence[str]) -> ErasureReceipt:
        total = ErasureReceipt()
        for key in thread_keys:
            messages, exists = await self._counted(key)
            feedback = await self.backend.runs.feedback_count(key)
            runs = await self.backend.runs.thread_newest(key) is not None
            found = exists or runs or messages > 0
            total = total + ErasureReceipt(threads=int(found), messages=messages, feedback=feedback)
        return total

    async def user_thread_keys(self, tenant_id: str, user_id: str) -> set[str]:
        keys = set(await self.backend.runs.user_threads(tenant_id, user_id))
        if self.backend.archive is not None:
            keys |= self.backend.archive.user_threads(tenant_id, user_id)
        async for item in self.backend.saver.alist(
            None, filter={"tenant_id": tenant_id, "user_id": user_id}
        ):
            keys.add(str(item.config["configurable"]["thread_id"]))
        return keys

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt:
        """Revoke the user's claims first (a run in flight then stores nothing, even on a
        thread nothing names yet), then delete every thread found, those included."""
        in_flight = set(await self.backend.fences.revoke_user(tenant_id, user_id))
        keys = await self.user_thread_keys(tenant_id, user_id) | in_flight
        receipt = await self.delete_threads(sorted(keys))
        await self.backend.followups.cancel_user(
            tenant_id, user_id, wait_seconds=CANCEL_WAIT_SECONDS
        )
        _, stray_feedback = await self.backend.runs.erase_user(tenant_id, user_id)
        self.backend.summaries.forget(user=(tenant_id, user_id))
        items = await delete_prefix(self.backend.store, user_namespace(tenant_id, user_id))
        await self.backend.fences.forget_user(tenant_id, user_id)
        remaining = await self.remaining(tenant_id, user_id, sorted(keys))
        return receipt + ErasureReceipt(
            memory_items=items, feedback=stray_feedback, remaining=remaining
        )

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        left = len(await self.user_thread_keys(tenant_id, user_id))
        left += self.backend.followups.rows_of(tenant_id, user_id, thread_keys)
        left += self.backend.summaries.rows_of(tenant_id, user_id, thread_keys)
        left += len(await self.backend.runs.user_feedback(tenant_id, user_id))
        for key in thread_keys:
            config: Any = {"configurable": {"thread_id": key, "checkpoint_ns": ""}}
            left += int(await self.backend.saver.aget_tuple(config) is not None)
        for kind in MemoryKind:
            space = memory_namespace(tenant_id, user_id, kind)
            left += len(await self.backend.store.asearch(space, limit=10_000))
        return {"memory": left}

    async def reset_memory(self, tenant_id: str, user_id: str) -> int:
        await self.backend.followups.cancel_user(
            tenant_id, user_id, wait_seconds=CANCEL_WAIT_SECONDS
        )
        deleted = await delete_prefix(self.backend.store, user_namespace(tenant_id, user_id))
        await self.backend.runs.forget_memory(tenant_id, user_id)
        return deleted

    async def idle_memory(self, cutoff: datetime, *, limit: int) -> list[tuple[str, str]]:
        return await idle_memory(self.backend.store, self.backend.runs, cutoff, limit=limit)


# --- storage usage ---------------------------------------------------------------------------


def payload_bytes(value: Any) -> int:
    """The bytes of the serialized payloads in ``value`` (the saver's ``(type, bytes)``
    pairs, nested in its tuples and dicts; text as UTF-8)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, tuple | list):
        return sum(payload_bytes(item) for item in value)
    if isinstance(value, dict):
        return sum(payload_bytes(item) for item in value.values())
    return 0


def json_bytes(value: Any) -> int:
    return len(msgspec.json.encode(value))


def memory_usage(backend: InMemoryBackend, thread_key: str) -> StorageUsage:
    """What the in-memory backend keeps of the thread: the saver's serialized checkpoints,
    blobs and writes; the run records, tool audit, archived rounds and feedback as JSON."""
    saver = backend.saver
    checkpoints = payload_bytes(saver.storage.get(thread_key, {}))
    checkpoints += sum(
        payload_bytes(v) for k, v in list(saver.writes.items()) if k[0] == thread_key
    )
    checkpoints += sum(payload_bytes(v) for k, v in list(saver.blobs.items()) if k[0] == thread_key)
    runs = backend.runs
    records = sum(json_bytes(r) for (key, _), r in list(runs._runs.items()) if key == thread_key)
    notes = sum(json_bytes(f) for (key, _), f in list(runs._feedback.items()) if key == thread_key)
    archive = audit = 0
    if backend.archive is not None:
        rounds = list(backend.archive._rounds.get(thread_key, []))
        archive = sum(json_bytes([r.human, r.ai]) + len((r.summary or "").encode()) for r in rounds)
        audit = sum(
            json_bytes(v) for k, v in list(backend.archive.tools.items()) if k[0] == thread_key
        )
    return StorageUsage(
        checkpoints=checkpoints,
        run_records=records,
        archive=archive,
        audit=audit,
        feedback=notes,
    )


# --- the backend -----------------------------------------------------------------------------


class InMemoryBackend(RoundsOf):
    """Everything the service stores, in this process (see the module docstring).

    ``archive=True``: the transcript is an archive beside the checkpoints (cold start);
    ``False``: the checkpoint state is the transcript.
    """

    saver: InMemorySaver
    rate_windows: None = None
    """One process: the rate limit's windows are that process's."""

    def __init__(self, *, archive: bool = False) -> None:
        self.saver = InMemorySaver()
        self.store = InMemoryStore()
        self.runs = MemoryRunRecords()
        self.followups = InMemoryFollowUps()
        self.summaries = InMemorySummariesAhead()
        self.transaction = asyncio.Lock()
        """Held while a round is stored and while a claim changes (the module docstring)."""
        self.archive = MemoryArchive() if archive else None
        self.fences = MemoryFences(self.transaction)
        self.lock = ClaimedLock(InMemoryRunLock(), self.fences)
        self.rounds: MemoryRoundStore = MemoryRoundStore(self)
        self.transcript: CheckpointTranscript | ArchiveTranscript = (
            ArchiveTranscript(self.archive, self.checkpointer)
            if self.archive is not None
            else CheckpointTranscript(self.saver)
        )
        self.retention = MemoryRetention(self)

    async def health(self) -> dict[str, str]:
        return {"memory": "ok"}

    @property
    def storage_kinds(self) -> frozenset[str]:
        kept = {"checkpoints", "run_records", "feedback"}
        return frozenset(kept | ({"archive", "audit"} if self.archive is not None else set()))

    async def storage_usage(self, thread_key: str) -> StorageUsage:
        return memory_usage(self, thread_key)


if TYPE_CHECKING:  # mypy checks that the backend and its retention are what profiles offer

    def _conforms(backend: InMemoryBackend) -> tuple[StorageBackend, ProfileRetention]:
        return backend, backend.retention
