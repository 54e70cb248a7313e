"""The embedded profile: SQLite under ``THREADKEEPER_DATA_DIR``, one process.

One database file holds the checkpoints (``AsyncSqliteSaver``), the memory store
(``AsyncSqliteStore``) and threadkeeper's own tables (run records, feedback, run claims).
Tables are set up at start (the no-DDL-at-start rule is for the server profiles). The run
lock is in-process, which is correct only because ``serve`` holds an exclusive lock on the
data directory: a second process refuses to start.

One connection, one writer. SQLite lets one connection write at a time, and a transaction
that read before it writes cannot wait for the lock: it fails at once with "database is
locked" (the store's batches do exactly that — ``BEGIN``, a search, then a put). With three
connections (saver, store, run records) a few concurrent runs were enough to fail runs, some
after their round was stored. So the saver, the store and threadkeeper's tables share one
connection in autocommit mode and one ``asyncio.Lock`` held for each statement or
transaction (``guard``): statements run one after another and never contend for SQLite's
lock. A round is one ``BEGIN IMMEDIATE`` transaction on it (``SqliteRoundStore``). The
connection is a ``LoopConnection`` (``adapters.embedded.connection``): only what can wait for
SQLite's lock or the disk goes through aiosqlite's thread.

Each message is stored once (``adapters.embedded.ledger``): the saver is wrapped in the message
ledger, so a checkpoint holds refs to rows of ``tk_checkpoint_messages`` instead of the whole
history, and a round inserts only its new messages.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, cast

from langgraph.checkpoint.base import WRITES_IDX_MAP, get_checkpoint_metadata
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.sqlite.aio import AsyncSqliteStore
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from threadkeeper.adapters.atomic import StagedPut, StagedWrites
from threadkeeper.adapters.checkpoint_retention import CheckpointRetention
from threadkeeper.adapters.embedded.connection import LoopConnection, connect, private_directory
from threadkeeper.adapters.embedded.ledger import DDL as LEDGER_DDL
from threadkeeper.adapters.embedded.ledger import sqlite_ledger
from threadkeeper.adapters.followups import SqlFollowUps, SqlSummariesAhead
from threadkeeper.adapters.ledger import CHANNEL, MessageLedger, refs_of
from threadkeeper.adapters.rounds import RoundsOf, RoundStore, RoundWrite
from threadkeeper.adapters.serde import checkpoint_serializer
from threadkeeper.adapters.sql import (
    SqlAccess,
    SqlRunFences,
    SqlRunRecords,
    check_claim,
    insert_record,
    record_followups,
)
from threadkeeper.adapters.sql_values import hide_values
from threadkeeper.adapters.transcripts import CheckpointTranscript
from threadkeeper.adapters.weigh import ThreadWeigher
from threadkeeper.adapters.written import watch_engine
from threadkeeper.domain.locks import ClaimedLock, InMemoryRunLock
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.storage import StorageUsage

DATABASE = "threadkeeper.sqlite3"
LOCK_FILE = "threadkeeper.lock"


log = logging.getLogger(__name__)


class DataDirBusy(RuntimeError):
    """Another process serves this data directory."""


class DataDirLock:
    """An exclusive ``flock`` on ``<data_dir>/threadkeeper.lock`` (released when the process
    ends, however it ends)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise DataDirBusy(
                f"{self.path.parent} is in use by process {holder}; the embedded profile "
                "serves one process per data directory (set THREADKEEPER_DATA_DIR to another "
                "directory, or use the postgres or redis-mysql profile to scale out)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


BUSY_TIMEOUT_MS = 30_000
"""Only another process (``threadkeeper export`` beside the server, a backup) can hold
SQLite's lock: wait for it rather than fail."""

_CHECKPOINT = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_WRITES = (
    "INSERT OR {verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PRUNE = (
    "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id <> ?",
    "DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id <> ?",
)
"""The thread keeps its newest checkpoint only (its state holds the whole history: each older
one was a full copy of it) — postgres's ``keep_latest``, in the round's own transaction."""


class SqliteRoundStore(RoundStore):
    """A round in one ``BEGIN IMMEDIATE`` transaction: the claim checked, the staged
    checkpoints and writes stored as ``AsyncSqliteSaver`` stores them — each checkpoint's
    messages through the ledger (its new message rows, the checkpoint with refs) — the
    thread's older checkpoints deleted (``_PRUNE``) and, when a message was replaced or more
    than one checkpoint was stored, the message rows the newest no longer refers to; the run
    record. The ledger's cache learns the new rows once the transaction has committed."""

    def __init__(self, access: SqlAccess, ledger: MessageLedger) -> None:
        self.access = access
        self.ledger = ledger

    async def commit(self, write: RoundWrite) -> str | None:
        try:
            applied, collected = await self._commit(write)
        except BaseException:
            self.ledger.discard(write.thread_key)
            raise
        for apply in applied:
            apply()
        if collected:
            self.ledger.collected(write.thread_key)
        return write.checkpoint_id()

    async def _commit(self, write: RoundWrite) -> tuple[list[Callable[[], None]], bool]:
        """Store the round; the ledger's cache updates to apply, and whether the thread's
        unreferenced message rows were deleted."""
        async with self.access.begin() as conn:
            await check_claim(conn, write.thread_key, write.claim)
            sink = _SqliteSink(self.ledger, conn)
            await write.staging.replay(sink)
            root = [
                op.checkpoint["id"]
                for op in write.staging.log
                if isinstance(op, StagedPut) and not op.config["configurable"].get("checkpoint_ns")
            ]
            if root:
                for statement in _PRUNE:
                    await conn.exec_driver_sql(statement, (write.thread_key, str(root[-1])))
                if sink.collect:  # rows only the deleted checkpoints referred to
                    await self.ledger.rows.delete_except(write.thread_key, sink.refs or [], conn)
            await insert_record(conn, write.stored_record())
            await record_followups(conn, write.record, write.followups)
        return sink.applied, sink.collect


class _SqliteSink:
    """A round's staged writes in its ``BEGIN IMMEDIATE`` transaction, as the saver's own
    rows: the thread's checkpoints with their messages as ledger refs (a subgraph's inline),
    the writes ``REPLACE``d or ``IGNORE``d as ``AsyncSqliteSaver`` does."""

    def __init__(self, ledger: MessageLedger, conn: Any) -> None:
        self.ledger = ledger
        self.conn = conn
        self.serde = ledger.serde
        self.applied: list[Callable[[], None]] = []
        """The ledger cache's updates, applied once the transaction committed."""
        self.refs: list[int] | None = None
        """The message rows the newest root checkpoint refers to."""
        self.collect = False

    async def put(self, op: StagedPut) -> None:
        configurable = op.config["configurable"]
        namespace = str(configurable.get("checkpoint_ns", ""))
        checkpoint = op.checkpoint
        if not namespace:  # the thread's own messages; a subgraph's stay inline
            stored = await self.ledger.refs_in(self.conn, op.config, checkpoint, op.new_versions)
            checkpoint = stored.checkpoint
            self.applied.append(stored.apply)
            self.collect = self.collect or stored.replaced or self.refs is not None
            self.refs = refs_of(checkpoint["channel_values"].get(CHANNEL))
        type_, blob = self.serde.dumps_typed(checkpoint)
        metadata = json.dumps(
            get_checkpoint_metadata(op.config, op.metadata), ensure_ascii=False
        ).encode("utf-8", "ignore")
        await self.conn.exec_driver_sql(
            _CHECKPOINT,
            (
                str(configurable["thread_id"]),
                namespace,
                op.checkpoint["id"],
                configurable.get("checkpoint_id"),
                type_,
                blob,
                metadata,
            ),
        )

    async def put_writes(self, op: StagedWrites) -> None:
        configurable = op.config["configurable"]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in op.writes)
        await self.conn.exec_driver_sql(
            _WRITES.format(verb="REPLACE" if replace else "IGNORE"),
            [
                (
                    str(configurable["thread_id"]),
                    str(configurable.get("checkpoint_ns", "")),
                    str(configurable["checkpoint_id"]),
                    op.task_id,
                    op.task_path,
                    WRITES_IDX_MAP.get(channel, index),
                    channel,
                    *self.serde.dumps_typed(value),
                )
                for index, (channel, value) in enumerate(op.writes)
            ],
        )


class SqliteRetention(CheckpointRetention):
    """``CheckpointRetention`` that leaves no erased byte in the SQLite files: the connection
    runs with ``secure_delete`` (deleted content is overwritten with zeros in the database's
    pages), and after a deletion the write-ahead log — which still holds the pages as they
    were before it — is checkpointed into the database and truncated to nothing
    (``wal_checkpoint(TRUNCATE)``; issue 26: erased text was read from the ``-wal`` file after
    the receipt). The erasure's verification names what the log still holds (``sqlite-wal``:
    its frames, 0 once truncated; a reader — a backup, an export — holding an older snapshot
    keeps them, and the next deletion truncates them)."""

    store_name = "sqlite"

    def __init__(self, *args: Any, connection: Any, guard: asyncio.Lock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = connection
        self.guard = guard
        self._batch = 0

    async def truncate_wal(self) -> int:
        """Checkpoint the write-ahead log into the database and truncate it; the frames it
        still holds (0: nothing of the deleted rows is left in it)."""
        async with self.guard:
            cursor = await self.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, frames, _ = await cursor.fetchone()
            await cursor.close()
        if busy:
            log.warning("the write-ahead log could not be truncated: a reader holds it")
        return max(int(frames), 0)

    async def delete_thread(
        self, thread_key: str, *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        receipt = await super().delete_thread(thread_key, idle_before=idle_before)
        if not self._batch and receipt.threads:
            await self.truncate_wal()
        return receipt

    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        self._batch += 1
        try:
            receipt = await super().delete_threads(thread_keys, idle_before=idle_before)
        finally:
            self._batch -= 1
        if not self._batch and receipt.threads:
            await self.truncate_wal()
        return receipt

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt:
        self._batch += 1
        try:
            receipt = await super().erase_user(tenant_id, user_id)
        finally:
            self._batch -= 1
        return receipt + ErasureReceipt(remaining={"sqlite-wal": await self.truncate_wal()})


@dataclass
class EmbeddedBackend(RoundsOf):
    """Everything the embedded profile stores, opened on one data directory."""

    data_dir: Path
    saver: MessageLedger
    """``AsyncSqliteSaver`` under the message ledger: what the app wraps in ``AtomicSaver``."""
    sqlite: AsyncSqliteSaver
    store: AsyncSqliteStore
    engine: AsyncEngine
    runs: SqlRunRecords
    fences: SqlRunFences
    followups: SqlFollowUps
    summaries: SqlSummariesAhead
    """Folds made ahead by follow-up work, for the threads' next runs."""
    """The rounds' follow-up work (``domain.followups``), in the same database."""
    rounds: SqliteRoundStore
    lock: ClaimedLock
    """In process (one process per data directory), with the claims in SQLite."""
    retention: SqliteRetention
    guard: asyncio.Lock
    """Held for every use of the one connection (see the module docstring)."""
    transcript: CheckpointTranscript
    """The transcript is the checkpoint state."""
    rate_windows: None = None
    """One process: the rate limit's windows are that process's."""
    weigher: ThreadWeigher = field(default_factory=ThreadWeigher)
    """The thread's rows in the database file's tables (``storage_usage``)."""

    @property
    def storage_kinds(self) -> frozenset[str]:
        return frozenset({"checkpoints", "messages", "run_records", "feedback"})

    async def storage_usage(self, thread_key: str) -> StorageUsage:
        """The thread's rows in the checkpoint tables (``checkpoints``, ``writes``), the run
        records and texts, and the feedback (``adapters.weigh``)."""
        async with self.runs.connect() as conn:
            return await self.weigher.usage(conn, thread_key)

    async def health(self) -> dict[str, str]:
        try:
            async with self.guard:
                await self.sqlite.conn.execute("SELECT 1")
        except Exception as exc:  # pragma: no cover - depends on the file system
            return {"sqlite": f"error: {exc}"}
        return {"sqlite": "ok"}


def sqlite_engine(path: Path) -> AsyncEngine:
    """One connection (``StaticPool``, a ``LoopConnection``) in autocommit mode; SQLAlchemy's
    transactions start with ``BEGIN IMMEDIATE`` (SQLAlchemy's recipe for transactions on
    pysqlite)."""

    async def _open() -> LoopConnection:
        connection = connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
        await connection  # opens it on its thread
        return connection

    engine = create_async_engine(
        f"sqlite+aiosqlite:///{path}",  # the URL names the database in spans; _open opens it
        async_creator=_open,
        hide_parameters=True,  # no value of a statement in its error or log line (sql_values)
        poolclass=StaticPool,
        pool_reset_on_return=None,  # never ROLLBACK under the store's open transaction
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # autocommit; transactions are explicit
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA secure_delete=ON")  # deleted content zeroed (SqliteRetention)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        # on the DBAPI connection, not ``conn.exec_driver_sql``: a statement of SQLAlchemy's
        # own (its execution context, events and database span) cost ~0.15 ms of CPU per
        # transaction, two transactions a run, for a statement that has no result. A failure
        # (the write lock not had within the busy timeout) is wrapped as SQLAlchemy wraps a
        # statement's, so it is answered as before
        dbapi_error = conn.dialect.loaded_dbapi.Error
        cursor = conn.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except dbapi_error as exc:
            raise DBAPIError.instance("BEGIN IMMEDIATE", (), exc, dbapi_error) from exc
        finally:
            cursor.close()

    watch_engine(engine)  # a round's bytes written (RoundWork.written)
    hide_values(engine)  # nor in the driver's message, nor in rows logged at DEBUG
    return engine


def _prepare(data_dir: Path, *, exclusive: bool) -> tuple[Path, DataDirLock]:
    root = data_dir.resolve()
    private_directory(root)  # 0700: every tenant's threads are in it
    guard = DataDirLock(root)
    if exclusive:
        guard.acquire()
    return root, guard


@asynccontextmanager
async def open_embedded(data_dir: str | Path, *, exclusive: bool = True) -> AsyncIterator[Any]:
    """Open (and set up) the embedded store; with ``exclusive`` take the data-dir lock."""
    root, dir_lock = _prepare(Path(data_dir), exclusive=exclusive)
    engine = sqlite_engine(root / DATABASE)
    try:
        async with engine.connect() as conn:  # the one connection, kept by the StaticPool
            connection = cast("Any", (await conn.get_raw_connection()).driver_connection)
        guard = asyncio.Lock()
        saver = AsyncSqliteSaver(connection, serde=checkpoint_serializer())
        saver.lock = guard
        await saver.setup()
        store = AsyncSqliteStore(connection)
        store.lock = guard
        await store.setup()
        followups = SqlFollowUps(engine, guard)
        runs = SqlRunRecords(engine, guard, followups)
        await runs.create_tables()
        async with runs.begin() as conn:
            for statement in LEDGER_DDL:
                await conn.exec_driver_sql(statement)
        ledger = sqlite_ledger(saver, runs)
        fences = SqlRunFences(engine, guard)
        lock = ClaimedLock(InMemoryRunLock(), fences)
        yield EmbeddedBackend(
            data_dir=root,
            saver=ledger,
            sqlite=saver,
            store=store,
            engine=engine,
            runs=runs,
            fences=fences,
            followups=followups,
            summaries=SqlSummariesAhead(engine, guard),
            rounds=SqliteRoundStore(runs, ledger),
            lock=lock,
            retention=SqliteRetention(
                ledger, store, runs, lock, fences, connection=connection, guard=guard
            ),
            guard=guard,
            transcript=CheckpointTranscript(ledger),
        )
    finally:
        await engine.dispose()
        dir_lock.release()
