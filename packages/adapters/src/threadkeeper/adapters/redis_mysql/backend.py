"""The redis-mysql profile (blog design): Redis checkpoints with a TTL, MySQL as the record.

- Checkpoints: ``HealingRedisSaver`` (``AsyncRedisSaver`` with ``default_ttl`` =
  ``THREADKEEPER_CHECKPOINT_TTL_MINUTES`` refreshed on read; indexes re-created after a flush or
  restart). After each committed run the thread keeps only its newest checkpoint, and the
  ``compact`` hook keeps the state itself bounded: Redis holds a bounded amount per thread.
- The record: ``SqlTranscriptArchive`` on MySQL/MariaDB (SQLAlchemy async + asyncmy) — human
  message, final answer and citations, written once a run finished; ``GET /messages`` reads it
  and a thread without checkpoints is seeded from it (cold start).
- Memory: ``langgraph-checkpoint-mysql``'s ``AsyncMyStore`` (a ``BaseStore`` on MySQL) over an
  asyncmy pool, its namespace prefixes matched on whole labels (``ExactMyStore``,
  ``store.py``); run records and feedback: ``SqlRunRecords`` on the same database.
- One run per thread: ``RedisRunLock`` (``SET NX PX`` with a token, extended while it lives).
- ``migrate_redis_mysql`` creates the MySQL schema (the store's ``setup()`` and threadkeeper's
  Alembic migrations); the service never issues SQL DDL at start and refuses a schema that is
  missing or behind.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import asyncmy
from langgraph.store.mysql.asyncmy import AsyncMyStore
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from threadkeeper.adapters import migrations
from threadkeeper.adapters.checkpoint_retention import UserRetention, count_store_prefix
from threadkeeper.adapters.empty_context import (
    connect_in_empty_context,
    empty_context_connection,
    in_empty_context,
)
from threadkeeper.adapters.followups import SqlFollowUps, SqlSummariesAhead
from threadkeeper.adapters.profile import SchemaNotReady
from threadkeeper.adapters.redis_mysql.archive import SqlTranscriptArchive
from threadkeeper.adapters.redis_mysql.client import OrjsonRedis
from threadkeeper.adapters.redis_mysql.lock import RedisRunLock
from threadkeeper.adapters.redis_mysql.ratelimit import RedisWindows
from threadkeeper.adapters.redis_mysql.rounds import ArchiveRoundStore
from threadkeeper.adapters.redis_mysql.saver import HealingRedisSaver
from threadkeeper.adapters.redis_mysql.store import ExactMyStore
from threadkeeper.adapters.rounds import RoundsOf
from threadkeeper.adapters.sql import SqlRunFences, SqlRunRecords
from threadkeeper.adapters.sql_values import hide_values
from threadkeeper.adapters.timeouts import (
    DEFAULT_STORE_TIMEOUT_SECONDS,
    MIGRATION_SECONDS,
    answer_within,
)
from threadkeeper.adapters.transcripts import ArchiveTranscript
from threadkeeper.adapters.weigh import TableWeight, ThreadWeigher
from threadkeeper.adapters.written import add, counting, value_bytes, watch_engine
from threadkeeper.domain.errors import AtCapacity
from threadkeeper.domain.locks import ClaimedLock, RunLock, ThreadLock
from threadkeeper.domain.memory import user_namespace
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.storage import StorageUsage

log = logging.getLogger(__name__)

HEALTH_SECONDS = 0.9
"""``/health/ready`` answers within a second, reachable or not."""

STORE_MIGRATIONS = len(AsyncMyStore.MIGRATIONS) - 1
# The store's own DDL takes the database's default collation, usually case-insensitive:
# namespaces and keys (user ids) must compare exactly.
_STORE_BINARY_KEYS = (
    "ALTER TABLE store "
    "MODIFY prefix VARCHAR(500) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, "
    "MODIFY `key` VARCHAR(150) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
)


def mysql_url(url: str) -> URL:
    """The archive URL with the asyncmy driver and ``utf8mb4``."""
    parsed = make_url(url)
    if parsed.get_backend_name() not in ("mysql", "mariadb"):
        raise ValueError(f"THREADKEEPER_MYSQL_URL must be a MySQL URL, got {parsed.drivername}")
    parsed = parsed.set(drivername=f"{parsed.get_backend_name()}+asyncmy")
    if "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


REDIS_TIMEOUT_SECONDS = 1.0
"""Per-command timeout: a Redis that does not answer is an error within it."""
REDIS_CONNECT_SECONDS = 0.5
"""A new connection (the one retry after a dropped one, e.g. a restarted Redis): a refused
connection fails at once; an unreachable server within this."""
POST_COMMIT_REDIS_SECONDS = 1.5
"""The round is in the archive: writing its checkpoints to Redis (the cache) may hold the
answer this long at most; then the next run rebuilds the cache from the archive."""
MYSQL_CONNECT_SECONDS = 1
POOL_WAIT_SECONDS = 1.0
FAIL_FAST_TCP = {
    socket.TCP_KEEPIDLE: 1,
    socket.TCP_KEEPINTVL: 1,
    socket.TCP_KEEPCNT: 1,
    socket.TCP_USER_TIMEOUT: 1000,  # ms of unacknowledged data (a partition) break it
}


def fail_fast_socket(sock: Any) -> None:
    """Keepalives and ``TCP_USER_TIMEOUT`` on a connected socket: a partitioned server is an
    error within about a second or two, never a hang."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in FAIL_FAST_TCP.items():
        sock.setsockopt(socket.IPPROTO_TCP, option, value)


def _fail_fast_asyncmy(connection: Any) -> None:
    transport = getattr(connection, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        fail_fast_socket(sock)


REDIS_WRITES = frozenset({b"JSON.SET", b"JSON.MERGE", b"SET", b"HSET", b"ZADD", b"SADD"})
"""The commands that write a value: while a round is counted (``adapters.written``) their
arguments are the checkpoint bytes it wrote to Redis."""


def count_redis_writes(client: Redis) -> None:
    """The client's new connections add the arguments of each write command a counted round
    sends (the saver's checkpoint writes) to the round's ``checkpoints`` bytes."""
    pool = client.connection_pool
    base: Any = pool.connection_class

    class Counting(base):  # type: ignore[misc]
        def pack_command(self, *args: Any) -> Any:
            if counting() and args:
                name = args[0] if isinstance(args[0], bytes) else str(args[0]).encode()
                if name.upper() in REDIS_WRITES:
                    add("checkpoints", sum(value_bytes(a) for a in args[1:]))
            return super().pack_command(*args)

    pool.connection_class = Counting


REDIS_MAX_CONNECTIONS = 100
"""Redis connections per replica (redis-py's default bound, which it enforced by failing)."""


class WaitingRedisPool(BlockingConnectionPool):
    """A command waits up to ``timeout`` for one of ``max_connections`` (redis-py's default pool
    raised ``MaxConnectionsError`` at once, failing runs at concurrency 40 in the benchmark);
    a wait that ends with every connection still in use is this replica at capacity
    (``AtCapacity``: 503 ``at-capacity`` with ``Retry-After``, as the SQL pools answer), not a
    server out of reach."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # opened in an empty context: a connection keeps nothing of the run that opened it
        self.connection_class = empty_context_connection(self.connection_class)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            if isinstance(exc.__cause__, TimeoutError):  # the wait, not the server
                raise AtCapacity(
                    f"all {self.max_connections} Redis connections of this replica are in use"
                ) from exc
            raise


def redis_client(
    url: str,
    *,
    max_connections: int = REDIS_MAX_CONNECTIONS,
    wait_seconds: float = POOL_WAIT_SECONDS,
) -> Redis:
    """A client that survives a Redis restart — a command on a connection the server closed is
    retried on a new one (twice, backing off) instead of failing the run — and fails fast when
    Redis does not answer: a timeout is not retried. More commands in flight than
    ``max_connections`` wait for a connection (``WaitingRedisPool``)."""
    pool = WaitingRedisPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_seconds,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.05), retries=1),
        retry_on_error=[RedisConnectionError],
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_CONNECT_SECONDS,
        socket_keepalive=True,
        socket_keepalive_options=FAIL_FAST_TCP,
        health_check_interval=30,
    )
    return OrjsonRedis.from_pool(pool)  # owns the pool: closed with the client


def _engine(url: str, read_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS) -> AsyncEngine:
    """The archive's engine. ``read_seconds``: asyncmy's read timeout, the store deadline — a
    server that accepts and never answers fails the call (and the connection) within it; a
    partition is caught sooner by the sockets' ``TCP_USER_TIMEOUT`` (``fail_fast_socket``)."""
    engine = create_async_engine(
        mysql_url(url),
        hide_parameters=True,  # no value of a statement in its error or log line (sql_values)
        # no gap locks: concurrent rounds of different threads never deadlock on them
        isolation_level="READ COMMITTED",
        pool_size=10,
        max_overflow=10,
        pool_timeout=POOL_WAIT_SECONDS,
        # no ping per checkout (a round trip on every use): a connection the server dropped
        # fails its statement, and SQLAlchemy discards it and every connection checked out
        # before it (a disconnect invalidates the pool), so the next checkout connects anew;
        # recycled well before MySQL's wait_timeout (8 h) closes an idle one
        pool_pre_ping=False,
        pool_recycle=3600,
        connect_args={"connect_timeout": MYSQL_CONNECT_SECONDS, "read_timeout": read_seconds},
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        _fail_fast_asyncmy(dbapi_connection.driver_connection)

    connect_in_empty_context(engine, asyncmy.connect)
    watch_engine(engine)  # a round's bytes written (RoundWork.written)
    hide_values(engine)  # nor in the driver's message, nor in rows logged at DEBUG
    return engine


class FailFastPool:
    """An asyncmy pool whose connections get ``fail_fast_socket`` (for ``AsyncMyStore``)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with asyncio.timeout(POOL_WAIT_SECONDS * 5):
            # a connection the pool opens here keeps nothing of the caller's context
            connection = await in_empty_context(self._acquire)()
        try:
            _fail_fast_asyncmy(connection)
            yield connection
        finally:
            await self.pool.release(connection)  # as asyncmy's own ``async with`` releases

    async def _acquire(self) -> Any:
        return await self.pool.acquire()

    def close(self) -> None:
        self.pool.close()

    async def wait_closed(self) -> None:
        await self.pool.wait_closed()


async def _store_pool(
    url: str, maxsize: int = 4, read_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS
) -> Any:
    parsed = mysql_url(url)
    return await asyncmy.create_pool(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        db=parsed.database,
        charset="utf8mb4",
        autocommit=True,
        minsize=1,
        maxsize=maxsize,
        pool_recycle=3600,
        connect_timeout=MYSQL_CONNECT_SECONDS,
        read_timeout=read_seconds,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    )


async def schema_problems(engine: AsyncEngine) -> list[str]:
    """What is missing or behind in MySQL; empty when the schema is current."""
    problems: list[str] = []
    async with engine.connect() as conn:
        tables = {
            r[0]
            for r in await conn.execute(
                text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = DATABASE()"
                )
            )
        }
        if "store_migrations" not in tables:
            problems.append("store_migrations is missing")
        else:
            version = (await conn.execute(text("SELECT max(v) FROM store_migrations"))).scalar()
            if version is None or version < STORE_MIGRATIONS:
                problems.append(f"store_migrations is at {version}, wanted {STORE_MIGRATIONS}")
        current = await conn.run_sync(migrations.current)
    if current != migrations.head():
        problems.append(f"threadkeeper tables at {current}, wanted {migrations.head()}")
    return problems


async def check_schema(url: str) -> list[str]:
    engine = _engine(url)
    try:
        return await schema_problems(engine)
    finally:
        await engine.dispose()


async def migrate_redis_mysql(url: str) -> list[str]:
    """Create or upgrade the MySQL schema; the steps taken. (Redis needs no migration: the
    saver creates its indexes at start and after a flush.)"""
    steps: list[str] = []
    pool = await _store_pool(url, maxsize=1, read_seconds=MIGRATION_SECONDS)
    try:
        await AsyncMyStore(conn=pool).setup()
        steps.append("store: setup()")
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(_STORE_BINARY_KEYS)
        steps.append("store: binary collation on namespace and key")
    finally:
        pool.close()
        await pool.wait_closed()
    engine = _engine(url, MIGRATION_SECONDS)
    try:
        steps.append(await migrations.upgrade_engine(engine))
    finally:
        await engine.dispose()
    return steps


class ArchiveRetention(UserRetention):
    """Retention where the archive is the record and Redis a cache of recent context.

    A thread's activity is its newest archived message; deleting a thread removes its archive
    rows (messages, summary, tool audit), run records, feedback and checkpoints; erasing a
    user also removes the user's memory in the tenant.
    """

    def __init__(
        self,
        archive: SqlTranscriptArchive,
        saver: HealingRedisSaver,
        store: ExactMyStore,
        runs: SqlRunRecords,
        lock: RunLock | ThreadLock | None = None,
        fences: SqlRunFences | None = None,
    ) -> None:
        self.archive = archive
        self.saver = saver
        self.store = store
        self.runs = runs
        self.lock = lock
        self.fences = fences

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        return await self.archive.idle_threads(cutoff, limit=limit)

    async def is_idle(self, thread_key: str, cutoff: datetime) -> bool:
        """Whether the thread's newest archived message is before ``cutoff``."""
        newest = await self.archive.newest(thread_key)
        return newest is None or newest < cutoff

    async def _delete_held(self, thread_key: str) -> ErasureReceipt:
        checkpoint = await self.saver.aget_tuple({"configurable": {"thread_id": thread_key}})
        messages = await self.archive.delete_thread(thread_key)
        runs, feedback = await self.runs.delete_thread(thread_key)
        await self.saver.adelete_thread(thread_key)
        if self.fences is not None:
            await self.fences.forget(thread_key)
        exists = messages > 0 or runs > 0 or checkpoint is not None
        return ErasureReceipt(threads=int(exists), messages=messages, feedback=feedback)

    async def message_count(self, thread_key: str) -> int:
        return await self.archive.count(thread_key)

    async def user_thread_keys(self, tenant_id: str, user_id: str) -> set[str]:
        """The archive's threads of the user, and those with run records only."""
        keys = set(await self.archive.user_threads(tenant_id, user_id))
        keys.update(await self.runs.user_threads(tenant_id, user_id))
        return keys

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        """The erasure's verification pass, per store: in MySQL the rows naming the user
        (run records and texts, feedback, claims, their fence), the threads the archive or the
        run records still name, the erased threads' rows, the memory items; in Redis the
        erased threads' keys (checkpoints, their pointers and writes)."""
        mysql = await self.runs.user_rows(tenant_id, user_id)
        mysql += len(await self.user_thread_keys(tenant_id, user_id))
        redis = 0
        for key in thread_keys:
            mysql += await self.runs.thread_rows(key) + await self.archive.thread_rows(key)
            redis += len(await self.saver.existing_keys(key))
        mysql += await count_store_prefix(self.store, user_namespace(tenant_id, user_id))
        return {"mysql": mysql, "redis": redis}


@dataclass
class RedisMysqlBackend(RoundsOf):
    redis: Redis
    saver: HealingRedisSaver
    store: ExactMyStore
    engine: AsyncEngine
    archive: SqlTranscriptArchive
    runs: SqlRunRecords
    fences: SqlRunFences
    followups: SqlFollowUps
    summaries: SqlSummariesAhead
    """Folds made ahead by follow-up work, for the threads' next runs."""
    """The rounds' follow-up work (``domain.followups``), in the same database."""
    rounds: ArchiveRoundStore
    lock: ClaimedLock
    """``RedisRunLock`` for exclusion, the claims in MySQL (with the rounds they fence)."""
    retention: ArchiveRetention
    rate_windows: RedisWindows
    """The rate limit's windows in Redis, shared by every replica."""
    weigher: ThreadWeigher = field(default_factory=ThreadWeigher)
    """The thread's rows in the MySQL database's tables (``storage_usage``)."""

    @cached_property
    def transcript(self) -> ArchiveTranscript:
        """The archive is the transcript; the checkpoints a cache of the recent context — read
        through ``checkpointer``, so that inside a round the cold-start check's read of the
        thread's checkpoint is the graph's read too (``AtomicSaver``: once per round)."""
        return ArchiveTranscript(self.archive, self.checkpointer)

    @property
    def storage_kinds(self) -> frozenset[str]:
        return frozenset({"checkpoints", "run_records", "archive", "audit", "feedback"})

    async def storage_usage(self, thread_key: str) -> StorageUsage:
        """The thread's checkpoints in Redis (``MEMORY USAGE`` of its keys, found through the
        saver's indexes) and its rows in MySQL — the archive, the tool audit, the run records
        and texts, the feedback (``adapters.weigh``) — read at once."""

        async def rows() -> StorageUsage:
            async with self.engine.connect() as conn:
                return await self.weigher.usage(conn, thread_key)

        (_, in_redis), in_mysql = await asyncio.gather(self.saver.thread_bytes(thread_key), rows())
        return in_mysql + StorageUsage(checkpoints=in_redis)

    async def table_weights(self, thread_key: str) -> dict[str, TableWeight]:
        """(rows, bytes) of the thread in each MySQL table keyed by thread (the benchmarks)."""
        async with self.engine.connect() as conn:
            return await self.weigher.weights(conn, thread_key)

    async def after_commit(self, thread_key: str) -> None:
        """Keep only the thread's newest checkpoint: with compaction bounding the state, the
        thread's Redis bytes stay bounded however long the conversation. Bounded: a Redis
        that does not answer must not hold the answer (the next run's upkeep catches up)."""
        await answer_within(
            POST_COMMIT_REDIS_SECONDS, self.saver.aprune([thread_key], strategy="keep_latest")
        )

    async def health(self) -> dict[str, str]:
        """Both servers, probed at once, each within ``HEALTH_SECONDS``."""

        async def redis() -> str:
            await self.redis.ping()
            await self.saver.ensure_indexes()
            return "ok"

        async def mysql() -> str:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            return "ok"

        results = await asyncio.gather(
            answer_within(HEALTH_SECONDS, redis()),
            answer_within(HEALTH_SECONDS, mysql()),
            return_exceptions=True,
        )
        return {
            name: result if isinstance(result, str) else f"error: {type(result).__name__}"
            for name, result in zip(("redis", "mysql"), results, strict=True)
        }


@asynccontextmanager
async def open_redis_mysql(
    redis_url: str,
    mysql_url_: str,
    *,
    checkpoint_ttl_minutes: float = 10080,
    lock_ttl_seconds: float = 30,
    store_timeout_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS,
) -> AsyncIterator[RedisMysqlBackend]:
    """Connect to Redis Stack and MySQL; refuse a MySQL schema ``migrate`` has not made. Every
    MySQL call fails after ``store_timeout_seconds``."""
    engine = _engine(mysql_url_, store_timeout_seconds)
    pool: Any = None
    redis: Redis = redis_client(redis_url)
    count_redis_writes(redis)
    try:
        problems = await schema_problems(engine)
        if problems:
            raise SchemaNotReady(
                "the MySQL schema is not ready (" + "; ".join(problems) + "): run "
                "`threadkeeper migrate` with THREADKEEPER_PROFILE=redis-mysql first"
            )
        pool = FailFastPool(await _store_pool(mysql_url_, read_seconds=store_timeout_seconds))
        store = ExactMyStore(conn=pool)
        saver = HealingRedisSaver(
            redis_client=redis,
            ttl={"default_ttl": checkpoint_ttl_minutes, "refresh_on_read": True},
        )
        await saver.asetup()  # RediSearch indexes (created only where missing)
        archive = SqlTranscriptArchive(engine)
        followups = SqlFollowUps(engine, None)
        runs = SqlRunRecords(engine, None, followups)
        fences = SqlRunFences(engine, None)
        lock = ClaimedLock(RedisRunLock(redis, lock_ttl_seconds), fences)
        yield RedisMysqlBackend(
            redis=redis,
            saver=saver,
            store=store,
            engine=engine,
            archive=archive,
            runs=runs,
            fences=fences,
            followups=followups,
            summaries=SqlSummariesAhead(engine, None),
            rounds=ArchiveRoundStore(engine, archive, saver, POST_COMMIT_REDIS_SECONDS),
            lock=lock,
            retention=ArchiveRetention(archive, saver, store, runs, lock, fences),
            rate_windows=RedisWindows(redis),
        )
    finally:
        if pool is not None:
            pool.close()
            await pool.wait_closed()
        await engine.dispose()
        await redis.aclose()
