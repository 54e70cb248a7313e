"""One run per thread: the ``RunLock`` port and its in-process implementation."""

from __future__ import annotations

import asyncio
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from threadkeeper.domain.errors import ThreadBusy


class RunLock(ABC):
    """Grants a thread to one run at a time and refuses the others at once (never queues)."""

    @abstractmethod
    def hold(self, thread_key: str, run_id: str) -> AbstractAsyncContextManager[None]:
        """Hold ``thread_key`` for ``run_id`` for the body of the ``async with``.

        Raises:
            ThreadBusy: another run holds the thread; it names that run.
        """

    @abstractmethod
    async def holder(self, thread_key: str) -> str | None:
        """The run holding the thread now, if any."""


class InMemoryRunLock(RunLock):
    """In-process lock table: the unit-test fake and the embedded profile's lock.

    Correct only within one process — which the embedded profile enforces with an exclusive
    lock on its data directory.
    """

    def __init__(self) -> None:
        self._holders: dict[str, str] = {}
        self._mutex = threading.Lock()

    def hold(self, thread_key: str, run_id: str) -> AbstractAsyncContextManager[None]:
        return self._hold(thread_key, run_id)

    @asynccontextmanager
    async def _hold(self, thread_key: str, run_id: str) -> AsyncIterator[None]:
        with self._mutex:
            running = self._holders.get(thread_key)
            if running is not None:
                raise ThreadBusy(running)
            self._holders[thread_key] = run_id
        try:
            yield
        finally:
            with self._mutex:
                if self._holders.get(thread_key) == run_id:
                    del self._holders[thread_key]

    async def holder(self, thread_key: str) -> str | None:
        return self._holders.get(thread_key)


#: How long a deletion waits for a run in flight on the thread before it gives up (409).
DELETE_WAIT_SECONDS = 30.0


@asynccontextmanager
async def hold_when_free(
    lock: RunLock,
    thread_key: str,
    holder: str,
    *,
    wait_seconds: float = DELETE_WAIT_SECONDS,
    poll: float = 0.2,
) -> AsyncIterator[None]:
    """Hold ``thread_key`` as ``holder``, waiting up to ``wait_seconds`` for the run that
    holds it to finish.

    Deletions (``DELETE`` of a thread, erasure, retention) take the thread this way: a run in
    flight would otherwise commit into a thread that is being deleted, and resurrect part of
    it. Runs never wait (``RunLock.hold`` refuses at once); a deletion may.

    Raises:
        ThreadBusy: the thread was still held after ``wait_seconds``; it names the holder.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        stack = AsyncExitStack()
        try:
            await stack.enter_async_context(lock.hold(thread_key, holder))
        except ThreadBusy:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(poll)
            continue
        break
    async with stack:
        yield
