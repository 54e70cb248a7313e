"""The postgres profile (ADR-0007): checkpoints and memory store on one psycopg pool.

- ``AsyncPostgresSaver`` and ``AsyncPostgresStore`` share one ``AsyncConnectionPool``
  (autocommit, ``dict_row``), opened with the application.
- ``migrate_postgres`` runs the saver's and the store's ``setup()`` and threadkeeper's Alembic
  migrations. The service never issues DDL at start-up: ``open_postgres`` refuses a missing or
  older schema and says to run ``threadkeeper migrate``.
- One run per thread across replicas: ``AdvisoryThreadLock`` (advisory locks on one session
  per replica, each taken with the thread's claim); a round is one transaction
  (``PostgresRoundStore``) that checks the claim.
- Each message stored once (``PostgresLedger``, ``ledger.py``): checkpoints hold refs to message
  rows, and the round's own transaction prunes the thread to its newest checkpoint
  (``postgres.rounds``).
- threadkeeper's own tables (run records, feedback) go through SQLAlchemy (psycopg driver).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from threadkeeper.adapters import migrations
from threadkeeper.adapters.followups import SqlFollowUps, SqlSummariesAhead
from threadkeeper.adapters.postgres.deadline import deadline_connection
from threadkeeper.adapters.postgres.ledger import PostgresLedger
from threadkeeper.adapters.postgres.lock import SERVER_KEEPALIVES, AdvisoryThreadLock
from threadkeeper.adapters.postgres.ratelimit import PostgresRateWindows
from threadkeeper.adapters.postgres.retention import PostgresRetention
from threadkeeper.adapters.postgres.rounds import PostgresRoundStore
from threadkeeper.adapters.profile import SchemaNotReady
from threadkeeper.adapters.rounds import RoundsOf
from threadkeeper.adapters.serde import checkpoint_serializer
from threadkeeper.adapters.sql import SqlRunFences, SqlRunRecords
from threadkeeper.adapters.sql_values import hide_values
from threadkeeper.adapters.timeouts import (
    DEFAULT_STORE_TIMEOUT_SECONDS,
    MIGRATION_SECONDS,
    answer_within,
)
from threadkeeper.adapters.transcripts import CheckpointTranscript
from threadkeeper.adapters.weigh import TableWeight, ThreadWeigher
from threadkeeper.adapters.written import watch_engine
from threadkeeper.domain.errors import AtCapacity
from threadkeeper.domain.storage import StorageUsage

log = logging.getLogger(__name__)

POOL_SIZE = 24
"""Connections for the saver, the store and short queries (per replica). Runs take them
briefly: 50 runs in flight on one replica fit (the reliability suite's load test)."""
ENGINE_POOL_SIZE = 5
ENGINE_MAX_OVERFLOW = 5
"""threadkeeper's own tables and the round transactions (SQLAlchemy)."""
POOL_WAIT_SECONDS = 1.0
"""How long a request waits for a pooled connection. A server that cannot be reached leaves
the pool without connections: the request fails after this (503 ``unavailable``) instead of
psycopg_pool's 30 s; a pool whose connections are all in use is a replica at capacity."""
FAIL_FAST: dict[str, Any] = {
    "connect_timeout": 2,  # libpq's minimum
    "tcp_user_timeout": 1000,  # ms: data unacknowledged this long (a partition) breaks it
    "keepalives": 1,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 1,
}
"""Connection settings that make a dead or partitioned server an error within about a second
(or two, for a query sent just before the partition), never a hang."""


async def server_keepalives(conn: Any) -> None:
    """The server's side of every connection (``SERVER_KEEPALIVES``): a client gone in a
    partition is noticed within seconds, and its session — its open transaction, the rows it
    locked, its advisory locks — ended, instead of after the server's default two hours."""
    await conn.execute(SERVER_KEEPALIVES)


class FailFastPool(AsyncConnectionPool[Any]):
    """A pool whose wait for a connection ends after ``POOL_WAIT_SECONDS`` either way, and
    says which way: every connection in use is a replica at capacity (``AtCapacity``, 503
    with ``Retry-After``); no connection to be had is the server out of reach (the
    ``PoolTimeout`` itself, 503 ``unavailable``)."""

    async def getconn(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (the pool's API)
        try:
            return await super().getconn(timeout)
        except PoolTimeout as exc:
            stats = self.get_stats()
            if stats.get("pool_size", 0) >= self.max_size and not stats.get("pool_available"):
                raise AtCapacity(
                    f"all {self.max_size} connections of this replica are in use"
                ) from exc
            raise


def sqlalchemy_url(postgres_url: str) -> str:
    """``postgresql://…`` → SQLAlchemy's ``postgresql+psycopg://…``."""
    url = make_url(postgres_url)
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def _pool(
    url: str,
    *,
    min_size: int = 2,
    max_size: int = POOL_SIZE,
    deadline: float = DEFAULT_STORE_TIMEOUT_SECONDS,
) -> AsyncConnectionPool[Any]:
    return FailFastPool(
        url,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=POOL_WAIT_SECONDS,
        connection_class=deadline_connection(deadline),
        configure=server_keepalives,
        kwargs={
            "autocommit": True,
            "row_factory": dict_row,
            "prepare_threshold": None,
            **FAIL_FAST,
        },
    )


def _engine(url: str, deadline: float = DEFAULT_STORE_TIMEOUT_SECONDS) -> AsyncEngine:
    engine = create_async_engine(
        sqlalchemy_url(url),
        hide_parameters=True,  # no value of a statement in its error or log line (sql_values)
        pool_size=ENGINE_POOL_SIZE,
        max_overflow=ENGINE_MAX_OVERFLOW,
        pool_timeout=POOL_WAIT_SECONDS,
        # no ping per checkout (a round trip on every round): a connection the server dropped
        # fails its statement, is discarded, and the next checkout gets a new one
        pool_pre_ping=False,
        connect_args=FAIL_FAST,
    )

    connection_class = deadline_connection(deadline)

    @event.listens_for(engine.sync_engine, "do_connect")
    def _with_deadline(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["async_creator_fn"] = connection_class.connect  # adapters.postgres.deadline

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(SERVER_KEEPALIVES)
        cursor.close()
        dbapi_connection.commit()  # out of the transaction psycopg began for it

    watch_engine(engine)  # a round's bytes written (RoundWork.written)
    hide_values(engine)  # nor in the driver's message, nor in rows logged at DEBUG
    return engine


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
    pool = _pool(url, min_size=1, max_size=2, deadline=MIGRATION_SECONDS)
    await pool.open(wait=True)
    try:
        await AsyncPostgresSaver(pool).setup()
        steps.append("checkpoints: setup()")
        await AsyncPostgresStore(pool).setup()
        steps.append("store: setup()")
    finally:
        await pool.close()
    engine = _engine(url, MIGRATION_SECONDS)
    try:
        steps.append(await migrations.upgrade_engine(engine))
    finally:
        await engine.dispose()
    return steps


@dataclass
class PostgresBackend(RoundsOf):
    pool: AsyncConnectionPool[Any]
    saver: PostgresLedger
    """``AsyncPostgresSaver`` under ``PostgresLedger``: what the app wraps in ``AtomicSaver``."""
    store: AsyncPostgresStore
    engine: AsyncEngine
    runs: SqlRunRecords
    fences: SqlRunFences
    followups: SqlFollowUps
    summaries: SqlSummariesAhead
    """Folds made ahead by follow-up work, for the threads' next runs."""
    """The rounds' follow-up work (``domain.followups``), in the same database."""
    rounds: PostgresRoundStore
    lock: AdvisoryThreadLock
    retention: PostgresRetention
    rate_windows: PostgresRateWindows
    """``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` counted where every replica sees it."""
    transcript: CheckpointTranscript
    """The transcript is the checkpoint state."""
    weigher: ThreadWeigher = field(default_factory=ThreadWeigher)
    """The thread's rows in the schema's tables (``storage_usage``)."""

    @property
    def storage_kinds(self) -> frozenset[str]:
        return frozenset({"checkpoints", "messages", "run_records", "feedback"})

    async def storage_usage(self, thread_key: str) -> StorageUsage:
        """The thread's rows in LangGraph's checkpoint tables, the message ledger, the run
        records and texts, and the feedback (``adapters.weigh``: one statement, each table
        read on the index its key leads)."""
        async with self.engine.connect() as conn:
            return await self.weigher.usage(conn, thread_key)

    async def table_weights(self, thread_key: str) -> dict[str, TableWeight]:
        """(rows, bytes) of the thread in each table keyed by thread (the benchmarks)."""
        async with self.engine.connect() as conn:
            return await self.weigher.weights(conn, thread_key)

    async def after_commit(self, thread_key: str) -> None:
        """What the round's own prune left (``postgres.rounds._PRUNE``: the thread keeps its
        newest checkpoint, in the round's transaction): a subgraph's checkpoints, pruned with
        LangGraph's ``aprune(keep_latest)``, and message rows of a round whose newest checkpoint
        did not carry the list (``MessageLedger.collect``). Runs under the thread's lock: the
        prune's REPEATABLE READ transaction must not race another run on the thread.

        Each run commits one checkpoint whose message list is a list of refs to message rows
        (``PostgresLedger``); without pruning a thread would keep one such list per run. With it
        a thread is one checkpoint plus one row per message (docs/storage-postgres.md).
        """
        if thread_key in self.rounds.nested:
            await self.saver.aprune([thread_key], strategy="keep_latest")
            self.rounds.nested.discard(thread_key)
        elif self.saver.dirty(thread_key):
            await self.saver.collect(thread_key)

    async def health(self) -> dict[str, str]:
        async def probe() -> None:
            async with self.pool.connection() as conn:
                await conn.execute("SELECT 1")

        try:
            await answer_within(HEALTH_SECONDS, probe())
        except Exception as exc:
            return {"postgres": f"error: {type(exc).__name__}"}
        return {"postgres": "ok"}


HEALTH_SECONDS = 0.9
"""``/health/ready`` answers within a second, reachable or not."""


@asynccontextmanager
async def open_postgres(
    url: str, *, store_timeout_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS
) -> AsyncIterator[PostgresBackend]:
    """Open the pool and engine; refuse a schema that ``threadkeeper migrate`` has not made.
    Every call on them fails after ``store_timeout_seconds`` (``adapters.postgres.deadline``)."""
    pool = _pool(url, deadline=store_timeout_seconds)
    await pool.open(wait=True, timeout=30)
    engine = _engine(url, store_timeout_seconds)
    lock = AdvisoryThreadLock(url, FAIL_FAST, deadline_connection(store_timeout_seconds))
    try:
        problems = await schema_problems(pool, engine)
        if problems:
            raise SchemaNotReady(
                "the PostgreSQL schema is not ready (" + "; ".join(problems) + "): run "
                "`threadkeeper migrate` with THREADKEEPER_PROFILE=postgres first"
            )
        saver = PostgresLedger(AsyncPostgresSaver(pool, serde=checkpoint_serializer()), pool)
        store = AsyncPostgresStore(pool)
        followups = SqlFollowUps(engine, None)
        runs = SqlRunRecords(engine, None, followups)
        fences = SqlRunFences(engine, None)
        yield PostgresBackend(
            pool=pool,
            saver=saver,
            store=store,
            engine=engine,
            runs=runs,
            fences=fences,
            followups=followups,
            summaries=SqlSummariesAhead(engine, None),
            rounds=PostgresRoundStore(engine, saver),
            lock=lock,
            retention=PostgresRetention(saver, store, runs, pool, lock, fences),
            rate_windows=PostgresRateWindows(pool),
            transcript=CheckpointTranscript(saver),
        )
    finally:
        await lock.close()
        await engine.dispose()
        await pool.close()
