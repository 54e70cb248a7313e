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

from threadkeeper.domain.errors import ClaimLost, ThreadBusy
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

    async def test_a_user_being_erased_cannot_claim_until_the_erasure_is_over(
        self, thread_lock: ThreadLock, fences: RunFences
    ) -> None:
        """The fence row: a claim by the erased user is refused (twice: a fence row that
        exists already), another user's is not, and once the erasure is over the user's runs
        claim again."""
        erased, kept = f"erased-{uuid.uuid4().hex[:6]}", f"kept-{uuid.uuid4().hex[:6]}"
        async with thread_lock.hold(_key(user=erased), "run-0", tenant_id="acme", user_id=erased):
            pass  # the fence row exists before the erasure, as for any user who ran before
        await fences.revoke_user("acme", erased)
        for attempt in ("run-1", "run-2"):
            with pytest.raises(ClaimLost, match="erased"):
                async with thread_lock.hold(
                    _key(user=erased), attempt, tenant_id="acme", user_id=erased
                ):
                    pytest.fail("a user being erased claimed a thread")
        async with thread_lock.hold(_key(user=kept), "run-3", tenant_id="acme", user_id=kept):
            pass
        await fences.forget_user("acme", erased)
        async with thread_lock.hold(
            _key(user=erased), "run-4", tenant_id="acme", user_id=erased
        ) as token:
            assert token

    async def test_a_forgotten_claim_holds_for_nobody(
        self, thread_lock: ThreadLock, fences: RunFences
    ) -> None:
        key = _key()
        async with thread_lock.hold(key, "run-1", tenant_id="acme", user_id="u1") as token:
            await fences.forget(key)
            assert not await fences.holds(key, token)
