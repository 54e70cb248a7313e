"""The postgres profile (ADR-0007): checkpoints and memory store on one psycopg pool.

- ``AsyncPostgresSaver`` and ``AsyncPostgresStore`` share one ``AsyncConnectionPool``
  (autocommit, ``dict_row``), opened with the application.
- ``migrate_postgres`` runs the saver's and the store's ``setup()`` and threadkeeper's Alembic
  migrations. The service never issues DDL at start-up: ``open_postgres`` refuses a missing or
  older schema and says to run ``threadkeeper migrate``.
- One run per thread across replicas: ``AdvisoryRunLock``.
- Each message stored once (``MessageLedger``, ``ledger.py``): checkpoints hold refs to message
  rows, and ``after_commit`` prunes the thread to its newest checkpoint.
- threadkeeper's own tables (run records, feedback) go through SQLAlchemy (psycopg driver).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from threadkeeper.adapters import migrations
from threadkeeper.adapters.postgres.ledger import MessageLedger
from threadkeeper.adapters.postgres.ratelimit import PostgresRateWindows
from threadkeeper.adapters.postgres.retention import PostgresRetention
from threadkeeper.adapters.sql import SqlRunRecords
from threadkeeper.domain.errors import AtCapacity, ThreadBusy
from threadkeeper.domain.locks import RunLock

log = logging.getLogger(__name__)

APPLICATION_NAME = "tk-run:"
POOL_SIZE = 20
"""Connections for the saver, the store and short queries (per replica)."""
LOCK_POOL_SIZE = 32
"""Runs in flight per replica: each holds one connection for its thread's advisory lock."""
LOCK_ACQUIRE_TIMEOUT = 10.0
"""Seconds a run waits for a lock connection when ``LOCK_POOL_SIZE`` runs are in flight; then
``PoolTimeout`` (answered 503)."""


class SchemaNotReady(RuntimeError):
    """The database lacks threadkeeper's schema, or has an older one."""


def advisory_key(thread_key: str) -> int:
    """A stable signed 64-bit key for ``pg_try_advisory_lock`` (same on every replica)."""
    return int.from_bytes(
        hashlib.blake2b(thread_key.encode(), digest_size=8).digest(), "big", signed=True
    )


def _lock_ids(key: int) -> tuple[int, int]:
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


class AdvisoryRunLock(RunLock):
    """``pg_try_advisory_lock`` on a connection pinned for the run.

    The holder's run id is the session's ``application_name``, set before the lock is taken,
    so a refused caller can always name the running run (``pg_locks`` ⋈ ``pg_stat_activity``).
    Session-level locks break behind PgBouncer in transaction mode: connect directly.

    A held lock pins its connection for the whole run, so locks take their connections from a
    pool of their own (``pool``): runs in flight must never starve the saver and the store of
    connections (with one shared pool of 20, 20 concurrent runs on different threads left
    their own checkpoint writes waiting 30 s for a connection). ``query_pool`` serves the short
    ``holder`` lookups; it defaults to ``pool``.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        query_pool: AsyncConnectionPool[Any] | None = None,
        acquire_timeout: float = LOCK_ACQUIRE_TIMEOUT,
    ) -> None:
        self.pool = pool
        self.query_pool = query_pool or pool
        self.acquire_timeout = acquire_timeout

    def hold(self, thread_key: str, run_id: str) -> AbstractAsyncContextManager[None]:
        return self._hold(thread_key, run_id)

    @asynccontextmanager
    async def _hold(self, thread_key: str, run_id: str) -> AsyncIterator[None]:
        key = advisory_key(thread_key)
        try:
            conn = await self.pool.getconn(timeout=self.acquire_timeout)
        except PoolTimeout as exc:
            if self.pool.get_stats().get("pool_size", 0) < self.pool.max_size:
                raise  # the pool could not even connect: the server is unreachable (503)
            raise AtCapacity(
                f"{self.pool.max_size} runs are in flight on this replica; retry shortly"
            ) from exc
        try:
            await conn.execute(
                "SELECT set_config('application_name', %s, false)", (APPLICATION_NAME + run_id,)
            )
            row: Any = await (
                await conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (key,))
            ).fetchone()
            if not row["ok"]:
                await conn.execute("SELECT set_config('application_name', '', false)")
                raise ThreadBusy(await self.holder(thread_key) or "unknown")
            try:
                yield
            finally:
                try:
                    await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                    await conn.execute("SELECT set_config('application_name', '', false)")
                except BaseException:
                    # the session must not outlive a lock it may still hold
                    log.warning("advisory unlock failed; closing the session", exc_info=True)
                    await conn.close()
                    raise

        finally:
            await self.pool.putconn(conn)

    async def holder(self, thread_key: str) -> str | None:
        classid, objid = _lock_ids(advisory_key(thread_key))
        async with self.query_pool.connection() as conn:
            row: Any = await (
                await conn.execute(
                    "SELECT a.application_name AS name FROM pg_locks l "
                    "JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                    "AND l.classid::bigint = %s AND l.objid::bigint = %s "
                    "AND l.database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())",
                    (classid, objid),
                )
            ).fetchone()
        if row is None or not str(row["name"]).startswith(APPLICATION_NAME):
            return None
        return str(row["name"])[len(APPLICATION_NAME) :]


def sqlalchemy_url(postgres_url: str) -> str:
    """``postgresql://…`` → SQLAlchemy's ``postgresql+psycopg://…``."""
    url = make_url(postgres_url)
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def _pool(url: str, *, min_size: int = 2, max_size: int = POOL_SIZE) -> AsyncConnectionPool[Any]:
    return AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": None},
    )


def _engine(url: str) -> AsyncEngine:
    return create_async_engine(sqlalchemy_url(url), pool_size=5, pool_pre_ping=True)


async def schema_problems(pool: AsyncConnectionPool[Any], engine: AsyncEngine) -> list[str]:
    """What is missing or behind; empty when the schema is current."""
    problems: list[str] = []
    for table, wanted in (
        ("checkpoint_migrations", len(AsyncPostgresSaver.MIGRATIONS) - 1),
        ("store_migrations", len(AsyncPostgresStore.MIGRATIONS) - 1),
    ):
        async with pool.connection() as conn:
            exists: Any = await (
                await conn.execute("SELECT to_regclass(%s) AS t", (table,))
            ).fetchone()
            if exists["t"] is None:
                problems.append(f"{table} is missing")
                continue
            row: Any = await (
                await conn.execute(f"SELECT max(v) AS v FROM {table}")  # table: a constant
            ).fetchone()
            if row["v"] is None or row["v"] < wanted:
                problems.append(f"{table} is at {row['v']}, wanted {wanted}")
    async with engine.connect() as conn:
        current = await conn.run_sync(migrations.current)
    if current != migrations.head():
        problems.append(f"threadkeeper tables at {current}, wanted {migrations.head()}")
    return problems


async def check_schema(url: str) -> list[str]:
    """``schema_problems`` on a short-lived connection (start-up checks, ``doctor``)."""
    pool = _pool(url, min_size=1, max_size=1)
    await pool.open(wait=True, timeout=30)
    engine = _engine(url)
    try:
        return await schema_problems(pool, engine)
    finally:
        await engine.dispose()
        await pool.close()


async def migrate_postgres(url: str) -> list[str]:
    """Create or upgrade everything; the steps taken."""
    steps: list[str] = []
    pool = _pool(url, min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        await AsyncPostgresSaver(pool).setup()
        steps.append("checkpoints: setup()")
        await AsyncPostgresStore(pool).setup()
        steps.append("store: setup()")
    finally:
        await pool.close()
    engine = _engine(url)
    try:
        steps.append(await migrations.upgrade_engine(engine))
    finally:
        await engine.dispose()
    return steps


@dataclass
class PostgresBackend:
    pool: AsyncConnectionPool[Any]
    saver: MessageLedger
    """``AsyncPostgresSaver`` under ``MessageLedger``: what the app wraps in ``AtomicSaver``."""
    store: AsyncPostgresStore
    engine: AsyncEngine
    runs: SqlRunRecords
    lock: AdvisoryRunLock
    retention: PostgresRetention
    rate_windows: PostgresRateWindows
    """``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` counted where every replica sees it."""
    profile: str = "postgres"
    archive: None = None
    """No separate archive: the transcript is the checkpoint state."""

    async def after_commit(self, thread_key: str) -> None:
        """Keep only the thread's newest checkpoint (its state holds the whole history).

        Each run commits one checkpoint whose message list is a list of refs to message rows
        (``MessageLedger``); without pruning a thread would keep one such list per run. With it
        a thread is one checkpoint plus one row per message (docs/storage-postgres.md). Runs
        under the thread's lock: the prune's REPEATABLE READ transaction must not race another
        run on the thread.
        """
        await self.saver.aprune([thread_key], strategy="keep_latest")

    async def health(self) -> dict[str, str]:
        try:
            async with self.pool.connection(timeout=5) as conn:
                await conn.execute("SELECT 1")
        except Exception as exc:
            return {"postgres": f"error: {type(exc).__name__}"}
        return {"postgres": "ok"}


@asynccontextmanager
async def open_postgres(url: str) -> AsyncIterator[PostgresBackend]:
    """Open the pool and engine; refuse a schema that ``threadkeeper migrate`` has not made."""
    pool = _pool(url)
    await pool.open(wait=True, timeout=30)
    lock_pool = _pool(url, min_size=1, max_size=LOCK_POOL_SIZE)
    engine = _engine(url)
    try:
        await lock_pool.open(wait=True, timeout=30)
        problems = await schema_problems(pool, engine)
        if problems:
            raise SchemaNotReady(
                "the PostgreSQL schema is not ready (" + "; ".join(problems) + "): run "
                "`threadkeeper migrate` with THREADKEEPER_PROFILE=postgres first"
            )
        saver = MessageLedger(AsyncPostgresSaver(pool), pool)
        store = AsyncPostgresStore(pool)
        runs = SqlRunRecords(engine)
        lock = AdvisoryRunLock(lock_pool, query_pool=pool)
        yield PostgresBackend(
            pool=pool,
            saver=saver,
            store=store,
            engine=engine,
            runs=runs,
            lock=lock,
            retention=PostgresRetention(saver, store, runs, pool, lock),
            rate_windows=PostgresRateWindows(pool),
        )
    finally:
        await engine.dispose()
        await lock_pool.close()
        await pool.close()
