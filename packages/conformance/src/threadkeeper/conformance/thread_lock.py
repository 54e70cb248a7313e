"""``ThreadLock`` conformance: a lock that also claims the thread (``RunFences``).

Every holder — a run or a deletion — replaces the thread's claim with its own token; the
transaction that stores a round checks the token (``check_claim``), so a run whose lock was
lost, or whose user was erased, stores nothing. The ``RunLockConformance`` suite covers the
exclusion; this one the claims.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from threadkeeper.domain.errors import ThreadBusy
from threadkeeper.domain.locks import RunFences, ThreadLock

ThreadLockFactory = Callable[[], ThreadLock]


def _key(tenant: str = "acme", user: str = "u1") -> str:
    return f"{tenant}:{user}:{uuid.uuid4().hex[:8]}"


class ThreadLockConformance:
    """Subclass and provide ``thread_lock_factory`` and ``fences`` (the claims the locks
    write, as the profile's stores read them)."""

    @pytest.fixture
    def thread_lock(self, thread_lock_factory: ThreadLockFactory) -> ThreadLock:
        return thread_lock_factory()

    async def test_a_holder_gets_the_threads_claim(
        self, thread_lock: ThreadLock, fences: RunFences
    ) -> None:
        key = _key()
        async with thread_lock.hold(key, "run-1", tenant_id="acme", user_id="u1") as token:
            assert token
            assert await fences.holds(key, token)
        async with thread_lock.hold(key, "run-2", tenant_id="acme", user_id="u1") as second:
            assert second != token
            assert await fences.holds(key, second)
            assert not await fences.holds(key, token), "the next holder's claim replaces it"

    async def test_a_refused_run_claims_nothing(
        self, thread_lock_factory: ThreadLockFactory, fences: RunFences
    ) -> None:
        key = _key()
        one, other = thread_lock_factory(), thread_lock_factory()
        async with one.hold(key, "run-1", tenant_id="acme", user_id="u1") as token:
            with pytest.raises(ThreadBusy) as caught:
                async with other.hold(key, "run-2", tenant_id="acme", user_id="u1"):
                    pytest.fail("entered a held thread")
            assert caught.value.running_run_id == "run-1"
            assert await fences.holds(key, token)

    async def test_erasure_revokes_the_users_claims_only(
        self, thread_lock: ThreadLock, fences: RunFences
    ) -> None:
        mine, theirs = _key(user="erased"), _key(user="kept")
        async with (
            thread_lock.hold(mine, "run-1", tenant_id="acme", user_id="erased") as revoked,
            thread_lock.hold(theirs, "run-2", tenant_id="acme", user_id="kept") as kept,
        ):
            assert await fences.revoke_user("acme", "erased") == [mine]
            assert not await fences.holds(mine, revoked)
            assert await fences.holds(theirs, kept)

    async def test_a_forgotten_claim_holds_for_nobody(
        self, thread_lock: ThreadLock, fences: RunFences
    ) -> None:
        key = _key()
        async with thread_lock.hold(key, "run-1", tenant_id="acme", user_id="u1") as token:
            await fences.forget(key)
            assert not await fences.holds(key, token)
