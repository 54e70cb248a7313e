"""The embedded profile's SQLite connection (``adapters.embedded.connection``): what can wait —
SQLite's write lock, the disk — stays on aiosqlite's thread, the rest runs on the loop, in the
order it was asked for; and a run hands the thread a handful of calls, not ~65."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from litestar.testing import AsyncTestClient

from threadkeeper.adapters.embedded.connection import LoopConnection, connect
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[LoopConnection]:
    connection = await connect(tmp_path / "db.sqlite3", timeout=30)
    raw = connection._conn
    raw.isolation_level = None  # autocommit, as the embedded engine sets it
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("CREATE TABLE t (v TEXT)")
    seen: list[int] = []
    raw.create_function("here", 0, lambda: seen.append(threading.get_ident()) or "x")
    connection.seen = seen  # type: ignore[attr-defined]
    try:
        yield connection
    finally:
        await connection.close()


def where(conn: LoopConnection) -> str:
    """Where the last ``here()`` ran: on the loop's thread or another."""
    ident = conn.seen[-1]  # type: ignore[attr-defined]
    return "loop" if ident == threading.get_ident() else "thread"


async def test_what_waits_for_the_lock_or_the_disk_runs_on_the_thread(conn: LoopConnection) -> None:
    async with conn.execute("SELECT here()") as cursor:
        assert await cursor.fetchall() == [("x",)]
    assert where(conn) == "loop"  # a read in autocommit mode: WAL readers never wait

    await conn.execute("INSERT INTO t VALUES (here())")
    assert where(conn) == "thread"  # an autocommit write: its own transaction and fsync

    hops = conn.hops
    await conn.execute("BEGIN IMMEDIATE")  # the write lock is free: taken without waiting
    assert conn.hops == hops
    await conn.execute("INSERT INTO t VALUES (here())")
    assert where(conn) == "loop"  # inside the transaction: the lock is held
    await conn.execute("COMMIT")  # the transaction wrote: its fsync
    assert conn.hops == hops + 1

    await conn.execute("BEGIN")  # deferred: takes no lock
    async with conn.execute("SELECT count(*) FROM t") as cursor:
        assert await cursor.fetchone() == (2,)
    await conn.commit()  # wrote nothing: nothing to wait for
    assert conn.hops == hops + 1


async def test_a_begin_taken_on_the_loop_holds_the_write_lock_and_keeps_the_busy_timeout(
    conn: LoopConnection, tmp_path: Path
) -> None:
    async with conn.execute("PRAGMA busy_timeout") as cursor:
        assert await cursor.fetchone() == (30_000,)
    await conn.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            other.execute("BEGIN IMMEDIATE")
        await conn.execute("ROLLBACK")
        other.execute("BEGIN IMMEDIATE")  # released
        other.execute("ROLLBACK")
    finally:
        other.close()
    async with conn.execute("PRAGMA busy_timeout") as cursor:
        assert await cursor.fetchone() == (30_000,)  # what it was, for the waits on the thread


async def test_a_writer_waiting_for_the_lock_leaves_the_loop_running(
    conn: LoopConnection, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's writer (a backup, an export) holds it
    ticks, ticked = 0, asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks == 20:
                ticked.set()
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    begin = asyncio.create_task(conn.execute("BEGIN IMMEDIATE"))
    await asyncio.wait_for(ticked.wait(), timeout=60)  # the loop runs while our BEGIN waits
    assert not begin.done()
    other.execute("COMMIT")
    await asyncio.wait_for(begin, timeout=60)
    await conn.execute("INSERT INTO t VALUES ('ours')")
    await conn.execute("COMMIT")
    ticker.cancel()
    other.close()
    assert ticks >= 20


async def test_calls_keep_their_order_behind_a_call_on_the_thread(conn: LoopConnection) -> None:
    write = asyncio.ensure_future(conn.execute("INSERT INTO t VALUES ('first')"))
    await asyncio.sleep(0)  # the write is queued for the thread, not done
    async with conn.execute("SELECT v, here() FROM t") as cursor:
        rows = await cursor.fetchall()
    await write
    assert rows == [("first", "x")]  # the read waited for the write queued before it
    assert where(conn) == "thread"  # ... by going to the thread behind it


async def test_a_cancelled_call_still_on_the_thread_keeps_the_next_ones_behind_it(
    conn: LoopConnection, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    begin = asyncio.create_task(conn.execute("BEGIN IMMEDIATE"))
    await asyncio.sleep(0.05)  # queued on the thread, waiting for the lock
    begin.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await begin
    read = asyncio.create_task(conn.execute("SELECT here()"))
    await asyncio.sleep(0.05)
    assert not read.done()  # behind the BEGIN the thread is still running, not beside it
    other.execute("COMMIT")
    other.close()
    await asyncio.wait_for(read, timeout=60)
    assert where(conn) == "thread"
    await conn.execute("ROLLBACK")  # the cancelled BEGIN did begin


async def test_what_a_transaction_wrote_is_on_disk_after_it(
    conn: LoopConnection, tmp_path: Path
) -> None:
    await conn.execute("BEGIN IMMEDIATE")
    await conn.executemany("INSERT INTO t VALUES (?)", [("a",), ("b",)])
    await conn.execute("COMMIT")
    await conn.execute("BEGIN IMMEDIATE")
    await conn.execute("INSERT INTO t VALUES ('c')")
    await conn.execute("ROLLBACK")
    reader = sqlite3.connect(tmp_path / "db.sqlite3")
    try:
        assert sorted(reader.execute("SELECT v FROM t")) == [("a",), ("b",)]
    finally:
        reader.close()


async def test_a_run_hands_sqlites_thread_a_few_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every cursor, statement, fetch and close was a round trip through aiosqlite's
    thread: 64.5 per run."""
    hops = 0
    queued = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await queued(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    # no follow-up worker: the runs' own calls
    settings = Settings.of(profile="embedded", data_dir=str(tmp_path / "data"), followup_workers=0)
    app = create_app(settings)
    async with AsyncTestClient(app, timeout=30) as client:
        client.headers.update({"X-Tenant-Id": "acme", "X-User-Id": "user-1"})

        async def run(thread: str, content: str) -> None:
            response = await client.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": content}},
                headers={"Accept": "application/json"},
            )
            assert response.status_code == 200, response.text

        await run("warm", "Hello")
        before = hops
        for turn in range(6):
            await run(f"t-{turn // 3}", f"Is dental treatment covered? ({turn})")
        per_run = (hops - before) / 6
    # the COMMITs of the claim and the round (each BEGIN IMMEDIATE found the write lock free and
    # took it on the loop); the memory is follow-up work, after the answer
    assert per_run <= 2, per_run


async def test_a_transaction_that_cannot_have_the_write_lock_fails_as_sqlalchemys_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's ``BEGIN IMMEDIATE`` goes to the DBAPI cursor, not through SQLAlchemy's
    execution; while another process holds SQLite's write lock past the busy timeout, it fails
    as a statement does (``sqlalchemy.exc.OperationalError``, which the service answers as
    storage it cannot reach), not as the driver's own error."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from threadkeeper.adapters.embedded import backend

    monkeypatch.setattr(backend, "BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "locked.db"
    engine = backend.sqlite_engine(path)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (k TEXT)"))
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(OperationalError, match="database is locked"):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES ('a')"))
        holder.execute("ROLLBACK")
        async with engine.begin() as conn:  # the lock free again: the same engine works
            await conn.execute(text("INSERT INTO t VALUES ('a')"))
    finally:
        holder.close()
        await engine.dispose()
