"""A round on the redis-mysql profile: the MySQL archive first, Redis after.

The archive is the record, so the round is stored when one MySQL transaction has committed:
the run's claim checked (its row locked ``FOR UPDATE``), the round's two messages, its
summary and tool-call audit rows, and the run record. Only then are the staged checkpoints
written to Redis, which is a cache of the recent context: if that fails (or takes over
``redis_seconds``), the round stays acknowledged, and the thread's next run finds its
checkpoint behind the archive and starts cold from the archive, which holds the whole round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from threadkeeper.adapters.atomic import SaverSink
from threadkeeper.adapters.redis_mysql.archive import SqlTranscriptArchive
from threadkeeper.adapters.redis_mysql.saver import HealingRedisSaver
from threadkeeper.adapters.rounds import RoundWrite
from threadkeeper.adapters.sql_rounds import SqlRoundStore
from threadkeeper.adapters.timeouts import answer_within

log = logging.getLogger(__name__)


async def session_id(conn: AsyncConnection) -> int:
    """The connection's MySQL session (``CONNECTION_ID()``, what ``KILL`` takes), as the driver
    learnt it from the server's handshake (asyncmy's ``thread_id()``): no round trip per round.
    SQLAlchemy's pool never reconnects a connection in place (a ping that fails replaces it),
    so the handshake's id is the session's. A driver that does not say is asked the server."""
    raw = await conn.get_raw_connection()
    told = getattr(raw.driver_connection, "thread_id", None)
    if callable(told) and (known := told()):
        return int(known)
    return int((await conn.execute(text("SELECT CONNECTION_ID()"))).scalar_one())


class ArchiveRoundStore(SqlRoundStore):
    def __init__(
        self,
        engine: AsyncEngine,
        archive: SqlTranscriptArchive,
        saver: HealingRedisSaver,
        redis_seconds: float = 1.5,
    ) -> None:
        self.engine = engine
        self.archive = archive
        self.saver = saver
        self.redis_seconds = redis_seconds
        """How long the checkpoints' write (and, failing it, their drop) may take."""

    def check(self, write: RoundWrite) -> None:
        if not write.round.ai.content.strip():
            raise RuntimeError("the round has no answer text to archive")

    async def session(self, conn: AsyncConnection) -> int:
        return await session_id(conn)

    async def write_round(self, conn: AsyncConnection, write: RoundWrite) -> None:
        """The round's messages, summary and tool-call audit rows into the archive."""
        await self.archive.append_in(conn, write.round, write.tools)

    def head_in_doubt(self, write: RoundWrite) -> str | None:
        # stored or not, Redis is not written: if it was stored, the thread's next run finds
        # its checkpoint behind the archive and starts cold from it
        return None

    async def committed(self, write: RoundWrite, written: None) -> str | None:
        return await self._write_checkpoints(write)

    async def _write_checkpoints(self, write: RoundWrite) -> str | None:
        """The staged checkpoints into Redis, within ``redis_seconds``. If that fails, the
        thread's checkpoint is behind the archive, and its next run notices and starts cold
        from the archive (``RunService._cold_start``): no second Redis call that would fail
        the same way holds the answer."""

        async def put_all() -> Any:
            sink = SaverSink(self.saver)
            await write.staging.replay(sink)
            return sink.last

        try:
            last = await answer_within(self.redis_seconds, put_all())
        except Exception:
            log.warning(
                "run %s is archived but its checkpoints did not reach Redis; the thread's "
                "next run starts from the archive",
                write.record.run_id,
                exc_info=True,
            )
            return None
        return None if last is None else str(last["configurable"]["checkpoint_id"])

    async def end_session(self, session: int) -> None:
        """``KILL`` the broken transaction's connection if the server still has it, and wait
        until it is gone (``KILL`` only flags it)."""
        alive = text("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = :id")
        async with self.engine.connect() as conn:
            for attempt in range(100):
                if not (await conn.execute(alive, {"id": session})).scalar_one():
                    return
                if attempt == 0:
                    with contextlib.suppress(Exception):  # it ended meanwhile
                        await conn.execute(text(f"KILL CONNECTION {int(session)}"))
                await asyncio.sleep(0.05)
        raise TimeoutError(f"MySQL connection {session} did not end")
