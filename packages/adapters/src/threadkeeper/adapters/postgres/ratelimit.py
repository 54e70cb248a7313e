"""``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` shared by every replica on the postgres profile.

One row per counted run in ``tk_run_rate_hits`` (Alembic 0003). A hit runs in one
transaction under a transaction-level advisory lock on the user's key (the two-``int4`` lock
space, apart from the run locks' ``bigint`` keys): forget the hits that left the window, count
the rest, add this one if under the limit. The database's clock decides, so replicas with
skewed clocks agree. Satisfies ``threadkeeper.domain.ratelimit.RateWindows``.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from psycopg_pool import AsyncConnectionPool

log = logging.getLogger(__name__)

TABLE = "tk_run_rate_hits"
LOCK_CLASS = 0x746B_726C  # "tkrl": the advisory lock class of rate-limit keys


def _lock_id(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big", signed=True)


class PostgresRateWindows:
    shared = True

    CLEAN_EVERY = 1000
    """Hits between sweeps of every key's expired rows (a user who stops sending runs would
    otherwise leave up to ``limit`` rows for ever)."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool
        self._hits = 0

    async def hit(self, key: str, *, limit: int, window: float) -> float | None:
        """``None`` when counted, else the seconds until one more run is allowed."""
        try:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, _lock_id(key))
                )
                await conn.execute(
                    f"DELETE FROM {TABLE} WHERE key = %s "  # TABLE: a constant
                    "AND at <= now() - make_interval(secs => %s)",
                    (key, window),
                )
                cursor = await conn.execute(
                    f"SELECT count(*) AS n, "  # TABLE: a constant
                    "extract(epoch FROM min(at) + make_interval(secs => %s) - now()) AS wait "
                    f"FROM {TABLE} WHERE key = %s",
                    (window, key),
                )
                row: Any = await cursor.fetchone()
                if row["n"] >= limit:
                    return max(0.0, float(row["wait"]))
                await conn.execute(f"INSERT INTO {TABLE} (key, at) VALUES (%s, now())", (key,))
            self._hits += 1
            if self._hits % self.CLEAN_EVERY == 0:
                async with self.pool.connection() as conn:
                    await conn.execute(
                        f"DELETE FROM {TABLE} WHERE at <= now() - make_interval(secs => %s)",
                        (window,),
                    )
            return None
        except Exception:
            # PostgreSQL is the run lock too: the run itself reports it unavailable (503)
            log.warning("rate limit not checked: PostgreSQL did not answer", exc_info=True)
            return None
