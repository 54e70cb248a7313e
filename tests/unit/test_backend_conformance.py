"""The in-memory backend (both transcript designs) passes the backend suite and the port
suites its parts implement; and its rounds are atomic against failures the suite cannot
provoke on a real profile (a store failing after the checkpoints were written)."""

from __future__ import annotations

import asyncio

import pytest

from threadkeeper.adapters.profile import StorageBackend
from threadkeeper.conformance.backend import (
    BackendConformance,
    Turn,
    head_of,
    new_ref,
    record_of,
    round_of,
    stage,
    store_round,
    transcript_of,
)
from threadkeeper.conformance.in_memory import InMemoryBackend
from threadkeeper.conformance.retention import CheckpointRetentionHarness, RetentionConformance
from threadkeeper.conformance.run_lock import LockFactory, RunLockConformance
from threadkeeper.conformance.run_records import RunRecordsConformance
from threadkeeper.conformance.thread_lock import ThreadLockConformance, ThreadLockFactory
from threadkeeper.conformance.transcript_archive import TranscriptArchiveConformance
from threadkeeper.domain.locks import RunFences
from threadkeeper.domain.runs import RunRecords
from threadkeeper.domain.transcript import TranscriptArchive


@pytest.fixture(params=[False, True], ids=["checkpoint-transcript", "archive-transcript"])
def memory_backend(request: pytest.FixtureRequest) -> InMemoryBackend:
    return InMemoryBackend(archive=bool(request.param))


class TestInMemoryBackend(BackendConformance):
    @pytest.fixture
    def open_backend(self, memory_backend: InMemoryBackend) -> StorageBackend:
        return memory_backend


class TestInMemoryBackendLock(RunLockConformance):
    @pytest.fixture
    def lock_factory(self) -> LockFactory:
        backend = InMemoryBackend()
        return lambda: backend.lock.lock


class TestInMemoryBackendClaims(ThreadLockConformance):
    @pytest.fixture
    def backend(self) -> InMemoryBackend:
        return InMemoryBackend()

    @pytest.fixture
    def thread_lock_factory(self, backend: InMemoryBackend) -> ThreadLockFactory:
        return lambda: backend.lock

    @pytest.fixture
    def fences(self, backend: InMemoryBackend) -> RunFences:
        return backend.fences


class TestInMemoryBackendRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self) -> RunRecords:
        return InMemoryBackend().runs


class TestInMemoryBackendArchive(TranscriptArchiveConformance):
    @pytest.fixture
    def archive(self) -> TranscriptArchive:
        archive = InMemoryBackend(archive=True).archive
        assert archive is not None
        return archive


class TestInMemoryBackendRetention(RetentionConformance):
    @pytest.fixture
    def harness(self) -> CheckpointRetentionHarness:
        return CheckpointRetentionHarness(InMemoryBackend())


# --- what the suite cannot provoke on a real profile ------------------------------------------


async def test_a_store_failing_after_the_checkpoints_leaves_nothing_of_the_round(
    memory_backend: InMemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run record's save fails after the archive and the checkpoints were written: both
    are put back as they were."""
    ref = new_ref()
    first = await store_round(memory_backend, ref, Turn.make(0))
    archived = await memory_backend.archive.count(ref.key) if memory_backend.archive else 0

    async def broken(record: object) -> bool:
        raise OSError("the disk is full")

    monkeypatch.setattr(memory_backend.runs, "save", broken)
    turn, run_id = Turn.make(1), "run-2"
    async with memory_backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id) as claim:
        with memory_backend.round(ref.key, claim) as work:
            await stage(memory_backend, ref, turn)
            with pytest.raises(OSError, match="disk"):
                await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
    assert await head_of(memory_backend, ref) == first.head
    assert await transcript_of(memory_backend, ref) == [
        (str(m.id), m.type, m.content) for m in first.turn.messages
    ]
    if memory_backend.archive is not None:
        assert await memory_backend.archive.count(ref.key) == archived
        assert await memory_backend.archive.find(ref.key, [str(turn.human.id)]) == []
    listed = memory_backend.saver.alist({"configurable": {"thread_id": ref.key}})
    assert len([c async for c in listed]) == 1, "only the first round's checkpoint"


async def test_a_claim_waits_for_the_round_being_stored() -> None:
    """A claim (a deletion's, another run's) never lands between a round's check of its claim
    and its writes: it waits for the round's ``transaction``."""
    backend = InMemoryBackend()
    ref = new_ref()
    async with backend.transaction:
        task = asyncio.ensure_future(
            backend.fences.claim(ref.key, ref.tenant_id, ref.user_id, "run-2")
        )
        await asyncio.sleep(0.05)
        assert not task.done()
    assert await task
