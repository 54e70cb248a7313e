"""The embedded profile: SQLite under ``THREADKEEPER_DATA_DIR``, one process.

One database file holds the checkpoints (``AsyncSqliteSaver``), the memory store
(``AsyncSqliteStore``) and threadkeeper's own tables (run records, feedback). Tables are set up
at start (the no-DDL-at-start rule is for the server profiles). The run lock is in-process,
which is correct only because ``serve`` holds an exclusive lock on the data directory: a
second process refuses to start.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.sqlite.aio import AsyncSqliteStore
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from threadkeeper.adapters.checkpoint_retention import CheckpointRetention
from threadkeeper.adapters.sql import SqlRunRecords
from threadkeeper.domain.locks import InMemoryRunLock

DATABASE = "threadkeeper.sqlite3"
LOCK_FILE = "threadkeeper.lock"


class DataDirBusy(RuntimeError):
    """Another process serves this data directory."""


class DataDirLock:
    """An exclusive ``flock`` on ``<data_dir>/threadkeeper.lock`` (released when the process
    ends, however it ends)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
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


@dataclass
class EmbeddedBackend:
    """Everything the embedded profile stores, opened on one data directory."""

    data_dir: Path
    saver: AsyncSqliteSaver
    store: AsyncSqliteStore
    engine: AsyncEngine
    runs: SqlRunRecords
    lock: InMemoryRunLock
    retention: CheckpointRetention
    profile: str = "embedded"
    archive: None = None
    """No separate archive: the transcript is the checkpoint state."""

    async def after_commit(self, thread_key: str) -> None:
        """Nothing: the embedded profile keeps every checkpoint of a thread."""

    async def health(self) -> dict[str, str]:
        try:
            await self.saver.conn.execute("SELECT 1")
        except Exception as exc:  # pragma: no cover - depends on the file system
            return {"sqlite": f"error: {exc}"}
        return {"sqlite": "ok"}


def _prepare(data_dir: Path, *, exclusive: bool) -> tuple[Path, DataDirLock]:
    root = data_dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    guard = DataDirLock(root)
    if exclusive:
        guard.acquire()
    return root, guard


@asynccontextmanager
async def open_embedded(data_dir: str | Path, *, exclusive: bool = True) -> AsyncIterator[Any]:
    """Open (and set up) the embedded store; with ``exclusive`` take the data-dir lock."""
    root, guard = _prepare(Path(data_dir), exclusive=exclusive)
    path = root / DATABASE
    try:
        async with (
            aiosqlite.connect(path) as saver_conn,
            aiosqlite.connect(path, isolation_level=None) as store_conn,
        ):
            await saver_conn.execute("PRAGMA journal_mode=WAL")
            await saver_conn.execute("PRAGMA busy_timeout=5000")
            await store_conn.execute("PRAGMA busy_timeout=5000")
            saver = AsyncSqliteSaver(saver_conn)
            await saver.setup()
            store = AsyncSqliteStore(store_conn)
            await store.setup()
            engine = create_async_engine(f"sqlite+aiosqlite:///{path}", connect_args={"timeout": 5})
            runs = SqlRunRecords(engine)
            await runs.create_tables()
            lock = InMemoryRunLock()
            try:
                yield EmbeddedBackend(
                    data_dir=root,
                    saver=saver,
                    store=store,
                    engine=engine,
                    runs=runs,
                    lock=lock,
                    retention=CheckpointRetention(saver, store, runs, lock),
                )
            finally:
                await engine.dispose()
    finally:
        guard.release()
