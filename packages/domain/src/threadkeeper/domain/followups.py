"""Follow-up work: what a stored round leaves to do after its run is acknowledged.

A run is acknowledged as soon as its round is stored. What the round teaches — the user's
memory, extracted (by a model call when the model is real) and written — is *follow-up work*:
a row recorded in the same transaction as the round (a stored round always has its follow-ups,
a refused round none), done afterwards by the workers every ``serve`` process runs.

The rules, which every ``FollowUps`` keeps:

- **Leases**: a worker takes work with a lease (``claim``); work whose lease ran out — its
  worker was killed — is taken again by any worker (at least once: a job is idempotent).
- **Order**: per user and kind, work is taken in the order it was recorded; a user's next item
  of a kind waits until the earlier one of that kind is done or given up (``claim`` never hands
  out an item with an earlier one of its user and kind still to do). Kinds do not wait for each
  other: a fold ahead is not held up behind a slow memory extraction.
- **Fences**: the write a job makes is announced first (``begin_write``: only while the job is
  still there and leased to its worker). Deleting a thread or erasing a user deletes the
  work still to do and *waits* for the writes announced (``cancel_thread``, ``cancel_user``):
  after the receipt nothing of that work is written.
- **Retries**: a failed attempt is retried after ``backoff(attempts)``; after
  ``max_attempts`` the work is given up — kept as a row without content, counted and logged.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import msgspec

MEMORY = "memory"
"""The kind of follow-up work that extracts and writes the user's memory from a round."""
SUMMARY = "summary"
"""The kind that folds a thread's older turns into its rolling summary ahead of its next run
(kept apart from the checkpoints: ``domain.summary.AheadSummary``)."""
KINDS = (MEMORY, SUMMARY)
READY, WRITING, GIVEN_UP = "ready", "writing", "given_up"
"""A row's states: due (or leased to a worker), its write announced, given up."""
TO_DO = (READY, WRITING)

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


def backoff(attempts: int, *, base: float = BACKOFF_BASE_SECONDS) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: 1, 2, 4, … capped at
    ``BACKOFF_MAX_SECONDS``."""
    if attempts < 1:
        return 0.0
    return float(min(BACKOFF_MAX_SECONDS, base * 2 ** min(attempts - 1, 30)))


class FollowUp(msgspec.Struct, frozen=True):
    """One item of follow-up work as a worker holds it."""

    id: int
    kind: str
    thread_key: str
    tenant_id: str
    user_id: str
    run_id: str
    attempts: int
    """Attempts made, this one included."""
    lease: str
    """The worker's lease token: every later step of this attempt names it."""
    enqueued_at: datetime


class FollowUpCounts(msgspec.Struct, frozen=True):
    """What is waiting, per kind (operators: metrics and ``doctor``)."""

    pending: dict[str, int] = msgspec.field(default_factory=dict)
    """Work still to do (waiting, leased or writing), per kind."""
    given_up: dict[str, int] = msgspec.field(default_factory=dict)
    oldest: datetime | None = None
    """When the oldest work still to do was recorded."""


class FollowUps(ABC):
    """The follow-up work of stored rounds (see the module docstring). Work is *recorded* by
    the profile's round store, inside the round's transaction; this port is what workers,
    deletions and operators do with it."""

    @abstractmethod
    async def claim(
        self, limit: int, *, lease_seconds: float, probe: bool = True
    ) -> list[FollowUp]:
        """Take up to ``limit`` items due now — oldest first, none with an earlier item of
        its user and kind still to do, none leased to a worker whose lease still runs — each
        leased for ``lease_seconds`` and its attempts counted. ``probe``: look with a plain
        read before taking any lock (an idle poll); ``False`` when work is known to have been
        recorded. Either way the result is the same."""

    @abstractmethod
    async def begin_write(self, job: FollowUp, *, lease_seconds: float) -> bool:
        """Announce the job's write (its lease renewed for ``lease_seconds``): ``False`` when
        the job is gone (its thread deleted, its user erased) or leased to another worker —
        then nothing may be written."""

    @abstractmethod
    async def done(self, job: FollowUp) -> None:
        """The job is done: its row is deleted (if the lease is still the job's)."""

    @abstractmethod
    async def retry(self, job: FollowUp, *, after_seconds: float, error: str) -> bool:
        """The attempt failed: due again after ``after_seconds``; ``error`` names the failure
        (a type or status, never content). ``False``: the work is gone (its thread deleted, its
        user erased) or leased to another worker — nothing was rescheduled."""

    @abstractmethod
    async def give_up(self, job: FollowUp, *, error: str) -> bool:
        """The work keeps failing: kept as given up (never taken again). ``False`` as for
        ``retry``."""

    @abstractmethod
    async def release(self, job: FollowUp) -> None:
        """Hand the job back untried (shutdown): due again at once, this attempt not
        counted."""

    @abstractmethod
    async def cancel_thread(self, thread_key: str, *, wait_seconds: float) -> int:
        """Delete the thread's work, waiting up to ``wait_seconds`` for writes already
        announced to end; items deleted."""

    @abstractmethod
    async def cancel_user(self, tenant_id: str, user_id: str, *, wait_seconds: float) -> int:
        """Delete the user's work, as ``cancel_thread``."""

    @abstractmethod
    async def pending_for(self, tenant_id: str, user_id: str) -> bool:
        """Whether any work of the user is still to do."""

    @abstractmethod
    async def counts(self) -> FollowUpCounts: ...


class _Row(msgspec.Struct):
    id: int
    kind: str
    thread_key: str
    tenant_id: str
    user_id: str
    run_id: str
    enqueued_at: datetime
    state: str = "ready"
    attempts: int = 0
    due_at: float = 0.0
    lease: str | None = None
    lease_until: float | None = None
    error: str | None = None


class InMemoryFollowUps(FollowUps):
    """``FollowUps`` in a dict, on the event loop's clock: the unit-test fake and the
    in-memory backend's (one process; every change is one synchronous step)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._rows: dict[int, _Row] = {}
        self._next = 1
        self.clock = clock

    def record(
        self, kinds: Sequence[str], thread_key: str, tenant_id: str, user_id: str, run_id: str
    ) -> None:
        """What a round store does in the round's transaction."""
        for kind in kinds:
            row = _Row(self._next, kind, thread_key, tenant_id, user_id, run_id, datetime.now(UTC))
            self._rows[row.id] = row
            self._next += 1

    def kinds_to_do(self) -> list[str]:
        """The kind of every item still to do, oldest first (tests)."""
        return [row.kind for row in self._rows.values() if row.state in TO_DO]

    def _job(self, row: _Row) -> FollowUp:
        assert row.lease is not None
        return FollowUp(
            row.id,
            row.kind,
            row.thread_key,
            row.tenant_id,
            row.user_id,
            row.run_id,
            row.attempts,
            row.lease,
            row.enqueued_at,
        )

    def _mine(self, job: FollowUp) -> _Row | None:
        row = self._rows.get(job.id)
        return row if row is not None and row.lease == job.lease else None

    async def claim(
        self, limit: int, *, lease_seconds: float, probe: bool = True
    ) -> list[FollowUp]:
        now = self.clock()
        to_do = {(r.tenant_id, r.user_id, r.kind) for r in self._rows.values() if r.state in TO_DO}
        first: dict[tuple[str, str, str], int] = {}
        for row in sorted(self._rows.values(), key=lambda r: r.id):
            if row.state in TO_DO:
                first.setdefault((row.tenant_id, row.user_id, row.kind), row.id)
        taken: list[FollowUp] = []
        lease = uuid.uuid4().hex
        for row in sorted(self._rows.values(), key=lambda r: r.id):
            user = (row.tenant_id, row.user_id, row.kind)
            if len(taken) >= limit:
                break
            if row.state not in TO_DO or row.due_at > now or user not in to_do:
                continue
            if first[user] != row.id:
                continue
            if row.lease_until is not None and row.lease_until >= now:
                continue  # (an announced write whose lease ran out is taken again)
            row.state, row.lease, row.lease_until = READY, lease, now + lease_seconds
            row.attempts += 1
            taken.append(self._job(row))
        return taken

    async def begin_write(self, job: FollowUp, *, lease_seconds: float) -> bool:
        row = self._mine(job)
        if row is None or row.state != READY:
            return False
        row.state, row.lease_until = WRITING, self.clock() + lease_seconds
        return True

    async def done(self, job: FollowUp) -> None:
        if self._mine(job) is not None:
            del self._rows[job.id]

    async def retry(self, job: FollowUp, *, after_seconds: float, error: str) -> bool:
        row = self._mine(job)
        if row is None:
            return False
        row.state, row.lease, row.lease_until = READY, None, None
        row.due_at, row.error = self.clock() + after_seconds, error[:120]
        return True

    async def give_up(self, job: FollowUp, *, error: str) -> bool:
        row = self._mine(job)
        if row is None:
            return False
        row.state, row.lease, row.lease_until, row.error = GIVEN_UP, None, None, error[:120]
        return True

    async def release(self, job: FollowUp) -> None:
        row = self._mine(job)
        if row is not None and row.state == READY:
            row.lease, row.lease_until = None, None
            row.attempts -= 1

    async def _cancel(self, match: Callable[[_Row], bool], wait_seconds: float) -> int:
        deadline = self.clock() + wait_seconds
        deleted = 0
        while True:
            now = self.clock()
            last = now >= deadline
            for row in [r for r in self._rows.values() if match(r)]:
                writing = row.state == WRITING and (row.lease_until or 0) >= now
                if last or not writing:
                    del self._rows[row.id]
                    deleted += 1
            if last or not any(match(r) for r in self._rows.values()):
                return deleted
            await asyncio.sleep(0.01)

    async def cancel_thread(self, thread_key: str, *, wait_seconds: float) -> int:
        return await self._cancel(lambda r: r.thread_key == thread_key, wait_seconds)

    async def cancel_user(self, tenant_id: str, user_id: str, *, wait_seconds: float) -> int:
        return await self._cancel(
            lambda r: (r.tenant_id, r.user_id) == (tenant_id, user_id), wait_seconds
        )

    async def pending_for(self, tenant_id: str, user_id: str) -> bool:
        return any(
            (r.tenant_id, r.user_id) == (tenant_id, user_id) and r.state in TO_DO
            for r in self._rows.values()
        )

    async def counts(self) -> FollowUpCounts:
        pending: dict[str, int] = {}
        given_up: dict[str, int] = {}
        oldest: datetime | None = None
        for row in self._rows.values():
            if row.state == GIVEN_UP:
                given_up[row.kind] = given_up.get(row.kind, 0) + 1
                continue
            pending[row.kind] = pending.get(row.kind, 0) + 1
            if oldest is None or row.enqueued_at < oldest:
                oldest = row.enqueued_at
        return FollowUpCounts(pending, given_up, oldest)

    def rows_of(self, tenant_id: str, user_id: str, thread_keys: Sequence[str]) -> int:
        keys = set(thread_keys)
        return sum(
            1
            for r in self._rows.values()
            if (r.tenant_id, r.user_id) == (tenant_id, user_id) or r.thread_key in keys
        )
