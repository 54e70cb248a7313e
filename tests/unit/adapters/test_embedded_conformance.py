"""The embedded profile's adapters pass the same conformance suites as the in-memory ones, and
the profile as a whole passes the backend suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from threadkeeper.adapters.embedded import PROFILE, EmbeddedBackend, open_embedded
from threadkeeper.adapters.embedded.settings import EmbeddedSettings
from threadkeeper.adapters.profile import StorageBackend
from threadkeeper.conformance.backend import BackendConformance
from threadkeeper.conformance.followups import FollowUpsConformance, SqlFollowUpsHarness
from threadkeeper.conformance.isolation import IsolationConformance
from threadkeeper.conformance.retention import CheckpointRetentionHarness, RetentionConformance
from threadkeeper.conformance.run_lock import LockFactory, RunLockConformance
from threadkeeper.conformance.run_records import RunRecordsConformance
from threadkeeper.conformance.thread_lock import ThreadLockConformance, ThreadLockFactory
from threadkeeper.domain.locks import RunFences
from threadkeeper.domain.runs import RunRecords
from threadkeeper.domain.threads import ThreadScope


class TestEmbeddedRunLock(RunLockConformance):
    @pytest.fixture
    def lock_factory(self, backend: EmbeddedBackend) -> LockFactory:
        return lambda: backend.lock


class TestEmbeddedThreadLockClaims(ThreadLockConformance):
    @pytest.fixture
    def thread_lock_factory(self, backend: EmbeddedBackend) -> ThreadLockFactory:
        return lambda: backend.lock

    @pytest.fixture
    def fences(self, backend: EmbeddedBackend) -> RunFences:
        return backend.fences


class TestSqliteRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self, backend: EmbeddedBackend) -> RunRecords:
        return backend.runs


class TestSqliteFollowUps(FollowUpsConformance):
    @pytest.fixture
    def harness(self, backend: EmbeddedBackend) -> SqlFollowUpsHarness:
        return SqlFollowUpsHarness(backend.followups)


class TestEmbeddedRetention(RetentionConformance):
    @pytest.fixture
    def harness(self, backend: EmbeddedBackend) -> CheckpointRetentionHarness:
        return CheckpointRetentionHarness(backend)


class TestEmbeddedBackend(BackendConformance):
    """The profile as the registry opens it."""

    @pytest.fixture
    async def open_backend(self, tmp_path: Path) -> AsyncIterator[StorageBackend]:
        async with PROFILE.open(EmbeddedSettings(data_dir=str(tmp_path / "data"))) as opened:
            yield opened


async def test_a_second_open_of_the_data_dir_is_refused(tmp_path: Path) -> None:
    from threadkeeper.adapters.embedded import DataDirBusy

    async with open_embedded(tmp_path / "data"):
        with pytest.raises(DataDirBusy, match="in use by process"):
            async with open_embedded(tmp_path / "data"):
                pytest.fail("two processes on one data directory")
        async with open_embedded(tmp_path / "data", exclusive=False) as reader:
            assert (await reader.health()) == {"sqlite": "ok"}


async def test_an_index_added_since_is_created_on_an_existing_database(tmp_path: Path) -> None:
    """The embedded profile sets its tables up at start, without migrations: a database made
    before an index was added gets it when opened (``export-runs --tenant``'s pages)."""
    import sqlite3

    from threadkeeper.adapters.embedded.backend import DATABASE

    async with open_embedded(tmp_path):
        pass
    with sqlite3.connect(tmp_path / DATABASE) as db:
        db.execute("DROP INDEX ix_tk_run_records_tenant_created")
    async with open_embedded(tmp_path):
        pass
    with sqlite3.connect(tmp_path / DATABASE) as db:
        indexes = {row[1] for row in db.execute("PRAGMA index_list(tk_run_records)")}
    assert {"ix_tk_run_records_tenant_created", "ix_tk_run_records_created"} <= indexes


async def test_a_thread_keeps_only_its_newest_checkpoint(tmp_path: Path) -> None:
    """Each round's checkpoint holds the whole history; kept, every older one was a full copy
    of it (a 300-turn thread was 62 MB of checkpoints, and weighing or vacuuming it O(turns²)).
    The round prunes the thread to its newest checkpoint in its own transaction; replay of an
    earlier run still finds its messages (in the newest state, under the same ids)."""
    from sqlalchemy import text

    from threadkeeper.conformance.backend import Turn, new_ref, store_round

    async with open_embedded(tmp_path / "data") as backend:
        ref = new_ref()
        stored = [await store_round(backend, ref, Turn.make(i)) for i in range(4)]
        async with backend.runs.connect() as conn:
            rows = (
                await conn.execute(
                    text("SELECT checkpoint_id FROM checkpoints WHERE thread_id = :t"),
                    {"t": ref.key},
                )
            ).all()
        assert [r[0] for r in rows] == [stored[-1].head]
        first = stored[0]
        ids = [str(first.turn.human.id), str(first.turn.ai.id)]
        found = await backend.transcript.replay_messages(ref.key, first.head, ids)
        assert [found[i].content for i in ids] == [m.content for m in first.turn.messages]
        other = new_ref()
        await store_round(backend, other, Turn.make(9))
        kept = await backend.saver.aget_tuple({"configurable": {"thread_id": ref.key}})
        assert kept is not None, "another thread's round prunes only its own"


class TestEmbeddedIsolation(IsolationConformance):
    """Sibling ids (``u1`` / ``u10``, ``u_1`` / ``uX1``, ``a`` / ``A``) never see or delete
    each other's data (issue 26)."""

    @pytest.fixture
    async def open_backend(self, tmp_path: Path) -> AsyncIterator[StorageBackend]:
        async with PROFILE.open(EmbeddedSettings(data_dir=str(tmp_path / "data"))) as opened:
            yield opened


class TestEmbeddedIsolationGlobalScope(TestEmbeddedIsolation):
    scope = ThreadScope.GLOBAL
