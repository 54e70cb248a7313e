"""The postgres adapters pass the port conformance suites on the real server, each test in a
fresh migrated schema; the saver as threadkeeper configures it passes LangGraph's suite."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from sqlalchemy import text

from tests.support.postgres import fresh_schema
from threadkeeper.adapters.postgres import (
    FAIL_FAST,
    AdvisoryThreadLock,
    PostgresBackend,
    SchemaNotReady,
    advisory_key,
    open_postgres,
)
from threadkeeper.adapters.postgres.ledger import TABLE as LEDGER
from threadkeeper.adapters.postgres.lock import HOLDER
from threadkeeper.adapters.postgres.retention import IDLE_THREADS, TS_INDEX, iso_ts
from threadkeeper.conformance.followups import FollowUpsConformance, SqlFollowUpsHarness
from threadkeeper.conformance.retention import CheckpointRetentionHarness, RetentionConformance
from threadkeeper.conformance.run_lock import LockFactory, RunLockConformance
from threadkeeper.conformance.run_records import RunRecordsConformance
from threadkeeper.conformance.thread_lock import ThreadLockConformance, ThreadLockFactory
from threadkeeper.domain.locks import RunFences
from threadkeeper.domain.retention import sweep
from threadkeeper.domain.runs import RunRecords
from threadkeeper.domain.threads import ThreadRef

pytestmark = pytest.mark.integration


@pytest.fixture
async def backend(url: str) -> AsyncIterator[PostgresBackend]:
    async with open_postgres(url) as opened:
        yield opened


@pytest.fixture
async def replicas(url: str) -> AsyncIterator[list[AdvisoryThreadLock]]:
    """Four lock clients, each with its own lock session: four replicas of the service."""
    locks = [AdvisoryThreadLock(url, FAIL_FAST) for _ in range(4)]
    yield locks
    for lock in locks:
        await lock.close()


class TestAdvisoryThreadLock(RunLockConformance):
    @pytest.fixture
    def lock_factory(self, replicas: list[AdvisoryThreadLock]) -> LockFactory:
        turn = itertools.count()
        return lambda: replicas[next(turn) % len(replicas)]  # type: ignore[return-value]


class TestAdvisoryThreadLockClaims(ThreadLockConformance):
    @pytest.fixture
    def thread_lock_factory(self, replicas: list[AdvisoryThreadLock]) -> ThreadLockFactory:
        turn = itertools.count()
        return lambda: replicas[next(turn) % len(replicas)]

    @pytest.fixture
    def fences(self, backend: PostgresBackend) -> RunFences:
        return backend.fences


class TestPostgresRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self, backend: PostgresBackend) -> RunRecords:
        return backend.runs


class TestPostgresFollowUps(FollowUpsConformance):
    @pytest.fixture
    def harness(self, backend: PostgresBackend) -> SqlFollowUpsHarness:
        return SqlFollowUpsHarness(backend.followups)


class TestPostgresRetention(RetentionConformance):
    @pytest.fixture
    def harness(self, backend: PostgresBackend) -> CheckpointRetentionHarness:
        return CheckpointRetentionHarness(backend)


def test_advisory_keys_are_stable_signed_64_bit() -> None:
    key = advisory_key("acme:u1:t-1")
    assert key == advisory_key("acme:u1:t-1")
    assert -(2**63) <= key < 2**63
    assert key != advisory_key("acme:u1:t-2")


async def test_the_service_refuses_an_unmigrated_schema() -> None:
    with (
        fresh_schema(migrate=False) as bare,
        pytest.raises(SchemaNotReady, match="threadkeeper migrate"),
    ):
        async with open_postgres(bare):
            pytest.fail("opened without a schema")


async def test_idle_threads_come_from_the_checkpoint_ts_through_its_index(
    backend: PostgresBackend, url: str
) -> None:
    """A thread is idle by its newest checkpoint's ``ts`` — also when its run record was never
    saved — and the query can use ``ix_tk_checkpoints_ts``."""
    harness = CheckpointRetentionHarness(backend)
    old, fresh = ThreadRef("acme", "u1", "old"), ThreadRef("acme", "u1", "fresh")
    now = datetime(2026, 6, 1, tzinfo=UTC)
    await harness.seed_thread(old, last_activity=now - timedelta(days=100), messages=2)
    await harness.seed_thread(fresh, last_activity=now - timedelta(days=1), messages=2)
    async with backend.engine.begin() as conn:  # as if saving the run records had failed
        await conn.execute(text("DELETE FROM tk_run_records"))
    cutoff = now - timedelta(days=90)
    assert await backend.retention.idle_threads(cutoff, limit=10) == [old.key]
    # a newer checkpoint of the old thread makes it active again
    newer = empty_checkpoint()
    newer["ts"] = (now - timedelta(days=2)).isoformat()
    config: Any = {"configurable": {"thread_id": old.key, "checkpoint_ns": ""}}
    await backend.saver.base.aput(config, newer, {"step": 2}, {})  # type: ignore[arg-type]
    assert await backend.retention.idle_threads(cutoff, limit=10) == []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SET enable_seqscan = off")
        cursor = await conn.execute(
            "EXPLAIN " + IDLE_THREADS, {"cutoff": iso_ts(cutoff), "limit": 10}
        )
        plan = "\n".join(str(row[0]) for row in await cursor.fetchall())
    assert TS_INDEX in plan, plan


async def test_the_service_refuses_a_schema_behind_the_code(url: str) -> None:
    """A database migrated by an older release (Alembic one revision back) is refused too."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE tk_alembic_version SET version_num = '0002'")
    with pytest.raises(SchemaNotReady, match=r"at 0002, wanted 0010.*threadkeeper migrate"):
        async with open_postgres(url):
            pytest.fail("opened a schema behind the code")


async def test_erasure_finds_a_thread_through_checkpoint_metadata_alone(
    backend: PostgresBackend,
) -> None:
    """A thread with no run record (its save failed) is still the user's: its checkpoints carry
    ``tenant_id``/``user_id`` in their metadata, which erasure queries."""
    harness = CheckpointRetentionHarness(backend)
    mine, theirs = ThreadRef("acme", "erased", "t1"), ThreadRef("acme", "other", "t1")
    for thread in (mine, theirs):
        await harness.seed_thread(thread, last_activity=datetime.now(UTC), messages=4)
    async with backend.engine.begin() as conn:
        await conn.execute(text("DELETE FROM tk_run_records"))
    assert await backend.retention.user_thread_keys("acme", "erased") == {mine.key}
    receipt = await backend.retention.erase_user("acme", "erased")
    assert (receipt.threads, receipt.messages) == (1, 4)
    assert not await harness.thread_exists(mine.key)
    assert await harness.thread_exists(theirs.key)


async def test_one_lock_session_holds_every_run_of_a_replica(url: str) -> None:
    """A replica holds its threads' locks on one session, not one connection per run in
    flight (which ran a busy replica out of connections): 60 runs hold their threads at once
    and the server sees their 60 locks on one session (whatever other sessions hold)."""
    lock = AdvisoryThreadLock(url, FAIL_FAST)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for index in range(60):
                await stack.enter_async_context(lock.hold(f"acme:u:t{index}", f"run-{index}"))
            assert await lock.holder("acme:u:t59") == "run-59"
            # only these threads' locks: other suites on the shared server hold their own,
            # as this other session does
            unsigned = [advisory_key(f"acme:u:t{i}") % 2**64 for i in range(60)]
            with psycopg.connect(url) as other, psycopg.connect(url) as conn:
                other.execute("SELECT pg_advisory_lock(4242)")
                held = conn.execute(
                    "SELECT count(DISTINCT pid), count(*) FROM pg_locks WHERE locktype = "
                    "'advisory' AND objsubid = 1 AND database = (SELECT oid FROM pg_database "
                    "WHERE datname = current_database()) AND (classid, objid) IN "
                    "(SELECT * FROM unnest(%s::oid[], %s::oid[]))",
                    ([u >> 32 for u in unsigned], [u & 0xFFFFFFFF for u in unsigned]),
                ).fetchone()
            assert held == (1, 60), "all 60 locks, on one session"
    finally:
        await lock.close()


async def test_a_lost_lock_session_frees_the_threads_and_fences_the_runs(
    url: str, backend: PostgresBackend
) -> None:
    """The lock session dies mid-run (here: terminated by the server): another replica may
    take the thread, and its claim fences the first run out of storing anything."""
    first, second = AdvisoryThreadLock(url, FAIL_FAST), AdvisoryThreadLock(url, FAIL_FAST)
    try:
        async with first.hold("acme:u:t", "run-1", tenant_id="acme", user_id="u") as token:
            assert first._session is not None
            pid = first._session.info.backend_pid
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            async with second.hold("acme:u:t", "run-2", tenant_id="acme", user_id="u") as newer:
                assert not await backend.fences.holds("acme:u:t", token)
                assert await backend.fences.holds("acme:u:t", newer)
    finally:
        await first.close()
        await second.close()


async def test_a_thread_that_cannot_be_read_is_still_deleted(
    backend: PostgresBackend, url: str
) -> None:
    """Deletion must not depend on reading the thread: one with a missing message row is
    deleted (uncounted) instead of failing every retention sweep and erasure after it."""
    harness = CheckpointRetentionHarness(backend)
    broken, healthy = ThreadRef("acme", "u1", "broken"), ThreadRef("acme", "u1", "healthy")
    for thread in (broken, healthy):
        await harness.seed_thread(
            thread, last_activity=datetime(2026, 1, 1, tzinfo=UTC), messages=2
        )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"DELETE FROM {LEDGER} WHERE seq = "
            f"(SELECT min(seq) FROM {LEDGER} WHERE thread_id = %s)",
            (broken.key,),
        )
    backend.saver.forget()  # as a replica that has not read it yet
    report = await sweep(
        backend.retention, now=datetime(2026, 6, 1, tzinfo=UTC), older_than=timedelta(days=90)
    )
    assert report.deleted.threads == 2
    assert not await harness.thread_exists(broken.key)
    assert not await harness.thread_exists(healthy.key)
    with psycopg.connect(url) as conn:
        assert conn.execute(f"SELECT count(*) FROM {LEDGER}").fetchone() == (0,)


async def test_erasure_removes_rows_no_checkpoint_refers_to(
    backend: PostgresBackend, url: str
) -> None:
    """Message rows of a first commit whose checkpoint was never written, and the user's
    rate-limit rows, are the user's data too: erasure removes them (and only theirs)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for key in ("acme:go_ne:t-1", "acme:goxne:t-1", "acme:kept:t-1"):
            conn.execute(
                f"INSERT INTO {LEDGER} (thread_id, type, body) VALUES (%s, 'msgpack', %s)",
                (key, b"orphan"),
            )
        for key in ("acme:go_ne", "acme:kept"):
            conn.execute("INSERT INTO tk_run_rate_hits (key, at) VALUES (%s, now())", (key,))
    await backend.retention.erase_user("acme", "go_ne")
    with psycopg.connect(url) as conn:
        left = [r[0] for r in conn.execute(f"SELECT thread_id FROM {LEDGER} ORDER BY 1")]
        hits = [r[0] for r in conn.execute("SELECT key FROM tk_run_rate_hits")]
    assert left == ["acme:goxne:t-1", "acme:kept:t-1"]  # "_" is not a wildcard here
    assert hits == ["acme:kept"]


async def test_a_holder_letting_go_meanwhile_is_not_named_unknown(url: str) -> None:
    """Issue 9: a refused run looked the holder up after it had let go and answered 409
    naming run "unknown". Now the refused run looks once more, and takes the thread."""
    first = AdvisoryThreadLock(url, FAIL_FAST)
    holding = first.hold("acme:u:t", "ending")
    await holding.__aenter__()

    class Racing(AdvisoryThreadLock):
        async def _execute(self, query: str, params: Any) -> dict[str, Any] | None:
            row = await super()._execute(query, params)
            if query == HOLDER and holding is not None:
                await holding.__aexit__(None, None, None)  # the holder lets go right now
                return {"run_id": "ending", "released": True}
            return row

    second = Racing(url, FAIL_FAST)
    try:
        async with second.hold("acme:u:t", "next"):
            assert await first.holder("acme:u:t") == "next"
    finally:
        await first.close()
        await second.close()


async def test_an_unreachable_server_is_an_error_not_a_wait() -> None:
    """A lock session that cannot connect fails (503 ``unavailable``), not waits."""
    lock = AdvisoryThreadLock("postgresql://postgres@127.0.0.1:1/test", FAIL_FAST)
    try:
        with pytest.raises(psycopg.OperationalError):
            async with lock.hold("acme:u:t", "run-1"):
                pytest.fail("held a lock without a server")
    finally:
        await lock.close()


def test_the_ledger_migration_refuses_to_downgrade_over_stored_messages(url: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    from threadkeeper.adapters import migrations
    from threadkeeper.adapters.postgres import sqlalchemy_url

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {LEDGER} (thread_id, type, body) VALUES ('a:u:t', 'msgpack', 'x')"
        )
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn, pytest.raises(RuntimeError, match="unreadable"):
            command.downgrade(migrations.config(conn), "0002")
        with engine.connect() as conn:  # 0004 stepped down; 0003 refused
            assert migrations.current(conn) == "0003"
    finally:
        engine.dispose()
