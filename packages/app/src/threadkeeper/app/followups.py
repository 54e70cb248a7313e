"""The follow-up workers every ``serve`` process runs (``domain.followups``).

A worker takes due work with a lease (``FollowUps.claim``), up to ``concurrency`` items at a
time, and for each: prepares it under its own deadline (the memory extraction or the summary
fold: a model call with its own timeout and retries, apart from the chat call's), announces
its write (``begin_write``: refused when a deletion or erasure came first), writes it under a
shorter deadline, and marks it done. A failed attempt is retried after ``backoff(attempts)``;
the ``max_attempts``-th failure gives the work up (kept without content, counted, logged by
type and status only). Stopping finishes what is in flight for up to a grace period and hands
the rest back (``release``): another replica, or this one restarted, takes it.

A process wakes its worker when one of its runs recorded work (``wake``): it then claims
without a probe first (``claim(probe=False)``: the work is known to be there). Work recorded
elsewhere, and work whose lease ran out (its replica was killed), is found by polling every
``poll_seconds`` (a cheap read first: an idle poll locks nothing). A finished item wakes the
loop only when more work may be waiting — the last claim filled every free slot, or work was
recorded while items were in flight (it may wait behind one of them: order per user and kind) —
so a process that keeps up with its users sends no claim per item done.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from opentelemetry.instrumentation.utils import suppress_instrumentation

from threadkeeper.app.metrics import (
    FOLLOWUPS,
    FOLLOWUPS_GIVEN_UP,
    FOLLOWUPS_OLDEST_AGE,
    FOLLOWUPS_PENDING,
    MEMORY_STALENESS,
)
from threadkeeper.app.model_calls import provider_status
from threadkeeper.app.telemetry import tracer
from threadkeeper.domain.followups import KINDS, MEMORY, FollowUp, FollowUps, backoff

log = logging.getLogger("threadkeeper.app.followups")

Write = Callable[[], Awaitable[None]]


class Job(Protocol):
    """One kind of follow-up work."""

    async def prepare(self, job: FollowUp, *, last: bool) -> Write | None:
        """The write to make (``None``: nothing to do). ``last``: the final attempt."""
        ...


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    """Items in flight per process."""
    lease_seconds: float = 90.0
    """A worker's hold on an item; another takes it once this ran out (its replica died)."""
    prepare_seconds: float = 45.0
    """Deadline of an item's preparation (the extraction's model call and its reads)."""
    write_seconds: float = 10.0
    """Deadline of an item's write, well inside the lease (a deletion waits at most that)."""
    max_attempts: int = 8
    poll_seconds: float = 0.5
    sample_seconds: float = 5.0
    """How often the pending counts are sampled for the metrics."""


class FollowUpWorker:
    """Takes and does follow-up work (see the module docstring)."""

    def __init__(
        self,
        followups: FollowUps,
        jobs: dict[str, Job],
        settings: WorkerSettings | None = None,
        profile: str = "",
    ) -> None:
        self.followups = followups
        self.jobs = jobs
        self.settings = settings or WorkerSettings()
        self.profile = profile
        self._wake = asyncio.Event()
        self._recorded = False
        """Work was recorded here since the last claim."""
        self._more = False
        """More work may be due than the last claim took: a finished item looks again."""
        self._inflight: dict[asyncio.Task[None], FollowUp] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._sampled = 0.0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._loop_task is None:
            self._stopping = False
            self._loop_task = asyncio.create_task(
                self._loop(), name="threadkeeper-followups", context=contextvars.Context()
            )

    def wake(self) -> None:
        """Work was recorded here: look now rather than at the next poll."""
        self._recorded = True
        self._wake.set()

    async def stop(self, grace: float) -> None:
        """Stop taking work; finish what is in flight for up to ``grace`` seconds, then hand
        the rest back untried (another replica, or this one restarted, takes it)."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
            self._loop_task = None
        pending = set(self._inflight)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def run_due(self) -> int:
        """Do every item due now, here, until none is left (the commands and tests that run
        no worker loop); items done."""
        done = 0
        while jobs := await self.followups.claim(
            self.settings.concurrency, lease_seconds=self.settings.lease_seconds
        ):
            await asyncio.gather(*(self._do(job) for job in jobs))
            done += len(jobs)
        return done

    # -- the loop -------------------------------------------------------------------------------

    async def _loop(self) -> None:
        while not self._stopping:
            free = self.settings.concurrency - len(self._inflight)
            jobs: list[FollowUp] = []
            recorded, self._recorded = self._recorded, False
            self._wake.clear()
            if free > 0:
                try:
                    with suppress_instrumentation():
                        jobs = await self.followups.claim(
                            free, lease_seconds=self.settings.lease_seconds, probe=not recorded
                        )
                    # more may be due than was taken: every free slot filled, or work
                    # recorded while items were in flight, which may be held back behind one
                    # of them (order per user and kind) until it is done
                    self._more = len(jobs) == free or (recorded and bool(self._inflight))
                except Exception as exc:
                    self._more = True  # look again when a slot frees, not only at the poll
                    log.warning("follow-up work could not be taken: %s", type(exc).__name__)
            else:
                self._more = self._more or recorded
            for job in jobs:
                task = asyncio.create_task(self._do(job), context=contextvars.Context())
                self._inflight[task] = job
                task.add_done_callback(self._finished)
            await self._sample()
            if jobs and len(jobs) == free:
                continue  # more may be due: take them as soon as a slot is free
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_seconds):
                    await self._wake.wait()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.pop(task, None)
        if self._more:  # a slot is free, and work may be waiting for one
            self._wake.set()

    async def _sample(self) -> None:
        now = time.monotonic()
        if now - self._sampled < self.settings.sample_seconds:
            return
        self._sampled = now
        try:
            with suppress_instrumentation():
                counts = await self.followups.counts()
        except Exception:
            return
        for kind in KINDS:
            FOLLOWUPS_PENDING.set(counts.pending.get(kind, 0), {"kind": kind})
            FOLLOWUPS_GIVEN_UP.set(counts.given_up.get(kind, 0), {"kind": kind})
        age = 0.0
        if counts.oldest is not None:
            age = max(0.0, (datetime.now(UTC) - counts.oldest).total_seconds())
        FOLLOWUPS_OLDEST_AGE.set(age)

    # -- one item -------------------------------------------------------------------------------

    def _count(self, job: FollowUp, outcome: str) -> None:
        FOLLOWUPS.add(1, {"kind": job.kind, "outcome": outcome, "profile": self.profile})

    async def _do(self, job: FollowUp) -> None:
        settings = self.settings
        handler = self.jobs.get(job.kind)
        try:
            if handler is None:
                raise LookupError(f"no worker for follow-up work of kind {job.kind!r}")
            with tracer().start_as_current_span(
                f"threadkeeper.followup {job.kind}",
                record_exception=False,  # never a message: its failure is named by type
                attributes={
                    "threadkeeper.followup.kind": job.kind,
                    "threadkeeper.followup.attempt": job.attempts,
                    "threadkeeper.profile": self.profile,
                },
            ):
                async with asyncio.timeout(settings.prepare_seconds):
                    write = await handler.prepare(job, last=job.attempts >= settings.max_attempts)
                if write is None:
                    await self.followups.done(job)
                    self._count(job, "dropped")
                    return
                if not await self.followups.begin_write(job, lease_seconds=settings.lease_seconds):
                    self._count(job, "dropped")  # cancelled: its thread or user was deleted
                    return
                async with asyncio.timeout(settings.write_seconds):
                    await write()
                await self.followups.done(job)
        except asyncio.CancelledError:
            if self._stopping:
                await self._release(job)
            raise
        except Exception as exc:
            await self._failed(job, exc)
            return
        self._count(job, "done")
        if job.kind == MEMORY:
            MEMORY_STALENESS.record(
                max(0.0, (datetime.now(UTC) - job.enqueued_at).total_seconds()),
                {"profile": self.profile},
            )

    async def _release(self, job: FollowUp) -> None:
        try:
            await asyncio.shield(self.followups.release(job))
            self._count(job, "released")
        except Exception:  # its lease runs out instead
            log.debug("releasing follow-up %d failed", job.id, exc_info=True)

    def _gone(self, job: FollowUp) -> None:
        """The failed work is no longer this worker's: deleted with its thread or user, or
        taken by another worker after this one's lease ran out — nothing to reschedule."""
        self._count(job, "dropped")
        log.info(
            "follow-up %s of run %s failed and is no longer this worker's (its thread or user "
            "was deleted, or its lease ran out): not retried here",
            job.kind,
            job.run_id,
        )

    async def _failed(self, job: FollowUp, exc: BaseException) -> None:
        """Retry later, or give up after the last attempt: logged by the failure's type and
        the provider's HTTP status only (never content: the error of a model call can quote
        the request)."""
        error = f"{type(exc).__name__}{provider_status(exc)}"
        try:
            if job.attempts >= self.settings.max_attempts:
                if not await self.followups.give_up(job, error=error):
                    self._gone(job)
                    return
                self._count(job, "given_up")
                log.error(
                    "follow-up %s of run %s given up after %d attempts: %s",
                    job.kind,
                    job.run_id,
                    job.attempts,
                    error,
                )
                return
            delay = backoff(job.attempts)
            if not await self.followups.retry(job, after_seconds=delay, error=error):
                self._gone(job)
                return
            self._count(job, "retried")
            log.warning(
                "follow-up %s of run %s failed (attempt %d of %d): %s; retrying in %g s",
                job.kind,
                job.run_id,
                job.attempts,
                self.settings.max_attempts,
                error,
                delay,
            )
        except Exception:  # the lease runs out and the work is taken again
            log.warning("follow-up %d could not be rescheduled", job.id, exc_info=True)
