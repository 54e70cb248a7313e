"""``RedisRunLock``'s keeper: a run's release never waits on it for ever.

The keeper re-arms the lock's TTL while the run lives; the release cancels it and waits for it.
A cancellation that lands inside a Redis command can come out of the client as an error, which
the keeper's "Redis unreachable for a moment" branch caught: it went on extending the lock, and
the run's release waited — 16 minutes in a storage fault test, until the lock expired."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from threadkeeper.adapters.redis_mysql import lock as lock_module
from threadkeeper.adapters.redis_mysql.lock import RedisRunLock


class _CancelSwallowingLock:
    """A ``redis.asyncio.lock.Lock`` whose ``reacquire`` turns a cancellation into an error,
    as a Redis command interrupted at the wrong moment can."""

    extending = asyncio.Event()
    released = 0
    swallow = True

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def acquire(self, token: str | None = None) -> bool:
        return True

    async def reacquire(self) -> bool:
        type(self).extending.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if not type(self).swallow:
                raise
            raise RedisTimeoutError("Timeout reading from redis") from None
        return True

    async def release(self) -> None:
        type(self).released += 1


async def test_a_release_ends_a_keeper_that_swallowed_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lock_module, "Lock", _CancelSwallowingLock)
    _CancelSwallowingLock.extending = asyncio.Event()
    _CancelSwallowingLock.released = 0
    _CancelSwallowingLock.swallow = True
    run_lock = RedisRunLock(client=None, ttl_seconds=0.3)  # type: ignore[arg-type]

    async def run() -> None:
        async with run_lock.hold("thread:t1", "run-1"):
            await _CancelSwallowingLock.extending.wait()  # the keeper is inside a command

    task = asyncio.create_task(run())
    done, _ = await asyncio.wait({task}, timeout=10)  # not a cancellation: it could be eaten
    if task not in done:  # before: for ever; let the keeper die so that the test can end
        _CancelSwallowingLock.swallow = False
        pytest.fail("the run's release is still waiting for the lock's keeper after 10 s")
    await task
    assert _CancelSwallowingLock.released == 1
