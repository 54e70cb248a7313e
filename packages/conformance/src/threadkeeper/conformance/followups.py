"""``FollowUps`` conformance: work taken with a lease and taken again once it ran out, a
user's work one item at a time in the order it was recorded, fences (deletion refuses the
writes not yet announced and waits for those that were), retries after their delay, given-up
work kept and counted, work handed back uncounted, and what is pending.

The suite records work through a ``FollowUpsHarness`` (the port has no ``record``: the round
stores record work in a round's transaction); ``SqlFollowUpsHarness`` is one for
``adapters.followups.SqlFollowUps`` on any profile's engine (it records as the round stores do,
with ``adapters.sql.record_followups``).

Every test asserts on order and outcome, never on speed: short leases and delays are waited
out by polling under a generous deadline.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

import pytest

from threadkeeper.adapters.followups import SqlFollowUps
from threadkeeper.adapters.sql import record_followups
from threadkeeper.conformance.run_records import record
from threadkeeper.domain.followups import MEMORY, SUMMARY, FollowUp, FollowUps
from threadkeeper.domain.runs import RunRecord

LONG = 120.0
"""A lease or delay no test outlives."""
SHORT = 0.3
"""A lease or delay a test waits out."""
DEADLINE = 60.0
"""How long a test polls for what must happen (generous: a busy machine passes)."""
POLL = 0.02


class FollowUpsHarness(Protocol):
    """What a suite needs besides the port: a way to record work, as a round store does."""

    @property
    def followups(self) -> FollowUps: ...

    async def record(self, run: RunRecord, kinds: Sequence[str] = (MEMORY,)) -> None:
        """The follow-up work of ``run``'s round, one item per kind, due now."""


class SqlFollowUpsHarness:
    """Records work into ``tk_followups`` as the round stores do, in a transaction of the
    adapter's own engine (embedded, postgres and redis-mysql alike)."""

    def __init__(self, followups: SqlFollowUps) -> None:
        self.followups = followups

    async def record(self, run: RunRecord, kinds: Sequence[str] = (MEMORY,)) -> None:
        async with self.followups.begin() as conn:
            await record_followups(conn, run, kinds)


def user() -> str:
    return f"u{uuid.uuid4().hex[:8]}"


def run(tenant: str = "acme", owner: str | None = None, thread: str | None = None) -> RunRecord:
    """A run record of ``owner`` (a new user unless given) on ``thread`` (a new one unless
    given): what the work names."""
    owner = owner or user()
    return record(
        f"{tenant}:{owner}:{thread or f't-{uuid.uuid4().hex[:8]}'}", tenant=tenant, user=owner
    )


async def claim_until(
    followups: FollowUps, *, limit: int = 10, lease_seconds: float = LONG
) -> list[FollowUp]:
    """The first non-empty claim (the test fails if none comes before ``DEADLINE``)."""
    deadline = time.monotonic() + DEADLINE
    while not (jobs := await followups.claim(limit, lease_seconds=lease_seconds)):
        assert time.monotonic() < deadline, "no work became due"
        await asyncio.sleep(POLL)
    return jobs


async def pending(followups: FollowUps) -> int:
    return (await followups.counts()).pending.get(MEMORY, 0)


async def given_up(followups: FollowUps) -> int:
    return (await followups.counts()).given_up.get(MEMORY, 0)


class FollowUpsConformance:
    """Subclass and provide ``harness`` (a fixture returning a ``FollowUpsHarness``) on an
    otherwise empty store."""

    # -- leases ---------------------------------------------------------------------------------

    async def test_claimed_work_names_its_run_and_is_not_handed_out_twice(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        item = run()
        before = datetime.now(UTC)
        await harness.record(item)
        after = datetime.now(UTC)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert (job.kind, job.thread_key, job.tenant_id, job.user_id, job.run_id) == (
            MEMORY,
            item.thread_key,
            item.tenant_id,
            item.user_id,
            item.run_id,
        )
        assert job.attempts == 1
        assert job.lease
        assert before <= job.enqueued_at <= after
        assert await followups.claim(10, lease_seconds=LONG) == [], "its lease still runs"
        assert await followups.pending_for(item.tenant_id, item.user_id)
        await followups.done(job)
        assert await followups.claim(10, lease_seconds=LONG) == []
        assert not await followups.pending_for(item.tenant_id, item.user_id)

    async def test_a_claim_without_a_probe_takes_what_a_probed_claim_takes(
        self, harness: FollowUpsHarness
    ) -> None:
        """``probe=False`` (a worker woken because its process recorded work) skips the read
        before the lock: the same items, in the same order, and nothing when nothing is due."""
        followups = harness.followups
        assert await followups.claim(10, lease_seconds=LONG, probe=False) == []
        owner = user()
        first, second, other = run(owner=owner), run(owner=owner), run()
        for item in (first, second, other):
            await harness.record(item)
        jobs = await followups.claim(10, lease_seconds=LONG, probe=False)
        assert [j.run_id for j in jobs] == [first.run_id, other.run_id], "one per user and kind"
        assert await followups.claim(10, lease_seconds=LONG, probe=False) == []
        await followups.done(jobs[0])
        [nxt] = await followups.claim(10, lease_seconds=LONG, probe=False)
        assert nxt.run_id == second.run_id

    async def test_work_whose_lease_ran_out_is_taken_again_and_the_first_worker_is_fenced(
        self, harness: FollowUpsHarness
    ) -> None:
        """The first worker was killed (or stalled past its lease): another takes the work,
        its attempt counted; nothing the first one does after touches the second's."""
        followups = harness.followups
        item = run()
        await harness.record(item)
        [first] = await followups.claim(10, lease_seconds=SHORT)
        [second] = await claim_until(followups)
        assert second.id == first.id
        assert second.attempts == 2
        assert second.lease != first.lease
        assert not await followups.begin_write(first, lease_seconds=LONG)
        await followups.done(first)
        assert not await followups.retry(first, after_seconds=0, error="Stale")
        assert not await followups.give_up(first, error="Stale")
        await followups.release(first)
        assert await pending(followups) == 1, "the second worker's row is kept"
        assert await given_up(followups) == 0
        assert await followups.claim(10, lease_seconds=LONG) == [], "the second lease runs"
        assert await followups.begin_write(second, lease_seconds=LONG)
        await followups.done(second)
        assert await pending(followups) == 0
        assert not await followups.pending_for(item.tenant_id, item.user_id)

    async def test_a_write_whose_worker_died_is_taken_again_once_its_lease_ran_out(
        self, harness: FollowUpsHarness
    ) -> None:
        """A worker killed after announcing its write leaves the work announced: once the
        write's lease ran out it is taken again, like any work whose lease ran out (else the
        user's work stays pending for ever and their later work is never taken)."""
        followups = harness.followups
        owner = user()
        earlier, later = run(owner=owner), run(owner=owner)
        await harness.record(earlier)
        await harness.record(later)
        [dead] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.begin_write(dead, lease_seconds=SHORT)
        [again] = await claim_until(followups)
        assert (again.id, again.attempts) == (dead.id, 2)
        await followups.done(dead)
        assert await followups.begin_write(again, lease_seconds=LONG), "the row is the new one's"
        await followups.done(again)
        [nxt] = await followups.claim(10, lease_seconds=LONG)
        assert nxt.run_id == later.run_id

    async def test_an_announced_write_renews_the_lease(self, harness: FollowUpsHarness) -> None:
        followups = harness.followups
        await harness.record(run())
        [job] = await followups.claim(10, lease_seconds=SHORT)
        assert await followups.begin_write(job, lease_seconds=LONG)
        await asyncio.sleep(SHORT * 3)  # the claim's lease ran out; the write's runs
        assert await followups.claim(10, lease_seconds=LONG) == []
        await followups.done(job)
        assert await pending(followups) == 0

    # -- order ----------------------------------------------------------------------------------

    async def test_oldest_first_within_the_limit(self, harness: FollowUpsHarness) -> None:
        followups = harness.followups
        items = [run() for _ in range(3)]
        for item in items:
            await harness.record(item)
        taken = [await followups.claim(1, lease_seconds=LONG) for _ in items]
        assert [[job.run_id for job in jobs] for jobs in taken] == [[i.run_id] for i in items]
        assert await followups.claim(1, lease_seconds=LONG) == []

    async def test_a_users_work_is_handed_out_in_order_one_item_at_a_time(
        self, harness: FollowUpsHarness
    ) -> None:
        """Different users' work is handed out together; a user's next item waits until the
        earlier one is done — leased, announced or not."""
        followups = harness.followups
        owner = user()
        first, second = run(owner=owner), run(owner=owner)
        other = run()
        for item in (first, second, other):
            await harness.record(item)
        jobs = await followups.claim(10, lease_seconds=LONG)
        assert [job.run_id for job in jobs] == [first.run_id, other.run_id]
        assert await followups.claim(10, lease_seconds=LONG) == []
        assert await followups.begin_write(jobs[0], lease_seconds=LONG)
        assert await followups.claim(10, lease_seconds=LONG) == [], "the first is being written"
        await followups.done(jobs[0])
        [nxt] = await followups.claim(10, lease_seconds=LONG)
        assert (nxt.run_id, nxt.attempts) == (second.run_id, 1)

    async def test_failed_work_deleted_meanwhile_is_neither_retried_nor_given_up(
        self, harness: FollowUpsHarness
    ) -> None:
        """An attempt that fails after its thread was deleted (or its user erased) finds
        nothing to reschedule: ``retry`` and ``give_up`` say so, and nothing comes back."""
        followups = harness.followups
        item = run()
        await harness.record(item)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.cancel_thread(item.thread_key, wait_seconds=SHORT) == 1
        assert not await followups.retry(job, after_seconds=0, error="TimeoutError")
        assert not await followups.give_up(job, error="TimeoutError")
        assert await followups.claim(10, lease_seconds=LONG) == []
        assert not await followups.pending_for(item.tenant_id, item.user_id)

    async def test_kinds_of_a_users_work_do_not_wait_for_each_other(
        self, harness: FollowUpsHarness
    ) -> None:
        """Order holds per user *and kind*: a round's summary work is handed out beside its
        memory work, and the next round's of each kind waits for the earlier one of its own
        kind only (a fold ahead is not held up behind a slow extraction)."""
        followups = harness.followups
        owner = user()
        first, second = run(owner=owner), run(owner=owner)
        await harness.record(first, (MEMORY, SUMMARY))
        await harness.record(second, (MEMORY, SUMMARY))
        jobs = await followups.claim(10, lease_seconds=LONG)
        assert sorted((job.run_id, job.kind) for job in jobs) == sorted(
            [(first.run_id, MEMORY), (first.run_id, SUMMARY)]
        )
        memory = next(job for job in jobs if job.kind == MEMORY)
        summary = next(job for job in jobs if job.kind == SUMMARY)
        await followups.done(summary)  # the memory work is still leased
        [nxt] = await followups.claim(10, lease_seconds=LONG)
        assert (nxt.run_id, nxt.kind) == (second.run_id, SUMMARY)
        await followups.done(memory)
        [last] = await followups.claim(10, lease_seconds=LONG)
        assert (last.run_id, last.kind) == (second.run_id, MEMORY)

    async def test_a_given_up_item_lets_its_users_next_one_go(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        owner = user()
        first, second = run(owner=owner), run(owner=owner)
        await harness.record(first)
        await harness.record(second)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert job.run_id == first.run_id
        assert await followups.give_up(job, error="ValueError")
        [nxt] = await followups.claim(10, lease_seconds=LONG)
        assert nxt.run_id == second.run_id

    async def test_a_retried_item_still_holds_its_users_later_work_back(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        owner = user()
        first, second = run(owner=owner), run(owner=owner)
        await harness.record(first)
        await harness.record(second)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.retry(job, after_seconds=LONG, error="TimeoutError")
        assert await followups.claim(10, lease_seconds=LONG) == []
        assert await followups.pending_for(first.tenant_id, owner)
        assert await pending(followups) == 2

    async def test_concurrent_claims_never_hand_out_an_item_twice(
        self, harness: FollowUpsHarness
    ) -> None:
        """Six workers at once, each taking up to three items at a time (replicas polling
        together): every item is handed out exactly once, each user's in order."""
        followups = harness.followups
        owners = [user() for _ in range(8)]
        recorded: dict[str, list[str]] = {owner: [] for owner in owners}
        for _ in range(2):
            for owner in owners:
                item = run(owner=owner)
                recorded[owner].append(item.run_id)
                await harness.record(item)
        handed: list[FollowUp] = []
        deadline = time.monotonic() + DEADLINE

        async def worker() -> None:
            while len(handed) < 16:
                assert time.monotonic() < deadline, "the work was not all handed out"
                jobs = await followups.claim(3, lease_seconds=LONG)
                handed.extend(jobs)
                for job in jobs:
                    await followups.done(job)
                if not jobs:
                    await asyncio.sleep(POLL)

        await asyncio.gather(*(worker() for _ in range(6)))
        assert len(handed) == 16
        assert len({job.id for job in handed}) == 16, "an item was handed out twice"
        assert all(job.attempts == 1 for job in handed)
        for owner in owners:
            assert [job.run_id for job in handed if job.user_id == owner] == recorded[owner]
        assert await pending(followups) == 0

    # -- retries --------------------------------------------------------------------------------

    async def test_a_retry_is_due_only_after_its_delay(self, harness: FollowUpsHarness) -> None:
        followups = harness.followups
        soon, late = run(), run()
        await harness.record(soon)
        await harness.record(late)
        jobs = {job.run_id: job for job in await followups.claim(10, lease_seconds=LONG)}
        retried = time.monotonic()
        assert await followups.retry(jobs[soon.run_id], after_seconds=SHORT, error="TimeoutError")
        assert await followups.retry(
            jobs[late.run_id], after_seconds=LONG, error="APIStatusError503"
        )
        [again] = await claim_until(followups)
        assert time.monotonic() - retried >= SHORT * 0.9, "taken before its delay"
        assert (again.run_id, again.attempts) == (soon.run_id, 2)
        assert await followups.claim(10, lease_seconds=LONG) == [], "the other is not due yet"
        assert await followups.pending_for(late.tenant_id, late.user_id)
        assert await pending(followups) == 2

    async def test_given_up_work_is_counted_and_never_taken_again(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        item = run()
        await harness.record(item)
        [job] = await followups.claim(10, lease_seconds=SHORT)
        assert await followups.give_up(job, error="ValueError")
        counts = await followups.counts()
        assert counts.given_up == {MEMORY: 1}
        assert counts.pending.get(MEMORY, 0) == 0
        assert counts.oldest is None
        assert not await followups.pending_for(item.tenant_id, item.user_id)
        await asyncio.sleep(SHORT * 3)  # the claim's lease would have run out
        assert await followups.claim(10, lease_seconds=LONG) == []
        assert not await followups.begin_write(job, lease_seconds=LONG)
        assert await given_up(followups) == 1

    async def test_released_work_is_due_at_once_its_attempt_not_counted(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        await harness.record(run())
        [job] = await followups.claim(10, lease_seconds=LONG)
        await followups.release(job)
        [again] = await followups.claim(10, lease_seconds=LONG)
        assert (again.id, again.attempts) == (job.id, 1)
        assert again.lease != job.lease
        await followups.done(job)  # the hand-back ended the first lease
        assert await pending(followups) == 1
        await followups.done(again)
        assert await pending(followups) == 0

    # -- fences ---------------------------------------------------------------------------------

    async def test_deleting_a_thread_refuses_its_writes_not_yet_announced(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        owner = user()
        doomed = [run(owner=owner, thread="doomed") for _ in range(2)]
        kept = run(owner=owner, thread="kept")
        for item in (*doomed, kept):
            await harness.record(item)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert job.run_id == doomed[0].run_id
        assert await followups.cancel_thread(doomed[0].thread_key, wait_seconds=LONG) == 2
        assert not await followups.begin_write(job, lease_seconds=LONG)
        assert await pending(followups) == 1
        [nxt] = await followups.claim(10, lease_seconds=LONG)
        assert nxt.run_id == kept.run_id, "the user's work left goes on"

    async def test_erasing_a_user_refuses_their_writes_not_yet_announced(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        owner = user()
        items = [run(owner=owner) for _ in range(2)]
        for item in items:
            await harness.record(item)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.cancel_user("acme", owner, wait_seconds=LONG) == 2
        assert not await followups.begin_write(job, lease_seconds=LONG)
        assert not await followups.pending_for("acme", owner)
        assert await pending(followups) == 0
        assert await followups.claim(10, lease_seconds=LONG) == []

    @pytest.mark.parametrize("scope", ["thread", "user"])
    async def test_deletion_waits_for_an_announced_write_until_it_is_done(
        self, harness: FollowUpsHarness, scope: str
    ) -> None:
        followups = harness.followups
        owner = user()
        writing, waiting = run(owner=owner, thread="t"), run(owner=owner, thread="t")
        await harness.record(writing)
        await harness.record(waiting)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.begin_write(job, lease_seconds=LONG)
        if scope == "thread":
            cancel = followups.cancel_thread(writing.thread_key, wait_seconds=LONG)
        else:
            cancel = followups.cancel_user("acme", owner, wait_seconds=LONG)
        task = asyncio.create_task(cancel)
        try:
            deadline = time.monotonic() + DEADLINE
            while await pending(followups) != 1:  # the item not announced is deleted first
                assert time.monotonic() < deadline, "the deletion never started"
                await asyncio.sleep(POLL)
            await asyncio.sleep(SHORT)
            assert not task.done(), "the deletion must wait for the announced write"
            await followups.done(job)
            assert await asyncio.wait_for(task, DEADLINE) == 1
        finally:
            task.cancel()
        assert await pending(followups) == 0
        assert not await followups.pending_for("acme", owner)

    async def test_deletion_stops_waiting_after_wait_seconds(
        self, harness: FollowUpsHarness
    ) -> None:
        """A write that is never done (its worker hung) holds a deletion for ``wait_seconds``
        at most: then its work is deleted all the same."""
        followups = harness.followups
        item = run()
        await harness.record(item)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.begin_write(job, lease_seconds=LONG)
        started = time.monotonic()
        deleted = await asyncio.wait_for(
            followups.cancel_user("acme", item.user_id, wait_seconds=SHORT), DEADLINE
        )
        assert time.monotonic() - started >= SHORT * 0.9, "it did not wait"
        assert deleted == 1
        assert not await followups.pending_for("acme", item.user_id)
        await followups.done(job)
        assert await pending(followups) == 0
        assert await followups.claim(10, lease_seconds=LONG) == []

    async def test_a_write_whose_lease_ran_out_is_not_waited_for(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        item = run()
        await harness.record(item)
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.begin_write(job, lease_seconds=SHORT)
        await asyncio.sleep(SHORT * 3)
        deleted = await asyncio.wait_for(
            followups.cancel_thread(item.thread_key, wait_seconds=10 * DEADLINE), DEADLINE
        )
        assert deleted == 1
        assert await pending(followups) == 0

    async def test_erasing_a_user_deletes_only_their_work(self, harness: FollowUpsHarness) -> None:
        """Ids compare exactly: not as patterns (``%``, ``_``, ``\\``), not ignoring case, not
        as prefixes; the same user id in another tenant is another user."""
        followups = harness.followups
        tenant, owner = "t%_\\'1", 'u%_\\"x'
        erased = [run(tenant, owner), run(tenant, owner, thread="t2")]
        neighbours = [
            (tenant, 'u%_\\"xy'),
            (tenant, 'U%_\\"X'),
            (tenant, 'uA_\\"x'),
            (tenant, 'u%a\\"x'),
            (tenant, 'u%_"x'),
            ("t%_\\'2", owner),
            ("tX_\\'1", owner),
            ("T%_\\'1", owner),
            (tenant, "%"),
        ]
        kept = [run(t, u) for t, u in neighbours]
        for item in (*erased, *kept):
            await harness.record(item)
        assert await followups.cancel_user(tenant, owner, wait_seconds=LONG) == 2
        assert not await followups.pending_for(tenant, owner)
        for t, u in neighbours:
            assert await followups.pending_for(t, u), (t, u)
        assert await pending(followups) == len(kept)
        assert await followups.cancel_user(tenant, owner, wait_seconds=LONG) == 0
        assert await followups.cancel_user(tenant, "%", wait_seconds=LONG) == 1
        assert await pending(followups) == len(kept) - 1

    async def test_deleting_a_thread_deletes_only_its_work(self, harness: FollowUpsHarness) -> None:
        followups = harness.followups
        owner = user()
        doomed = run(owner=owner, thread="t_%\\'1")
        kept = [
            run(owner=owner, thread=thread)
            for thread in ("tx%\\'1", "t_%\\'10", "T_%\\'1", "t_%\\'")
        ]
        for item in (doomed, *kept):
            await harness.record(item)
        assert await followups.cancel_thread(doomed.thread_key, wait_seconds=LONG) == 1
        assert await pending(followups) == len(kept)
        jobs = await followups.claim(10, lease_seconds=LONG)
        assert [job.run_id for job in jobs] == [kept[0].run_id], "its user's next in order"

    # -- what is pending ------------------------------------------------------------------------

    async def test_pending_for_sees_only_the_users_own_work(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        owner = user()
        item = run("acme", owner)
        await harness.record(item)
        assert await followups.pending_for("acme", owner)
        assert not await followups.pending_for("globex", owner)
        assert not await followups.pending_for("acme", owner.upper())
        assert not await followups.pending_for("acme", owner[:-1])
        assert not await followups.pending_for("acme", user())
        [job] = await followups.claim(10, lease_seconds=LONG)
        assert await followups.pending_for("acme", owner), "leased work is still to do"
        assert await followups.begin_write(job, lease_seconds=LONG)
        assert await followups.pending_for("acme", owner), "so is work being written"
        await followups.done(job)
        assert not await followups.pending_for("acme", owner)

    async def test_counts_report_pending_given_up_and_the_oldest(
        self, harness: FollowUpsHarness
    ) -> None:
        followups = harness.followups
        empty = await followups.counts()
        assert empty.pending.get(MEMORY, 0) == 0
        assert empty.given_up.get(MEMORY, 0) == 0
        assert empty.oldest is None
        items = [run() for _ in range(3)]
        for item in items:
            await harness.record(item)
        jobs = await followups.claim(10, lease_seconds=LONG)
        assert [job.run_id for job in jobs] == [item.run_id for item in items]
        counts = await followups.counts()
        assert counts.pending == {MEMORY: 3}
        assert counts.given_up.get(MEMORY, 0) == 0
        assert counts.oldest == jobs[0].enqueued_at
        await followups.done(jobs[0])
        assert await followups.give_up(jobs[1], error="ValueError")
        counts = await followups.counts()
        assert counts.pending == {MEMORY: 1}
        assert counts.given_up == {MEMORY: 1}
        assert counts.oldest == jobs[2].enqueued_at
        assert await followups.retry(jobs[2], after_seconds=LONG, error="TimeoutError")
        assert (await followups.counts()).pending == {MEMORY: 1}, "waiting to retry is pending"
        await followups.cancel_thread(items[1].thread_key, wait_seconds=LONG)
        assert (await followups.counts()).given_up.get(MEMORY, 0) == 0, "deleted with its thread"
