"""The commit outline every round store on a SQL server shares (postgres, redis-mysql).

One transaction on one connection: the run's claim checked (``check_claim``: its row locked,
so a run that claims the thread meanwhile waits for this transaction), the round written as
the profile writes it (``write_round``), the run record and the round's follow-up work. Any
failure before the commit rolls it all back (``abandon`` first forgets what the profile
prepared); a commit whose connection broke is resolved before answering
(``resolve_in_doubt``: the transaction's server session ended, then the run record looked
for). After the commit, ``committed`` finishes (the ledger's cache, or Redis).
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from threadkeeper.adapters.rounds import RoundStore, RoundWrite, resolve_in_doubt
from threadkeeper.adapters.sql import check_claim, insert_record, record_followups, run_records


class SqlRoundStore(RoundStore):
    """A round in one transaction of ``engine`` (see the module docstring)."""

    engine: AsyncEngine

    async def commit(self, write: RoundWrite) -> str | None:
        self.check(write)
        async with self.engine.connect() as conn:
            try:
                await check_claim(conn, write.thread_key, write.claim)
                session = await self.session(conn)
                written = await self.write_round(conn, write)
                await insert_record(conn, write.stored_record())
                await record_followups(conn, write.record, write.followups)
            except BaseException:
                self.abandon(write)
                with contextlib.suppress(Exception):
                    await conn.rollback()
                raise
            try:
                await conn.commit()
            except Exception as failure:
                self.abandon(write)
                await resolve_in_doubt(
                    failure,
                    end_session=lambda: self.end_session(session),
                    stored=lambda: self.stored(write),
                    what=f"run {write.record.run_id}",
                )
                return self.head_in_doubt(write)
        return await self.committed(write, written)

    def check(self, write: RoundWrite) -> None:
        """Refuse a round that cannot be stored, before any connection (none by default)."""

    @abstractmethod
    async def session(self, conn: AsyncConnection) -> Any:
        """The transaction's server session, as ``end_session`` takes it."""

    @abstractmethod
    async def write_round(self, conn: AsyncConnection, write: RoundWrite) -> Any:
        """The round itself, in the transaction; what ``committed`` needs afterwards."""

    def abandon(self, write: RoundWrite) -> None:
        """The transaction failed, or its outcome is in doubt: forget what ``write_round``
        prepared for after the commit (nothing by default)."""

    @abstractmethod
    async def end_session(self, session: Any) -> None:
        """End the broken transaction's session on the server, so that its COMMIT can never
        land later, and wait until it is gone."""

    @abstractmethod
    def head_in_doubt(self, write: RoundWrite) -> str | None:
        """The head to answer with when a commit in doubt turned out stored."""

    @abstractmethod
    async def committed(self, write: RoundWrite, written: Any) -> str | None:
        """After the commit: the new head checkpoint id (``None``: only the record)."""

    async def stored(self, write: RoundWrite) -> bool:
        """Whether the round's run record is stored (a commit in doubt)."""
        async with self.engine.connect() as conn:
            found = await conn.execute(
                select(run_records.c.run_id).where(
                    run_records.c.thread_key == write.thread_key,
                    run_records.c.run_id == write.record.run_id,
                )
            )
            return found.first() is not None
