"""The embedded profile's one SQLite connection: aiosqlite, minus the thread hops that cannot
wait.

aiosqlite runs every call — a cursor made, a statement, a fetch, a cursor closed — on its
worker thread and hands the result back through the event loop: a queue, a thread wake-up,
``call_soon_threadsafe`` and a loop wake-up per call. SQLAlchemy's dialect makes four such calls
per statement (cursor, execute, fetch, close), so a run cost 65–71 of them (counted by
``tests/unit/adapters/test_loop_connection.py`` through the HTTP API), more CPU than SQLite
spent on its statements.

The thread exists for what can wait: SQLite's lock and the disk. ``LoopConnection`` keeps
those on the thread and runs the rest on the loop's thread, where the call returns at once:

- on the thread: ``BEGIN IMMEDIATE`` / ``EXCLUSIVE`` when the write lock is taken (they wait
  for it; tried on the loop first with no busy timeout: another connection — a backup, an
  export — holds it only now and then, so almost always it is free and the ``BEGIN`` does
  not wait), a ``COMMIT`` of a transaction that changed rows (its fsync), a write in
  autocommit mode (its own transaction and fsync), anything else not listed below (scripts,
  pragmas, DDL, open and close);
- on the loop: making and closing cursors, fetches, a deferred ``BEGIN`` (it takes no lock), any
  statement inside an open transaction (the lock is held or, in WAL mode, a read needs none), a
  ``SELECT`` in autocommit mode (a WAL reader never waits for a writer), the ``COMMIT`` or
  ``ROLLBACK`` of a transaction that changed no row.

Two cases could still wait on the loop, neither on the serving path: a write inside a deferred
transaction (the store's ``BEGIN``, a search, a put) waits if another connection holds the write
lock — the data directory's lock leaves only readers beside the server (an export, a backup);
and ``total_changes`` does not count DDL, so a transaction of DDL alone (``setup()`` at start)
commits on the loop.

Calls stay in the order they were made: one that would run on the loop while a call is still
queued for the thread waits its turn on the thread instead. (The backend's ``guard`` already
serializes every use of the connection; this only makes the rule not depend on it.) The
module's ``sqlite3`` is built thread-safe (``sqlite3.threadsafety == 3``) and the connection
is opened with ``check_same_thread=False``, so both threads may use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiosqlite

log = logging.getLogger(__name__)

_CURSOR_CALLS = frozenset({"close", "fetchone", "fetchmany", "fetchall"})
"""A ``sqlite3.Cursor``'s calls that only read or close it."""
_STATEMENTS = frozenset({"execute", "executemany"})
_WAITS = ("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE")
_ENDS = ("COMMIT", "END", "ROLLBACK")


class LoopConnection(aiosqlite.Connection):
    """``aiosqlite.Connection`` that runs on the event loop what cannot block (see the module
    docstring); ``hops`` counts the calls that went to the thread."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int = 64):
        super().__init__(connector, iter_chunk_size)
        self.hops = 0
        self._queued = 0
        self._changes_at_begin = 0

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        conn, head = self._connection, _sql_head(fn, args)
        if conn is not None and self._running and not self._queued:
            if self._on_loop(conn, fn, head):
                result = fn(*args, **kwargs)
                self._began(conn, head)
                return result
            if head is not None and head.startswith(_WAITS):
                begun, result = _begin_unless_busy(conn, fn, args, kwargs)
                if begun:
                    self._began(conn, head)
                    return result
        loop = asyncio.get_running_loop()

        def on_thread() -> Any:
            try:
                result = fn(*args, **kwargs)
                if conn is not None:
                    self._began(conn, head)
                return result
            finally:  # counted done when the thread is, even if the caller was cancelled
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits
                    loop.call_soon_threadsafe(self._finished)

        self.hops += 1
        self._queued += 1
        return await super()._execute(on_thread)  # type: ignore[no-untyped-call]

    def _finished(self) -> None:
        self._queued -= 1

    def _on_loop(self, conn: sqlite3.Connection, fn: Callable[..., Any], head: str | None) -> bool:
        owner, name = getattr(fn, "__self__", None), getattr(fn, "__name__", "")
        if isinstance(owner, sqlite3.Cursor):
            return name in _CURSOR_CALLS or (head is not None and self._statement(conn, head))
        if owner is not conn:  # aiosqlite's own helpers, and anything else: the thread
            return False
        if name == "cursor":
            return True
        if name in ("commit", "rollback"):
            return self._wrote_nothing(conn)
        return head is not None and self._statement(conn, head)

    def _wrote_nothing(self, conn: sqlite3.Connection) -> bool:
        """No transaction is open, or the open one changed no row: ending it cannot wait."""
        return not conn.in_transaction or conn.total_changes == self._changes_at_begin

    def _statement(self, conn: sqlite3.Connection, head: str) -> bool:
        """Whether the statement that begins with ``head`` runs on the loop."""
        if head.startswith(_WAITS):
            return False
        if head.startswith(_ENDS):
            return self._wrote_nothing(conn)
        if conn.in_transaction or head.startswith("BEGIN"):
            return True
        return head.startswith("SELECT")

    def _began(self, conn: sqlite3.Connection, head: str | None) -> None:
        """After a ``BEGIN``: the row changes so far, to tell at ``COMMIT`` whether the
        transaction wrote (``total_changes`` counts rows inserted, updated and deleted)."""
        if head is not None and head.startswith("BEGIN"):
            self._changes_at_begin = conn.total_changes


def _begin_unless_busy(
    conn: sqlite3.Connection, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> tuple[bool, Any]:
    """Run ``fn`` (a ``BEGIN IMMEDIATE`` or ``EXCLUSIVE``) here with no busy timeout: whether
    it began, and its result. Not begun: another connection holds the write lock (``SQLITE_BUSY``
    at once, nothing changed); the caller waits for it on the thread."""
    timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        return True, fn(*args, **kwargs)
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:  # and extended
            raise
        return False, None
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")


def _sql_head(fn: Callable[..., Any], args: tuple[Any, ...]) -> str | None:
    """The start of the statement ``fn`` executes, upper-cased; ``None`` if it executes none."""
    if getattr(fn, "__name__", "") in _STATEMENTS and args and isinstance(args[0], str):
        return args[0].lstrip()[:16].upper()
    return None


PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""What SQLite keeps beside a database: it makes each with the database file's mode."""


def private_directory(path: Path) -> None:
    """Make ``path`` (and any missing parent) and leave it its owner's alone (0700): the
    embedded data directory holds every tenant's threads. An existing one with group or
    other permissions (an earlier version made it 0755) is tightened."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIRECTORY)
    _tighten(path, PRIVATE_DIRECTORY)


def private_database(path: Path) -> None:
    """Make the SQLite database ``path`` its owner's alone (0600) before SQLite opens it:
    created empty with that mode when missing (SQLite would make it 0644), tightened when an
    earlier version left it, or its ``-wal``, ``-shm`` or ``-journal``, open. SQLite gives the
    ``-wal``, ``-shm`` and ``-journal`` files it makes later the database file's mode, so they
    come out 0600 too."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    os.close(descriptor)
    for file in (path, *(path.with_name(path.name + side) for side in SQLITE_SIDE_FILES)):
        _tighten(file, PRIVATE_FILE)


def _tighten(path: Path, private: int) -> None:
    """Take group's and others' permissions off ``path`` if it has any (a file that is not
    there is left so)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if not mode & 0o077:
        return
    try:
        os.chmod(path, private)
    except PermissionError:  # another user's: its owner decides
        log.warning(
            "%s is open to others than its owner (mode %04o) and is not this user's to "
            "change: make it %04o",
            path,
            mode,
            private,
        )


def connect(path: Path, *, timeout: float) -> LoopConnection:
    """A ``LoopConnection`` to ``path`` (awaiting it opens it), as ``aiosqlite.connect`` would
    open it: ``check_same_thread=False``, the worker thread a daemon. The database and the
    files SQLite keeps beside it are made private first (``private_database``)."""
    if str(path) != ":memory:":
        private_database(path)
    connection = LoopConnection(
        partial(sqlite3.connect, str(path), timeout=timeout, check_same_thread=False)
    )
    connection._thread.daemon = True
    return connection
