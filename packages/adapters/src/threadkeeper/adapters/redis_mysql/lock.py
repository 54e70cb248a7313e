"""One run per thread across replicas: a Redis lock (``SET key token NX PX ttl``).

redis-py's asyncio ``Lock`` does the protocol: ``SET NX PX`` with a token to take it,
compare-and-delete (Lua) to release, compare-and-``PEXPIRE`` to extend. The token is
``<run_id>|<random>``, so the holder can always be named (409) and only its owner can release
it. A background task re-arms the TTL every third of it while the run lives; a process killed
mid-run therefore blocks its thread for at most ``ttl_seconds``. A lock can still be lost (a
Redis flush or restart, a pause longer than the TTL): the run's claim in MySQL
(``ClaimedLock`` + ``SqlRunFences``), checked by the archive transaction, keeps such a run
from storing its round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError

from threadkeeper.domain.errors import ThreadBusy
from threadkeeper.domain.locks import RunLock
from threadkeeper.domain.threads import log_name

log = logging.getLogger(__name__)

PREFIX = "tk:run-lock:"


class RedisRunLock(RunLock):
    def __init__(self, client: Redis, ttl_seconds: float = 30) -> None:
        if ttl_seconds <= 0:
            raise ValueError("the lock TTL must be positive")
        self.client = client
        self.ttl = float(ttl_seconds)

    def hold(self, thread_key: str, run_id: str) -> AbstractAsyncContextManager[None]:
        return self._hold(thread_key, run_id)

    @asynccontextmanager
    async def _hold(self, thread_key: str, run_id: str) -> AsyncIterator[None]:
        lock = Lock(
            self.client,
            PREFIX + thread_key,
            timeout=self.ttl,
            blocking=False,
            thread_local=False,
        )
        token = f"{run_id}|{uuid.uuid4().hex}"
        if not await lock.acquire(token=token):
            holder = await self.holder(thread_key)
            # no holder: it let go between the two commands; try once more
            if holder is not None or not await lock.acquire(token=token):
                raise ThreadBusy(holder or await self.holder(thread_key))
        stop = asyncio.Event()
        keeper = asyncio.create_task(self._keep(lock, thread_key, stop))
        try:
            yield
        finally:
            stop.set()  # the keeper ends even if its cancellation is turned into an error
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            try:
                await asyncio.shield(lock.release())
            except LockError:  # expired (and maybe taken by another run): not ours to delete
                log.warning("run lock on %s had expired before release", log_name(thread_key))

    async def _keep(self, lock: Lock, thread_key: str, stop: asyncio.Event) -> None:
        """Re-arm the TTL every third of it until ``stop``. A cancellation that lands inside a
        Redis command can come out of redis-py as an error (seen: a run's release waited 16
        minutes for a keeper that had swallowed its cancellation and kept extending the
        lock), so ``stop`` is checked after every command as well."""
        while not stop.is_set():
            await asyncio.sleep(self.ttl / 3)
            if stop.is_set():
                return
            try:
                await lock.reacquire()
            except LockError:
                log.error(
                    "run lock on %s was lost (expired while the run lived)", log_name(thread_key)
                )
                return
            except Exception:  # Redis unreachable for a moment: try again next period
                if stop.is_set():
                    return
                log.warning(
                    "could not extend the run lock on %s", log_name(thread_key), exc_info=True
                )

    async def holder(self, thread_key: str) -> str | None:
        token = await self.client.get(PREFIX + thread_key)
        if token is None:
            return None
        text = token.decode() if isinstance(token, bytes) else str(token)
        return text.split("|", 1)[0]
