"""Retention on the postgres profile: a thread's activity is its newest checkpoint's ``ts``.

``ts`` sits inside the ``checkpoint`` JSON (an ISO-8601 UTC string LangGraph writes); Alembic
0003 indexes it as text in the "C" collation, where ISO strings of one offset sort in time
order (``ix_tk_checkpoints_ts``). A thread is idle when it has a checkpoint older than the
cutoff and none newer. Every checkpoint comes from a committed run, so this is the time of the
thread's last round, and it does not depend on the run record having been saved.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore
from psycopg_pool import AsyncConnectionPool

from threadkeeper.adapters.checkpoint_retention import CheckpointRetention
from threadkeeper.adapters.postgres.ledger import TABLE as LEDGER
from threadkeeper.adapters.postgres.ratelimit import TABLE as RATE_TABLE
from threadkeeper.adapters.sql import SqlRunFences, SqlRunRecords
from threadkeeper.domain.locks import RunLock, ThreadLock

TS_INDEX = "ix_tk_checkpoints_ts"
TS = "(checkpoint->>'ts') COLLATE \"C\""
"""The indexed expression; a query must spell it the same way for the planner to use it."""

IDLE_THREADS = f"""
SELECT c.thread_id, max({TS}) AS newest
FROM checkpoints c
WHERE c.checkpoint_ns = '' AND {TS} < %(cutoff)s
  AND NOT EXISTS (
    SELECT 1 FROM checkpoints n
    WHERE n.thread_id = c.thread_id AND n.checkpoint_ns = ''
      AND (n.checkpoint->>'ts') COLLATE "C" >= %(cutoff)s
  )
GROUP BY c.thread_id
ORDER BY newest, c.thread_id
LIMIT %(limit)s
"""


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def iso_ts(moment: datetime) -> str:
    """``moment`` as LangGraph writes a checkpoint's ``ts`` (ISO 8601 in UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


class PostgresRetention(CheckpointRetention):
    store_name = "postgres"

    def __init__(
        self,
        saver: BaseCheckpointSaver[Any],
        store: BaseStore,
        runs: SqlRunRecords,
        pool: AsyncConnectionPool[Any],
        lock: RunLock | ThreadLock | None = None,
        fences: SqlRunFences | None = None,
    ) -> None:
        super().__init__(saver, store, runs, lock, fences)
        self.pool = pool

    async def user_thread_keys(self, tenant_id: str, user_id: str) -> set[str]:
        """Run records plus checkpoint metadata (``metadata @> …``, the GIN index), without
        loading any checkpoint's messages."""
        keys = set(await self.runs.user_threads(tenant_id, user_id))
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE metadata @> %s::jsonb",
                (json.dumps({"tenant_id": tenant_id, "user_id": user_id}),),
            )
            rows: list[Any] = await cursor.fetchall()
        keys.update(str(row["thread_id"]) for row in rows)
        return keys

    async def erase_rest(self, tenant_id: str, user_id: str) -> None:
        """Also what no checkpoint refers to: message rows a failed first commit left behind
        on a thread that has no checkpoint (found by the thread key's user prefix), and the
        user's rate-limit rows.

        Only threads without any checkpoint: in scope ``global`` a key is ``tenant:thread``,
        so carol's thread ``bob:notes`` has the key a thread of user ``bob`` has in scope
        ``user`` — its rows are carol's and stay (issue 26: they were deleted, and the thread
        failed with ``LedgerCorrupt`` in the next process)."""
        prefix = f"{tenant_id}:{user_id}:"  # ThreadRef.key of the user's threads (no ":" in ids)
        async with self.pool.connection() as conn:
            await conn.execute(
                f"DELETE FROM {LEDGER} m WHERE m.thread_id LIKE %s ESCAPE '\\'"  # a constant
                " AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = m.thread_id)",
                (_like_prefix(prefix),),
            )
            await conn.execute(
                f"DELETE FROM {RATE_TABLE} WHERE key = %s",  # RATE_TABLE: a constant
                (f"{tenant_id}:{user_id}",),
            )

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        """Also the erased threads' message rows, and the user's rate-limit rows."""
        left = await super().remaining(tenant_id, user_id, thread_keys)
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT (SELECT count(*) FROM {LEDGER} WHERE thread_id = ANY(%s))"  # constants
                f" + (SELECT count(*) FROM {RATE_TABLE} WHERE key = %s) AS n",
                (list(thread_keys), f"{tenant_id}:{user_id}"),
            )
            row: Any = await cursor.fetchone()
        return {self.store_name: left[self.store_name] + int(row["n"])}

    async def is_idle(self, thread_key: str, cutoff: datetime) -> bool:
        """Whether the thread has no top-level checkpoint at or after ``cutoff``."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %s "
                f"AND checkpoint_ns = '' AND {TS} >= %s) AS active",
                (thread_key, iso_ts(cutoff)),
            )
            row: Any = await cursor.fetchone()
        return not row["active"]

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(IDLE_THREADS, {"cutoff": iso_ts(cutoff), "limit": limit})
            rows: list[Any] = await cursor.fetchall()
        return [str(row["thread_id"]) for row in rows]
