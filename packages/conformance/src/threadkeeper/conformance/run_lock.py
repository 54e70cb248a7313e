"""``RunLock`` conformance: one run per thread, refused at once, released on every exit."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from threadkeeper.domain.errors import ThreadBusy
from threadkeeper.domain.locks import RunLock

LockFactory = Callable[[], RunLock]
"""Returns a lock client. Two calls give two clients of the same lock table (two replicas)."""


async def _enter(lock: RunLock, key: str, run_id: str) -> None:
    async with lock.hold(key, run_id):
        pass


def _key() -> str:
    return f"tenant:user:{uuid.uuid4()}"


class RunLockConformance:
    """Subclass and provide ``lock_factory`` (a fixture returning a ``LockFactory``)."""

    @pytest.fixture
    def lock(self, lock_factory: LockFactory) -> RunLock:
        return lock_factory()

    async def test_a_free_thread_is_granted_and_released(self, lock: RunLock) -> None:
        key = _key()
        assert await lock.holder(key) is None
        async with lock.hold(key, "run-1"):
            assert await lock.holder(key) == "run-1"
        assert await lock.holder(key) is None

    async def test_a_second_run_is_refused_naming_the_first(self, lock: RunLock) -> None:
        key = _key()
        async with lock.hold(key, "run-1"):
            with pytest.raises(ThreadBusy) as caught:
                async with lock.hold(key, "run-2"):
                    pytest.fail("the second run must not enter")
            assert caught.value.running_run_id == "run-1"
            assert await lock.holder(key) == "run-1"  # the refusal left the holder alone

    async def test_the_same_run_id_is_refused_too(self, lock: RunLock) -> None:
        key = _key()
        async with lock.hold(key, "run-1"):
            with pytest.raises(ThreadBusy):
                async with lock.hold(key, "run-1"):
                    pytest.fail("a lock is not re-entrant")

    async def test_refusal_is_immediate(self, lock: RunLock) -> None:
        key = _key()
        async with lock.hold(key, "run-1"):
            with pytest.raises(ThreadBusy):
                await asyncio.wait_for(_enter(lock, key, "run-2"), timeout=2)

    async def test_threads_are_independent(self, lock: RunLock) -> None:
        first, second = _key(), _key()
        async with lock.hold(first, "run-1"), lock.hold(second, "run-2"):
            assert await lock.holder(first) == "run-1"
            assert await lock.holder(second) == "run-2"

    async def test_released_after_an_error(self, lock: RunLock) -> None:
        key = _key()
        with pytest.raises(RuntimeError):
            async with lock.hold(key, "run-1"):
                raise RuntimeError("the run failed")
        async with lock.hold(key, "run-2"):
            assert await lock.holder(key) == "run-2"

    async def test_released_after_cancellation(self, lock: RunLock) -> None:
        key = _key()
        entered = asyncio.Event()

        async def run() -> None:
            async with lock.hold(key, "run-1"):
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(run())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with lock.hold(key, "run-2"):
            assert await lock.holder(key) == "run-2"

    async def test_two_clients_share_one_lock(self, lock_factory: LockFactory) -> None:
        one, other = lock_factory(), lock_factory()
        key = _key()
        async with one.hold(key, "run-1"):
            with pytest.raises(ThreadBusy) as caught:
                async with other.hold(key, "run-2"):
                    pytest.fail("a second replica must be refused")
            assert caught.value.running_run_id == "run-1"
        async with other.hold(key, "run-3"):
            assert await one.holder(key) == "run-3"

    async def test_many_simultaneous_runs_exactly_one_enters(
        self, lock_factory: LockFactory
    ) -> None:
        key = _key()
        clients = [lock_factory() for _ in range(4)]
        release = asyncio.Event()
        entered: list[str | None] = []
        refused: list[str | None] = []
        all_decided = asyncio.Event()

        def decided() -> None:
            if len(entered) + len(refused) == 20:
                all_decided.set()

        async def attempt(index: int) -> None:
            run_id = f"run-{index}"
            try:
                async with clients[index % len(clients)].hold(key, run_id):
                    entered.append(run_id)
                    decided()
                    await release.wait()
            except ThreadBusy as busy:
                refused.append(busy.running_run_id)
                decided()

        tasks = [asyncio.create_task(attempt(i)) for i in range(20)]
        await asyncio.wait_for(all_decided.wait(), timeout=10)
        release.set()
        await asyncio.gather(*tasks)
        assert len(entered) == 1
        assert refused == entered * 19
