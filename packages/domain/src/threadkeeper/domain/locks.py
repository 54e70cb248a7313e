"""One run per thread: the ``RunLock`` port and its in-process implementation."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from threadkeeper.domain.errors import ClaimLost, ThreadBusy


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
    lock: RunLock | ThreadLock,
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


class RunFences(ABC):
    """Each thread's current claim: who may store the next round, checked where it is stored.

    A lock alone cannot keep one round per thread: a lock store can be flushed, a database
    session can die, and the run that held the lock goes on running while another run takes
    the thread. So every run that takes a thread's lock then *claims* the thread here (a new
    random token, which replaces the previous run's), and the transaction that stores the
    round checks — atomically with the write — that the thread's claim is still its own. A
    run whose claim was replaced, or revoked by its user's erasure, stores nothing
    (``ClaimLost``). The claims live where the round is stored (the profile's database),
    never only in the lock store.
    """

    @abstractmethod
    async def claim(self, thread_key: str, tenant_id: str, user_id: str, run_id: str) -> str:
        """Claim ``thread_key`` for ``run_id`` (whose lock is held); the claim's token."""

    @abstractmethod
    async def holds(self, thread_key: str, token: str) -> bool:
        """Whether ``token`` is still the thread's claim (outside a round's transaction:
        the stores check it inside theirs)."""

    @abstractmethod
    async def revoke_user(self, tenant_id: str, user_id: str) -> list[str]:
        """The user's erasure begins: revoke every claim of the user's runs, and refuse every
        new claim of theirs (``ClaimLost``) until ``forget_user``; the thread keys the revoked
        claims were on.

        Atomic with respect to ``claim``: a claim of the user is either made before (and
        revoked here) or refused. So no run that takes a thread while the erasure deletes the
        user's threads can store a round after it — its state, read before the deletion,
        would bring erased messages back (issue 26)."""

    @abstractmethod
    async def forget_user(self, tenant_id: str, user_id: str) -> None:
        """The user's erasure is over: drop their claims, and their runs may claim again.
        Until this is called (an erasure that failed half-way) the user's runs are refused;
        retrying the erasure ends it."""

    @abstractmethod
    async def forget(self, thread_key: str) -> None:
        """Drop the thread's claim (the thread is deleted)."""


USER_BEING_ERASED = "the user is being erased: the run may not take a thread until the erasure ends"


def new_token() -> str:
    return uuid.uuid4().hex


class ThreadLock(ABC):
    """What a run (or a deletion) takes on a thread: the thread's lock *and* its claim.

    ``hold`` refuses at once when another run holds the thread (``ThreadBusy``, naming it),
    and yields the holder's claim token (``RunFences``), which the store checks when it
    stores the round. A deletion claims the thread too, so a run that lost its lock cannot
    write a deleted thread back.
    """

    @abstractmethod
    def hold(
        self, thread_key: str, run_id: str, *, tenant_id: str = "", user_id: str = ""
    ) -> AbstractAsyncContextManager[str]:
        """Hold and claim ``thread_key`` for ``run_id``; yields the claim's token.

        Raises:
            ThreadBusy: another run holds the thread.
        """

    @abstractmethod
    async def holder(self, thread_key: str) -> str | None:
        """The run holding the thread now, if any."""


class ClaimedLock(ThreadLock):
    """A ``RunLock`` for exclusion, then a claim in ``RunFences`` (two steps: fine where the
    lock names its holder by itself — in process, and in Redis by its token)."""

    def __init__(self, lock: RunLock, fences: RunFences) -> None:
        self.lock = lock
        self.fences = fences

    def hold(
        self, thread_key: str, run_id: str, *, tenant_id: str = "", user_id: str = ""
    ) -> AbstractAsyncContextManager[str]:
        return self._hold(thread_key, run_id, tenant_id, user_id)

    @asynccontextmanager
    async def _hold(
        self, thread_key: str, run_id: str, tenant_id: str, user_id: str
    ) -> AsyncIterator[str]:
        async with self.lock.hold(thread_key, run_id):
            yield await self.fences.claim(thread_key, tenant_id, user_id, run_id)

    async def holder(self, thread_key: str) -> str | None:
        return await self.lock.holder(thread_key)


class InMemoryRunFences(RunFences):
    """Claims in a dict: the unit-test fake and the reference for the conformance suite."""

    def __init__(self) -> None:
        self._claims: dict[str, tuple[str, str, str]] = {}  # key → (token, tenant, user)
        self._erasing: set[tuple[str, str]] = set()
        self._mutex = threading.Lock()

    async def claim(self, thread_key: str, tenant_id: str, user_id: str, run_id: str) -> str:
        token = new_token()
        with self._mutex:
            if (tenant_id, user_id) in self._erasing:
                raise ClaimLost(USER_BEING_ERASED)
            self._claims[thread_key] = (token, tenant_id, user_id)
        return token

    async def holds(self, thread_key: str, token: str) -> bool:
        current = self._claims.get(thread_key)
        return current is not None and current[0] == token

    async def revoke_user(self, tenant_id: str, user_id: str) -> list[str]:
        with self._mutex:
            keys = [k for k, (_, t, u) in self._claims.items() if (t, u) == (tenant_id, user_id)]
            for key in keys:
                self._claims[key] = ("revoked", tenant_id, user_id)
            self._erasing.add((tenant_id, user_id))
        return keys

    async def forget_user(self, tenant_id: str, user_id: str) -> None:
        with self._mutex:
            for key in [
                k for k, (_, t, u) in self._claims.items() if (t, u) == (tenant_id, user_id)
            ]:
                del self._claims[key]
            self._erasing.discard((tenant_id, user_id))

    async def forget(self, thread_key: str) -> None:
        with self._mutex:
            self._claims.pop(thread_key, None)
