"""``hold_when_free``: deletions wait for a run in flight on the thread, within a limit."""

from __future__ import annotations

import asyncio

import pytest

from threadkeeper.domain.errors import ThreadBusy
from threadkeeper.domain.locks import InMemoryRunLock, hold_when_free


async def test_waits_for_the_run_then_holds_the_thread() -> None:
    lock = InMemoryRunLock()
    order: list[str] = []
    released = asyncio.Event()

    async def run() -> None:
        async with lock.hold("t", "run-1"):
            order.append("run starts")
            await released.wait()
            order.append("run ends")

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0.1, released.set)
    async with hold_when_free(lock, "t", "deletion", wait_seconds=5):
        order.append("deletion")
        assert await lock.holder("t") == "deletion"
        with pytest.raises(ThreadBusy) as refused:  # a run arriving now is refused
            async with lock.hold("t", "run-2"):
                pass
        assert refused.value.running_run_id == "deletion"
    await task
    assert order == ["run starts", "run ends", "deletion"]
    assert await lock.holder("t") is None


async def test_gives_up_after_the_timeout_naming_the_run() -> None:
    lock = InMemoryRunLock()
    async with lock.hold("t", "run-1"):
        with pytest.raises(ThreadBusy) as refused:
            async with hold_when_free(lock, "t", "deletion", wait_seconds=0.1):
                pytest.fail("held a busy thread")
    assert refused.value.running_run_id == "run-1"


async def test_releases_the_thread_when_the_body_fails() -> None:
    lock = InMemoryRunLock()
    with pytest.raises(RuntimeError):
        async with hold_when_free(lock, "t", "deletion"):
            raise RuntimeError("storage failed")
    assert await lock.holder("t") is None
