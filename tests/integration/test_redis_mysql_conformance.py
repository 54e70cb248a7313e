"""The redis-mysql adapters pass the port conformance suites on real servers: MariaDB (a fresh
migrated database per test) and Redis Stack (a private server for the module)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from redis.asyncio import Redis
from sqlalchemy.exc import DBAPIError

from tests.support.mysql import fresh_database, query
from tests.support.redis_stack import PrivateRedis
from threadkeeper.adapters.redis_mysql import (
    RedisMysqlBackend,
    RedisRunLock,
    SchemaNotReady,
    open_redis_mysql,
)
from threadkeeper.conformance.followups import FollowUpsConformance, SqlFollowUpsHarness
from threadkeeper.conformance.retention import CheckpointRetentionHarness, RetentionConformance
from threadkeeper.conformance.run_lock import LockFactory, RunLockConformance
from threadkeeper.conformance.run_records import RunRecordsConformance
from threadkeeper.conformance.thread_lock import ThreadLockConformance, ThreadLockFactory
from threadkeeper.conformance.transcript_archive import (
    TranscriptArchiveConformance,
    make_round,
    new_ref,
)
from threadkeeper.domain.locks import ClaimedLock, RunFences
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.runs import RunRecords
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.transcript import (
    Round,
    ToolInvocation,
    TranscriptArchive,
    TranscriptMessage,
    arguments_digest,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def backend(redis_server: PrivateRedis, mysql: str) -> AsyncIterator[RedisMysqlBackend]:
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    await client.aclose()
    async with open_redis_mysql(redis_server.url, mysql, lock_ttl_seconds=3) as opened:
        yield opened


class TestRedisRunLock(RunLockConformance):
    """Clients on separate connections: separate replicas of the service."""

    @pytest.fixture
    async def lock_factory(self, redis_server: PrivateRedis) -> AsyncIterator[LockFactory]:
        clients = [Redis.from_url(redis_server.url) for _ in range(4)]
        turn = itertools.count()
        yield lambda: RedisRunLock(clients[next(turn) % len(clients)], ttl_seconds=3)
        for client in clients:
            await client.aclose()


class TestRedisThreadLockClaims(ThreadLockConformance):
    """``RedisRunLock`` with the claims in MySQL, as the profile wires it."""

    @pytest.fixture
    def thread_lock_factory(self, backend: RedisMysqlBackend) -> ThreadLockFactory:
        return lambda: ClaimedLock(RedisRunLock(backend.redis, ttl_seconds=3), backend.fences)

    @pytest.fixture
    def fences(self, backend: RedisMysqlBackend) -> RunFences:
        return backend.fences


async def test_a_holder_letting_go_meanwhile_is_not_named_unknown(
    redis_server: PrivateRedis,
) -> None:
    """Issue 9: a refused run looked up the holder after it had let go and answered 409 naming
    run "unknown". It now takes the thread when it is free by then."""
    client = Redis.from_url(redis_server.url)
    key = f"acme:u:{uuid.uuid4()}"
    first = RedisRunLock(client, ttl_seconds=3)
    holding = first.hold(key, "ending")
    await holding.__aenter__()

    class Racing(RedisRunLock):
        async def holder(self, thread_key: str) -> str | None:
            await holding.__aexit__(None, None, None)  # the holder lets go right now
            return await super().holder(thread_key)

    try:
        async with Racing(client, ttl_seconds=3).hold(key, "next"):
            assert await first.holder(key) == "next"
    finally:
        await client.aclose()


class TestSqlTranscriptArchive(TranscriptArchiveConformance):
    @pytest.fixture
    def archive(self, backend: RedisMysqlBackend) -> TranscriptArchive:
        return backend.archive


class TestMysqlRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self, backend: RedisMysqlBackend) -> RunRecords:
        return backend.runs


class TestMysqlFollowUps(FollowUpsConformance):
    @pytest.fixture
    def harness(self, backend: RedisMysqlBackend) -> SqlFollowUpsHarness:
        return SqlFollowUpsHarness(backend.followups)


class ArchiveRetentionHarness(CheckpointRetentionHarness):
    """The checkpoint harness (a live checkpoint, run records, feedback, memory items) plus
    archived rounds, whose time is the thread's activity on this profile."""

    async def seed_thread(
        self, ref: ThreadRef, *, last_activity: datetime, messages: int, feedback: int = 0
    ) -> None:
        assert messages % 2 == 0, "the archive holds whole rounds"
        rounds = messages // 2
        for index in range(rounds):
            base = make_round(ref, index)
            at = last_activity - timedelta(minutes=rounds - 1 - index)
            await self.backend.archive.append_round(
                msgspec.structs.replace(
                    base,
                    human=msgspec.structs.replace(base.human, created_at=at),
                    ai=msgspec.structs.replace(base.ai, created_at=at),
                )
            )
        await super().seed_thread(
            ref, last_activity=last_activity, messages=messages, feedback=feedback
        )

    async def thread_exists(self, key: str) -> bool:
        return await super().thread_exists(key) or bool(await self.backend.archive.recent(key, 1))


class TestArchiveRetention(RetentionConformance):
    @pytest.fixture
    def harness(self, backend: RedisMysqlBackend) -> ArchiveRetentionHarness:
        return ArchiveRetentionHarness(backend)


# --- what the suites do not cover ---------------------------------------------------------


async def test_tool_invocations_are_audited_apart_from_the_transcript(
    backend: RedisMysqlBackend,
) -> None:
    ref = new_ref()
    tools = [
        ToolInvocation(
            tool="fetch_faq_document",
            call_id="call_1",
            arguments_digest=arguments_digest({"doc_id": "dental"}),
            duration_ms=1.25,
            status="success",
            at=datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
        )
    ]
    round_ = make_round(ref, 0)
    assert await backend.archive.append_round(round_, tools)
    assert await backend.archive.invocations(ref.key, round_.run_id) == tools
    page = await backend.archive.page(ref.key, limit=100)
    assert [m.role for m in page.messages] == ["human", "ai"], "no tool rows in the transcript"
    assert not await backend.archive.append_round(round_, tools)
    assert await backend.archive.invocations(ref.key, round_.run_id) == tools, (
        "a retry adds no audit"
    )
    await backend.archive.delete_thread(ref.key)
    assert await backend.archive.invocations(ref.key, round_.run_id) == []


async def test_a_round_is_all_or_nothing(backend: RedisMysqlBackend) -> None:
    """A failure inside the transaction (here: an AI message id over the column's size)
    leaves neither message."""
    ref = new_ref()
    good = make_round(ref, 0)
    bad = msgspec.structs.replace(good, ai=msgspec.structs.replace(good.ai, id="x" * 5000))
    with pytest.raises(DBAPIError, match="message_id"):
        await backend.archive.append_round(bad)
    assert await backend.archive.recent(ref.key, 10) == []


async def test_times_and_text_survive_mysql(backend: RedisMysqlBackend) -> None:
    """Microseconds and the zone of ``created_at``; Persian, Chinese and emoji text."""
    ref = new_ref()
    at = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    content = "بیمه دندان‌پزشکی 牙科保险 🦷 — ok"
    round_ = Round(
        run_id=str(uuid.uuid4()),
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        thread_id=ref.thread_id,
        human=TranscriptMessage("h-1", "human", content, at),
        ai=TranscriptMessage("a-1", "ai", content * 3000, at),  # > 64 KiB: LONGTEXT
    )
    await backend.archive.append_round(round_)
    human, ai = await backend.archive.recent(ref.key, 2)
    assert human == round_.human
    assert ai.content == round_.ai.content


async def test_ids_compare_exactly(backend: RedisMysqlBackend) -> None:
    """MySQL's default collations ignore case: user Bob must not see bob's thread or memory."""
    upper, lower = ThreadRef("acme", "Bob", "T1"), ThreadRef("acme", "bob", "t1")
    await backend.archive.append_round(make_round(upper, 0))
    assert await backend.archive.recent(lower.key, 10) == []
    await backend.store.aput(memory_namespace("acme", "Bob", MemoryKind.PROFILE), "k", {"v": 1})
    assert (
        await backend.store.aget(memory_namespace("acme", "bob", MemoryKind.PROFILE), "k") is None
    )


async def test_the_lock_expires_when_its_holder_dies(redis_server: PrivateRedis) -> None:
    """A holder that never releases (a killed process) blocks the thread for at most the TTL;
    a live holder keeps it past the TTL (the lock is extended while the run lives)."""
    client = Redis.from_url(redis_server.url)
    try:
        lock = RedisRunLock(client, ttl_seconds=1)
        key = f"acme:u:{uuid.uuid4()}"
        async with lock.hold(key, "alive"):
            await asyncio.sleep(1.6)
            assert await lock.holder(key) == "alive", "extended while the run lives"
        dead = lock.hold(key, "killed")
        await dead.__aenter__()  # taken and never released, and its keeper stops: a dead process
        for task in asyncio.all_tasks():
            if task.get_coro().__qualname__.startswith("RedisRunLock._keep"):  # type: ignore[union-attr]
                task.cancel()
        assert await lock.holder(key) == "killed"
        await asyncio.sleep(1.2)
        async with lock.hold(key, "next"):
            assert await lock.holder(key) == "next"
    finally:
        await client.aclose()


async def test_the_service_refuses_an_unmigrated_database(redis_server: PrivateRedis) -> None:
    with (
        fresh_database(migrate=False) as bare,
        pytest.raises(SchemaNotReady, match="threadkeeper migrate"),
    ):
        async with open_redis_mysql(redis_server.url, bare):
            pytest.fail("opened without a schema")


def test_migrations_use_exact_comparison_and_utf8mb4(mysql: str) -> None:
    rows = query(
        mysql,
        "SELECT table_name, column_name, collation_name FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND collation_name IS NOT NULL",
    )
    ours = {
        "tk_run_records",
        "tk_feedback",
        "tk_run_claims",
        "chat_messages",
        "chat_summaries",
        "tool_invocations",
    }
    checked = [r for r in rows if r[0] in ours or (r[0] == "store" and r[1] in ("prefix", "key"))]
    assert {r[0] for r in checked} == ours | {"store"}
    assert all(r[2] == "utf8mb4_bin" for r in checked), [
        r for r in checked if r[2] != "utf8mb4_bin"
    ]


async def test_replicas_starting_or_healing_together_do_not_trip_over_the_indexes(
    redis_server: PrivateRedis, mysql: str
) -> None:
    """Index creation is check-then-create: found by starting two replicas at once on an
    empty Redis (one died with "Index already exists")."""
    client = Redis.from_url(redis_server.url)
    try:
        for _ in range(3):
            await client.flushall()

            async def start() -> None:
                async with open_redis_mysql(redis_server.url, mysql):
                    pass

            await asyncio.gather(start(), start(), start())
        async with (
            open_redis_mysql(redis_server.url, mysql) as first,
            open_redis_mysql(redis_server.url, mysql) as second,
        ):
            for _ in range(3):
                await client.flushall()
                healed = await asyncio.gather(
                    first.saver.ensure_indexes(),
                    second.saver.ensure_indexes(),
                    first.saver.ensure_indexes(),
                )
                assert any(healed)
                assert {b"checkpoint", b"checkpoint_write"} <= set(
                    await client.execute_command("FT._LIST")
                )
    finally:
        await client.aclose()


async def test_pruning_a_thread_never_evicts_its_head_for_a_sibling_differing_in_case(
    backend: RedisMysqlBackend,
) -> None:
    """RediSearch TAG matching ignores case: the keep-latest prune of ``acme:alice:t`` found
    ``acme:Alice:t``'s newer checkpoint too, kept it (as alice's newest) and evicted alice's own
    head (issue 26). Only the thread's own checkpoints are weighed, and none of another's is
    touched."""
    from threadkeeper.conformance.backend import Turn, head_of, store_round

    lower, upper = ThreadRef("acme", "alice", "t"), ThreadRef("acme", "Alice", "t")
    await store_round(backend, lower, Turn.make(1))
    await store_round(backend, lower, Turn.make(2))
    mine = await head_of(backend, lower)
    await store_round(backend, upper, Turn.make(1))  # newer than alice's head
    theirs = await head_of(backend, upper)
    assert mine is not None
    assert theirs is not None
    await backend.saver.aprune([lower.key], strategy="keep_latest")
    assert await head_of(backend, lower) == mine
    assert await head_of(backend, upper) == theirs
    await backend.saver.adelete_thread(lower.key)
    assert await head_of(backend, lower) is None
    assert await head_of(backend, upper) == theirs
