"""``FollowUpWorker`` on the in-memory fake: an attempt that fails after its thread was deleted
is dropped — neither counted nor logged as retried (it was: "retrying in 1 s" for work that no
longer existed) — and an attempt that fails while its work is still there is retried."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support import metrics
from threadkeeper.app.followups import FollowUpWorker, WorkerSettings
from threadkeeper.domain.followups import MEMORY, FollowUp, InMemoryFollowUps


class Failing:
    """A job whose preparation fails — after deleting its thread, with ``delete_first``."""

    def __init__(self, followups: InMemoryFollowUps, *, delete_first: bool) -> None:
        self.followups = followups
        self.delete_first = delete_first

    async def prepare(self, job: FollowUp, *, last: bool) -> Any:
        if self.delete_first:
            await self.followups.cancel_thread(job.thread_key, wait_seconds=1)
        raise TimeoutError


def outcomes(profile: str) -> dict[str, float]:
    return {
        outcome: metrics.total(
            "threadkeeper.followups", kind=MEMORY, outcome=outcome, profile=profile
        )
        for outcome in ("retried", "dropped")
    }


@pytest.mark.parametrize("delete_first", [True, False], ids=["deleted", "still-there"])
async def test_a_failed_attempt_is_retried_only_while_its_work_exists(
    delete_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    followups = InMemoryFollowUps()
    followups.record([MEMORY], "acme:u1:t1", "acme", "u1", "r1")
    profile = f"worker-{delete_first}"
    worker = FollowUpWorker(
        followups,
        {MEMORY: Failing(followups, delete_first=delete_first)},
        WorkerSettings(concurrency=1),
        profile,
    )
    before = outcomes(profile)
    with caplog.at_level(logging.INFO, logger="threadkeeper.app.followups"):
        assert await worker.run_due() == 1
    after = outcomes(profile)
    added = {k: after[k] - before[k] for k in after}
    logged = "\n".join(r.getMessage() for r in caplog.records)
    if delete_first:
        assert added == {"retried": 0, "dropped": 1}
        assert "retrying" not in logged
        assert followups.kinds_to_do() == []
    else:
        assert added == {"retried": 1, "dropped": 0}
        assert "retrying in 1 s" in logged
        assert followups.kinds_to_do() == [MEMORY]


class Counting(InMemoryFollowUps):
    """Counts claims, and the claims that probed first."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0
        self.probed = 0

    async def claim(
        self, limit: int, *, lease_seconds: float, probe: bool = True
    ) -> list[FollowUp]:
        self.claims += 1
        self.probed += probe
        return await super().claim(limit, lease_seconds=lease_seconds, probe=probe)


class Held:
    """A job whose preparation waits for ``release``: the runs it started and finished."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.done: list[str] = []

    async def prepare(self, job: FollowUp, *, last: bool) -> Any:
        self.started.append(job.run_id)
        await self.release.wait()
        self.done.append(job.run_id)
        return None


async def until(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(concurrency: int) -> AsyncIterator[tuple[Counting, Held, FollowUpWorker]]:
    """A started worker over counted in-memory work whose job waits to be released; its poll
    an hour away, so anything taken before that was woken."""
    followups, job = Counting(), Held()
    worker = FollowUpWorker(
        followups, {MEMORY: job}, WorkerSettings(concurrency=concurrency, poll_seconds=3600)
    )
    worker.start()
    try:
        yield followups, job, worker
    finally:
        await worker.stop(grace=5)


async def test_work_recorded_while_every_slot_is_busy_is_taken_when_one_frees() -> None:
    """Not at the next poll (an hour away here): the finished item wakes the loop, because
    work was recorded while no slot was free."""
    async with running(1) as (followups, job, worker):
        followups.record([MEMORY], "acme:u1:t1", "acme", "u1", "r1")
        worker.wake()
        await until(lambda: job.started == ["r1"], "the first item taken")
        followups.record([MEMORY], "acme:u2:t1", "acme", "u2", "r2")  # the one slot is busy
        worker.wake()
        job.release.set()
        await until(lambda: job.done == ["r1", "r2"], "the second item waited for the poll")


async def test_a_process_that_keeps_up_claims_once_per_recorded_item_without_probing() -> None:
    """Each recorded item: one claim, straight to the lock (no probe: the work is known to be
    there); finishing it does not send another."""
    async with running(4) as (followups, job, worker):
        job.release.set()
        await until(lambda: followups.claims == 1, "the first poll")  # the start's probe
        for i in range(5):
            followups.record([MEMORY], f"acme:u{i}:t1", "acme", f"u{i}", f"r{i}")
            worker.wake()
            await until(lambda i=i: len(job.done) == i + 1, f"item {i} done")
            await asyncio.sleep(0.05)  # a claim a finished item would send comes by now
        assert (followups.claims, followups.probed) == (6, 1)


async def test_a_users_next_item_is_taken_as_soon_as_the_one_before_it_is_done() -> None:
    """Order per user and kind holds the second item back while the first is in flight; the
    claim its record woke finds nothing to take — and the first item's end must look again,
    not leave the second to the next poll (an hour away here)."""
    async with running(4) as (followups, job, worker):
        followups.record([MEMORY], "acme:u1:t1", "acme", "u1", "r1")
        worker.wake()
        await until(lambda: job.started == ["r1"], "the first item taken")
        followups.record([MEMORY], "acme:u1:t1", "acme", "u1", "r2")  # held behind r1
        worker.wake()
        claims = followups.claims
        await until(lambda: followups.claims > claims, "the record's claim")
        job.release.set()
        await until(lambda: job.done == ["r1", "r2"], "the second item waited for the poll")
