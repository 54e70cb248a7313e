"""One run per thread across replicas on PostgreSQL: advisory locks on one session per replica.

``pg_try_advisory_lock`` is session-level, and one session can hold any number of them: each
replica keeps one dedicated lock session (not one pinned connection per run in flight, which
spent a connection per run and made a busy replica run out of them) and takes every thread's
lock on it, together with the thread's claim (``tk_run_claims``) in the same statement:

- a lock and its claim are granted together or not at all, so a refused run can name the
  holder from the claim row (read ``FOR SHARE``: it waits for a claim being written);
- within the replica, an in-process table refuses a second run on a thread first (an
  advisory lock is re-entrant for the session that holds it);
- if the lock session dies, the server releases every lock it held at once: other replicas
  may then take those threads, and the claims they write fence the old runs out of storing
  their rounds; a killed replica frees its threads at once for the same reason.

Release marks the claim released and unlocks in one statement. Advisory locks break behind
PgBouncer in transaction mode: connect directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from threadkeeper.domain.errors import ClaimLost, ThreadBusy
from threadkeeper.domain.locks import USER_BEING_ERASED, ThreadLock, new_token
from threadkeeper.domain.threads import log_name

log = logging.getLogger(__name__)

ACQUIRE = """
WITH got AS MATERIALIZED (SELECT pg_try_advisory_lock(%(lock)s) AS ok),
fence AS MATERIALIZED (
    INSERT INTO tk_user_fences (tenant_id, user_id, erasing)
    SELECT %(tenant)s::varchar, %(user)s::varchar, false FROM got
    WHERE ok AND %(tenant)s::varchar <> ''
    ON CONFLICT (tenant_id, user_id) DO UPDATE SET erasing = tk_user_fences.erasing
    RETURNING erasing
),
claimed AS (
    INSERT INTO tk_run_claims
        (thread_key, tenant_id, user_id, run_id, token, claimed_at, released)
    SELECT %(key)s, %(tenant)s::varchar, %(user)s::varchar, %(run)s, %(token)s, now(), false
    FROM got
    WHERE ok AND NOT EXISTS (SELECT 1 FROM fence WHERE erasing)
    ON CONFLICT (thread_key) DO UPDATE SET
        tenant_id = EXCLUDED.tenant_id, user_id = EXCLUDED.user_id, run_id = EXCLUDED.run_id,
        token = EXCLUDED.token, claimed_at = EXCLUDED.claimed_at, released = false
    RETURNING 1
)
SELECT ok, (SELECT count(*) FROM claimed) AS claimed,
    EXISTS (SELECT 1 FROM fence WHERE erasing) AS erasing
FROM got
"""
"""The lock, the user's fence row (``adapters.sql.user_fence``: written, so locked until the
statement ends; a claim is refused while the user is being erased) and the claim, in one
statement. A deletion's claim (no tenant) writes no fence row."""
UNLOCK = "SELECT pg_advisory_unlock(%s)"
HOLDER = "SELECT run_id, released FROM tk_run_claims WHERE thread_key = %s FOR SHARE"
RELEASE = """
WITH marked AS (
    UPDATE tk_run_claims SET released = true WHERE thread_key = %(key)s AND token = %(token)s
    RETURNING 1
)
SELECT pg_advisory_unlock(%(lock)s) AS unlocked, (SELECT count(*) FROM marked) AS marked
"""
MARK_RELEASED = "UPDATE tk_run_claims SET released = true WHERE thread_key = %s AND token = %s"
HELD = """
SELECT c.run_id FROM tk_run_claims c
WHERE c.thread_key = %(key)s AND NOT c.released AND EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.classid::bigint = %(classid)s AND l.objid::bigint = %(objid)s
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
"""
RETRY_PAUSE_SECONDS = 0.02
CONNECT_SECONDS = 1.0
SERVER_KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '1', false), "
    "set_config('tcp_keepalives_interval', '1', false), "
    "set_config('tcp_keepalives_count', '2', false), "
    "set_config('tcp_user_timeout', '2000', false)"
)
"""The server's side of a session: a client that vanished (a partition, a killed replica whose
FIN never arrived) is noticed within seconds and its session ended — which releases the
advisory locks it held. Without it the server's default keepalive takes two hours."""
IDENTITY = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
END_SESSION = (
    "SELECT pg_terminate_backend(pid, 2000) FROM pg_stat_activity "
    "WHERE pid = %s AND backend_start = %s"
)


def advisory_key(thread_key: str) -> int:
    """A stable signed 64-bit key for ``pg_try_advisory_lock`` (same on every replica)."""
    return int.from_bytes(
        hashlib.blake2b(thread_key.encode(), digest_size=8).digest(), "big", signed=True
    )


def _lock_ids(key: int) -> tuple[int, int]:
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


class AdvisoryThreadLock(ThreadLock):
    """See the module docstring. ``connect_kwargs`` are psycopg's (timeouts, keepalives)."""

    def __init__(
        self,
        url: str,
        connect_kwargs: Mapping[str, Any] | None = None,
        connection_class: type[psycopg.AsyncConnection[Any]] = psycopg.AsyncConnection,
    ) -> None:
        self.url = url
        self.connect_kwargs = dict(connect_kwargs or {})
        self.connection_class = connection_class
        """The lock session's class (``adapters.postgres.deadline``: a statement the server
        never answers fails, instead of holding every claim of this replica behind it)."""
        self._session: psycopg.AsyncConnection[Any] | None = None
        self._identity: tuple[int, Any] | None = None
        """(pid, backend_start) of the lock session on the server."""
        self._lost: tuple[int, Any] | None = None
        """A lock session that broke: ended on the server as soon as a new one connects (its
        backend may outlive the connection — a partition — and keep its locks)."""
        self._generation = 0
        self._mutex = asyncio.Lock()
        self._local: dict[str, str] = {}
        """Threads held in this replica → their run."""
        self._deciding: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        """Per thread, while one of this replica's runs is asking the server for it: a second
        local run waits for that answer (one statement) rather than guess the holder."""

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                session = await self.connection_class.connect(
                    self.url, autocommit=True, row_factory=dict_row, **self.connect_kwargs
                )
        except TimeoutError as exc:  # libpq's connect_timeout is at least 2 s
            raise ConnectionError("the lock session could not connect to PostgreSQL") from exc
        try:
            await session.execute(SERVER_KEEPALIVES)
            row: Any = await (await session.execute(IDENTITY)).fetchone()
            if self._lost is not None:
                # its locks must go with it, or the threads it held stay busy for hours
                await session.execute(END_SESSION, self._lost)
                log.warning("ended the lock session that broke (pid %s)", self._lost[0])
                self._lost = None
        except BaseException:
            await session.close()
            raise
        self._identity = (int(row["pid"]), row["backend_start"])
        return session

    async def _execute(self, query: str, params: Any) -> dict[str, Any] | None:
        """One statement on the lock session (reconnected if it broke); its first row."""
        async with self._mutex:
            if self._session is None or self._session.closed or self._session.broken:
                self._session = await self._connect()
                self._generation += 1
            session = self._session
            try:
                cursor = await session.execute(query, params)
                row: dict[str, Any] | None = await cursor.fetchone()
            except psycopg.OperationalError:
                with contextlib.suppress(Exception):
                    await session.close()
                self._session = None
                self._lost = self._identity
                raise
            return row

    def hold(
        self, thread_key: str, run_id: str, *, tenant_id: str = "", user_id: str = ""
    ) -> AbstractAsyncContextManager[str]:
        return self._hold(thread_key, run_id, tenant_id, user_id)

    @asynccontextmanager
    async def _hold(
        self, thread_key: str, run_id: str, tenant_id: str, user_id: str
    ) -> AsyncIterator[str]:
        # never two of this replica's runs at the server for one thread: its session would
        # grant both (an advisory lock is re-entrant for the session holding it)
        deciding, users = self._deciding.setdefault(thread_key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with deciding:
                if (local := self._local.get(thread_key)) is not None:
                    raise ThreadBusy(local)
                token, generation = await self._acquire(thread_key, run_id, tenant_id, user_id)
                self._local[thread_key] = run_id
        finally:
            users[0] -= 1
            if not users[0]:
                del self._deciding[thread_key]
        try:
            yield token
        finally:
            try:
                await asyncio.shield(self._release(thread_key, token, generation))
            finally:
                del self._local[thread_key]

    async def _acquire(
        self, thread_key: str, run_id: str, tenant_id: str, user_id: str
    ) -> tuple[str, int]:
        params = {
            "lock": advisory_key(thread_key),
            "key": thread_key,
            "tenant": tenant_id,
            "user": user_id,
            "run": run_id,
        }
        for attempt in range(2):
            token = new_token()
            row = await self._execute(ACQUIRE, {**params, "token": token})
            assert row is not None
            if row["ok"] and row["erasing"]:
                await self._execute(UNLOCK, (params["lock"],))
                raise ClaimLost(USER_BEING_ERASED)
            if row["ok"]:
                return token, self._generation
            holder = await self._execute(HOLDER, (thread_key,))
            if holder is not None and not holder["released"]:
                raise ThreadBusy(str(holder["run_id"]))
            # the claim row is not the holder's yet (it is being written), or its run is just
            # letting go: look once more before saying so
            if attempt == 0:
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
        raise ThreadBusy(None)

    async def _release(self, thread_key: str, token: str, generation: int) -> None:
        params = {"lock": advisory_key(thread_key), "key": thread_key, "token": token}
        try:
            if generation == self._generation and self._session is not None:
                await self._execute(RELEASE, params)
            else:  # the session that held the lock is gone, and the lock with it
                await self._execute(MARK_RELEASED, (thread_key, token))
        except Exception:
            # the session broke: the server released the lock with it; the claim stays
            # unreleased, which only affects how a refused run names the holder
            log.warning("releasing the lock of %s failed", log_name(thread_key), exc_info=True)

    async def holder(self, thread_key: str) -> str | None:
        if (local := self._local.get(thread_key)) is not None:
            return local
        classid, objid = _lock_ids(advisory_key(thread_key))
        row = await self._execute(HELD, {"key": thread_key, "classid": classid, "objid": objid})
        return None if row is None else str(row["run_id"])

    async def close(self) -> None:
        async with self._mutex:
            if self._session is not None:
                with contextlib.suppress(Exception):
                    await self._session.close()
                self._session = None
