"""The postgres profile's message ledger (``adapters.ledger``): its rows in
``tk_checkpoint_messages`` (Alembic 0003), over ``AsyncPostgresSaver``.

A round stores its checkpoint through ``MessageLedger.refs_in`` on the round's own
connection (``postgres.rounds``): the new message rows, then the checkpoint with refs, in one
transaction.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from threadkeeper.adapters.ledger import (
    CHANNEL,
    REFS,
    TABLE,
    LedgerCorrupt,
    LedgerRows,
    MessageLedger,
    refs_of,
)

__all__ = [
    "CHANNEL",
    "DDL",
    "REFS",
    "TABLE",
    "LedgerCorrupt",
    "PostgresLedger",
    "PostgresRows",
    "refs_of",
]

DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " seq BIGSERIAL PRIMARY KEY,"
    " thread_id VARCHAR(400) NOT NULL,"
    " type VARCHAR(32) NOT NULL,"
    " body BYTEA NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_thread ON {TABLE} (thread_id, seq)",
)
"""The table as Alembic revision 0003 creates it (used where a test or benchmark makes a
schema without Alembic)."""

_INSERT = (
    f"INSERT INTO {TABLE} (thread_id, type, body) "  # TABLE: a constant
    "SELECT %s, t, b FROM unnest(%s::varchar[], %s::bytea[]) "
    "WITH ORDINALITY AS m(t, b, n) ORDER BY n RETURNING seq"
)


class PostgresRows(LedgerRows):
    """The rows on the profile's psycopg pool, or on a round's connection."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    async def fetch(self, thread_id: str, seqs: list[int]) -> list[tuple[int, str, bytes]]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT seq, type, body FROM {TABLE} "  # TABLE: a constant
                "WHERE seq = ANY(%s) AND thread_id = %s",  # never another thread's rows
                (seqs, thread_id),
            )
            rows: list[Any] = await cursor.fetchall()
        return [(int(r["seq"]), str(r["type"]), bytes(r["body"])) for r in rows]

    async def insert(
        self, thread_id: str, rows: list[tuple[str, bytes]], conn: Any = None
    ) -> list[int]:
        params = (thread_id, [t for t, _ in rows], [b for _, b in rows])
        if conn is None:
            async with self.pool.connection() as pooled:
                cursor = await pooled.execute(_INSERT, params)
                found: list[Any] = await cursor.fetchall()
        else:
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(_INSERT, params)
                found = await cursor.fetchall()
        # RETURNING follows the insert order, and the insert follows ORDER BY n
        return sorted(int(r["seq"]) for r in found)

    async def delete_thread(self, thread_id: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(f"DELETE FROM {TABLE} WHERE thread_id = %s", (thread_id,))

    async def delete_except(self, thread_id: str, keep: list[int], conn: Any = None) -> int:
        statement = f"DELETE FROM {TABLE} WHERE thread_id = %s AND NOT (seq = ANY(%s))"
        if conn is not None:
            async with conn.cursor() as cursor:
                await cursor.execute(statement, (thread_id, keep))
                return int(cursor.rowcount)
        async with self.pool.connection() as pooled:
            cursor = await pooled.execute(statement, (thread_id, keep))
            return int(cursor.rowcount)


class PostgresLedger(MessageLedger):
    """``MessageLedger`` over an ``AsyncPostgresSaver`` and its pool."""

    def __init__(
        self,
        base: AsyncPostgresSaver,
        pool: AsyncConnectionPool[Any],
        *,
        cache_messages: int = 20_000,
        cache_threads: int = 2_000,
        hot_threads: int = 64,
        cache_bytes: int | None = None,
    ) -> None:
        super().__init__(
            base,
            PostgresRows(pool),
            cache_messages=cache_messages,
            cache_threads=cache_threads,
            hot_threads=hot_threads,
            cache_bytes=cache_bytes,
        )
        self.pool = pool
