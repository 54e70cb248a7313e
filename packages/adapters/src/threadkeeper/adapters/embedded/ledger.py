"""The embedded profile's message ledger (``adapters.ledger``): its rows in the data file's
``tk_checkpoint_messages``, over ``AsyncSqliteSaver``.

``AsyncSqliteSaver`` stores each checkpoint as one blob holding every channel's value, so
without the ledger every run read, decoded, encoded and wrote the thread's whole history
again (~480 KB at 200 turns): the cost of a turn grew with the thread (issue 12). With it the
blob holds the list of refs, and a round inserts only its new messages — in the round's own
``BEGIN IMMEDIATE`` transaction (``SqliteRoundStore``). ``seq`` is an ``AUTOINCREMENT`` key, so
SQLite never hands out a number again after a delete, which the cache by ``seq`` relies on.
Every statement holds the profile's one guard (``SqlAccess``).
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sqlalchemy.ext.asyncio import AsyncConnection

from threadkeeper.adapters.ledger import TABLE, LedgerRows, MessageLedger
from threadkeeper.adapters.sql import SqlAccess

DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " thread_id TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " body BLOB NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_thread ON {TABLE} (thread_id, seq)",
)

_BATCH = 500
"""Rows per ``INSERT … RETURNING`` (3 parameters each: well inside SQLite's 32,766)."""
_SEQS = "(SELECT value FROM json_each(?))"
"""A list of seqs as one parameter (a JSON array): no limit on how many."""


class SqliteRows(LedgerRows):
    """The rows in the data file, through the profile's guarded engine."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def fetch(self, thread_id: str, seqs: list[int]) -> list[tuple[int, str, bytes]]:
        async with self.access.connect() as conn:
            result = await conn.exec_driver_sql(
                f"SELECT seq, type, body FROM {TABLE} "  # TABLE: a constant
                f"WHERE thread_id = ? AND seq IN {_SEQS}",
                (thread_id, json.dumps(seqs)),
            )
            found: list[Any] = list(result.fetchall())
        return [(int(seq), str(type_), bytes(body)) for seq, type_, body in found]

    async def insert(
        self, thread_id: str, rows: list[tuple[str, bytes]], conn: Any = None
    ) -> list[int]:
        if conn is None:
            async with self.access.begin() as own:
                return await self._insert(own, thread_id, rows)
        return await self._insert(conn, thread_id, rows)

    @staticmethod
    async def _insert(
        conn: AsyncConnection, thread_id: str, rows: list[tuple[str, bytes]]
    ) -> list[int]:
        seqs: list[int] = []
        for start in range(0, len(rows), _BATCH):
            batch = rows[start : start + _BATCH]
            values = ", ".join(["(?, ?, ?)"] * len(batch))
            result = await conn.exec_driver_sql(
                f"INSERT INTO {TABLE} (thread_id, type, body) "  # TABLE: a constant
                f"VALUES {values} RETURNING seq",
                tuple(p for type_, body in batch for p in (thread_id, type_, body)),
            )
            # AUTOINCREMENT numbers the rows in the order of VALUES; RETURNING's own order is
            # not promised
            seqs.extend(sorted(int(r[0]) for r in result.fetchall()))
        return seqs

    async def delete_thread(self, thread_id: str) -> None:
        async with self.access.begin() as conn:
            await conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE thread_id = ?", (thread_id,))

    async def delete_except(self, thread_id: str, keep: list[int], conn: Any = None) -> int:
        if conn is None:
            async with self.access.begin() as own:
                return await self.delete_except(thread_id, keep, own)
        result = await conn.exec_driver_sql(
            f"DELETE FROM {TABLE} WHERE thread_id = ? AND seq NOT IN {_SEQS}",
            (thread_id, json.dumps(keep)),
        )
        return int(result.rowcount)


def sqlite_ledger(saver: AsyncSqliteSaver, access: SqlAccess) -> MessageLedger:
    """The ledger over the profile's saver: every checkpoint given refs (the saver stores
    every channel's value in each checkpoint), listings read whole before refs are resolved
    (the saver's ``alist`` holds the one guard the rows' reads take)."""
    return MessageLedger(saver, SqliteRows(access), whole_checkpoints=True, buffered_lists=True)


__all__ = ["DDL", "SqliteRows", "sqlite_ledger"]
