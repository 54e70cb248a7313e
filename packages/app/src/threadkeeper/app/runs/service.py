"""The run service: ``ThreadService`` over one opened backend and the compiled agent.

Starting a run is here: validation and idempotency, then the run's own task
(``RunExecutor.own``), which owns the run from its claim to its acknowledgement — it holds
the thread's lock (``async with``), makes the checks that need the thread held
(``_admit``: a retry of a run that completed meanwhile, a duplicate message), runs and stores
the round, lets the thread go, then answers. ``start_run`` waits for that task's admission
(``Started.admission``) and returns the run's handle, or raises its refusal; a caller gone
meanwhile takes the run with it (the task is cancelled, and leaves nothing held). Executing a
run is ``execute``, its outcome ``outcome``, the memory it teaches ``remember`` (follow-up
work, woken by each stored round); reads and deletions are the backend's stored threads
(``app.stored``). Shutdown drains the runs in flight.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from langchain_core.messages import HumanMessage

from threadkeeper.app.followups import FollowUpWorker, Job, WorkerSettings
from threadkeeper.app.memory import MemoryExtractor, RuleExtractor
from threadkeeper.app.metrics import count_run
from threadkeeper.app.runs.execute import RunExecutor, Started, mode_of, run_config
from threadkeeper.app.runs.fold import SummaryJob
from threadkeeper.app.runs.handles import CompletedRun, LiveRun
from threadkeeper.app.runs.outcome import now
from threadkeeper.app.runs.remember import MemoryJob
from threadkeeper.app.service import (
    Caller,
    DuplicateMessage,
    MemoryView,
    RunRequest,
    Unavailable,
    problem_spec,
    stored_result,
)
from threadkeeper.app.stored import StoredThreads
from threadkeeper.app.telemetry import ConversationIds
from threadkeeper.domain.errors import DomainError, MessageTooLarge
from threadkeeper.domain.followups import MEMORY, SUMMARY
from threadkeeper.domain.memory import MemoryRules
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.runs import IdempotencyMismatch
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.threads import ThreadRef, ThreadScope
from threadkeeper.domain.tokens import REPLY_PRIMING, TokenCounter
from threadkeeper.domain.transcript import TranscriptPage

if TYPE_CHECKING:  # the composition root passes the backend in
    from threadkeeper.ports.storage import Backend

RUN_TIMEOUT_SECONDS = 120.0
SHUTDOWN_GRACE_SECONDS = 20.0
log = logging.getLogger("threadkeeper.app.runs")


class RunService:
    """``ThreadService`` over a backend and an agent compiled with ``backend.checkpointer``."""

    def __init__(
        self,
        *,
        agent: Any,
        backend: Backend,
        counter: TokenCounter,
        budget: int,
        scope: ThreadScope,
        rules: MemoryRules,
        prompt: str,
        extractor: MemoryExtractor | None = None,
        run_timeout: float = RUN_TIMEOUT_SECONDS,
        profile: str = "",
        trace_id_key: str | None = None,
        followups: WorkerSettings | None = None,
        summary_job: SummaryJob | None = None,
    ) -> None:
        self.agent = agent
        self.backend = backend
        self.counter = counter
        self.budget = budget
        self.scope = scope
        self.threads = StoredThreads(backend, scope)
        self.memory_job = MemoryJob(backend, extractor or RuleExtractor(), rules, profile)
        self.summary_job = summary_job
        """Folds older turns ahead of a thread's next run (``None``: no ``summarize`` hook)."""
        jobs: dict[str, Job] = {MEMORY: self.memory_job}
        if summary_job is not None:
            jobs[SUMMARY] = summary_job
        self.worker = FollowUpWorker(backend.followups, jobs, followups, profile)
        """Does the follow-up work of stored rounds (``start_followups``: ``serve`` does)."""
        self.profile = profile
        self.executor = RunExecutor(
            agent=agent,
            backend=backend,
            recorded=self.worker.wake,
            counter=counter,
            prompt=prompt,
            run_timeout=run_timeout,
            draining=lambda: self._draining,
            profile=profile,
            conversations=ConversationIds(trace_id_key),
            followups_of=self._followups_of,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        """Runs in flight (shutdown drains them)."""
        self._runs: dict[asyncio.Task[None], LiveRun] = {}
        self._draining = False

    def _followups_of(self, status: str, values: Mapping[str, Any], system: str) -> Sequence[str]:
        """An answered round teaches memory, and leaves a fold to make ahead of the thread's
        next run when that run would otherwise have to fold (``app.runs.fold``)."""
        if status != "answered":
            return ()
        if self.summary_job is not None and self.summary_job.wanted(values, system):
            return (MEMORY, SUMMARY)
        return (MEMORY,)

    @property
    def retention(self) -> Any:
        """The backend's retention (the sweeper deletes through it)."""
        return self.backend.retention

    # -- starting a run ---------------------------------------------------------------------

    async def start_run(
        self, caller: Caller, thread_id: str, request: RunRequest
    ) -> CompletedRun | LiveRun:
        """Admit a run (or answer a retry of a completed one); a refusal is counted
        (``threadkeeper.runs`` by the problem's slug) and raised."""
        try:
            return await self._start_run(caller, thread_id, request, time.perf_counter())
        except DomainError as exc:
            spec = problem_spec(exc)
            if spec is not None:
                count_run(self.profile, spec.slug, spec.status, mode_of(request))
            raise

    def count_refused(self, status: int, slug: str, *, deltas: bool) -> None:
        count_run(self.profile, slug, status, "sse" if deltas else "json")

    async def _start_run(
        self, caller: Caller, thread_id: str, request: RunRequest, admitted: float
    ) -> CompletedRun | LiveRun:
        if self._draining:
            raise Unavailable("the service is shutting down; retry on another replica")
        ref = self.threads.ref(caller, thread_id)
        content = request.message.content  # within the size rule (``RunMessage``)
        run_id = request.run_id or str(uuid.uuid4())
        if request.run_id is not None and (done := await self._completed(ref, request)):
            count_run(self.profile, "replayed", 200, mode_of(request))
            return done  # a retry of a completed run: its stored answer, no new run
        human = HumanMessage(
            content,
            id=request.message.id or str(uuid.uuid4()),
            response_metadata={"threadkeeper": {"at": now().isoformat(), "run_id": run_id}},
        )
        tokens = self.counter.count(human)
        if tokens + REPLY_PRIMING > self.budget:
            raise MessageTooLarge(tokens, self.budget)

        run = LiveRun(run_id)
        started = Started(
            run,
            self.backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id),
            functools.partial(self._admit, ref, caller, request),
            ref,
            caller,
            human,
            request.message.id,
            request.deltas,
            admitted,
        )
        task = asyncio.create_task(self.executor.own(started))  # it holds the thread
        run.task = task
        self._tasks.add(task)
        self._runs[task] = run
        task.add_done_callback(self._run_done)
        admission = started.admission
        try:
            done = await admission  # ThreadBusy, a duplicate…: raised; nothing was stored
        except asyncio.CancelledError:
            if admission.done() and not admission.cancelled():
                admission.exception()  # answered as its caller left: nobody will ask
            if run.abandon():  # its caller is gone: so is the run, and what it held
                await asyncio.wait({task})
            raise
        if done is None:
            return run
        count_run(self.profile, "replayed", 200, mode_of(request))
        return done  # it completed while this retry waited for the thread

    async def _admit(
        self, ref: ThreadRef, caller: Caller, request: RunRequest
    ) -> CompletedRun | None:
        """The checks made once the run's task holds the thread (``Started.admit``): a retry
        of a run that completed while it waited for the thread is answered that run's stored
        outcome; a message already in the thread is refused (``DuplicateMessage``)."""
        if request.run_id is not None and (done := await self._completed(ref, request)):
            return done
        if request.message.id is not None:
            await self._refuse_duplicate(ref, caller, request.message.id)
        return None

    def _run_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._runs.pop(task, None)

    async def _completed(self, ref: ThreadRef, request: RunRequest) -> CompletedRun | None:
        """The stored answer when ``request.run_id`` completed in this thread with the same
        request. ``run_id`` is an idempotency key scoped to the thread key: in another thread
        (or user, or tenant) it names another run.

        Raises:
            IdempotencyMismatch: the run completed here with another message.
        """
        assert request.run_id is not None
        done = await self.backend.runs.get(ref.key, request.run_id)
        if done is None:
            return None
        field = done.mismatch(request.message.content, request.message.id)
        if field is not None:
            raise IdempotencyMismatch(request.run_id, field)
        return CompletedRun(request.run_id, stored_result(done.response), ref.thread_id)

    async def _refuse_duplicate(self, ref: ThreadRef, caller: Caller, message_id: str) -> None:
        earlier = await self.backend.runs.by_human_message(ref.key, message_id)
        if earlier is not None:
            raise DuplicateMessage(message_id, earlier.run_id)
        state = await self.agent.aget_state(run_config(ref, caller))
        if any(m.id == message_id for m in (state.values or {}).get("messages", [])):
            raise DuplicateMessage(message_id, None)

    # -- shutdown ---------------------------------------------------------------------------

    def start_followups(self) -> None:
        """Run this process's follow-up workers (``serve``; none when configured 0)."""
        if self.worker.settings.concurrency > 0:
            self.worker.start()

    def _unfinished(self) -> set[asyncio.Task[Any]]:
        """The runs and their threads' weighing not done yet. Only those: a done task leaves
        its set in a done callback, which awaiting what is already done never yields to
        (Python 3.13's ``gather`` of done tasks): a loop over every task would spin."""
        return {t for t in (*self._tasks, *self.executor.background) if not t.done()}

    async def wait_idle(self) -> None:
        """Wait for every run in flight and what runs leave behind: the weighing of their
        threads, and their follow-up work due now (done here, if no worker took it)."""
        while pending := self._unfinished():
            await asyncio.gather(*pending, return_exceptions=True)  # runs end, then they weigh
        await self.worker.run_due()

    async def drain(self, grace: float = SHUTDOWN_GRACE_SECONDS) -> int:
        """Shutdown: let the runs in flight finish for up to ``grace`` seconds, then cancel
        the rest — a cancelled run leaves its thread as it was, and its client is told the
        service is shutting down (503) — except the runs already storing their round
        (cancelling a commit would leave its outcome unknown), which are waited for. How many
        runs were cancelled."""
        self._draining = True
        pending = {t for t in self._tasks if not t.done()}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace)
        cancelled = [t for t in pending if not (r := self._runs.get(t)) or not r.finishing]
        for task in cancelled:
            task.cancel()
        if cancelled:
            log.warning(
                "shutdown: %d run(s) did not finish in %g s and were cancelled; their threads "
                "are unchanged",
                len(cancelled),
                grace,
            )
        while pending := self._unfinished():
            await asyncio.gather(*pending, return_exceptions=True)
        await self.worker.stop(grace)  # follow-up work in flight: finished, or handed back
        return len(cancelled)

    # -- reads and deletions (the stored threads) -------------------------------------------

    async def messages(
        self, caller: Caller, thread_id: str, *, limit: int, before: str | None
    ) -> TranscriptPage:
        return await self.threads.messages(caller, thread_id, limit=limit, before=before)

    async def delete_thread(self, caller: Caller, thread_id: str) -> None:
        await self.threads.delete_thread(caller, thread_id)

    async def storage(self, caller: Caller, thread_id: str) -> StorageUsage:
        return await self.threads.storage(caller, thread_id)

    async def add_feedback(
        self, caller: Caller, thread_id: str, run_id: str, score: int, comment: str | None
    ) -> None:
        await self.threads.add_feedback(caller, thread_id, run_id, score, comment)

    async def memory(self, caller: Caller) -> MemoryView:
        # pending first: work not pending now is done, so the memory read next holds what it
        # wrote (read the other way round, work ending between the reads was reported done
        # beside the memory from before it)
        pending = await self.backend.followups.pending_for(caller.tenant_id, caller.user_id)
        view = await self.threads.memory(caller)
        return msgspec.structs.replace(view, pending=pending) if pending else view

    async def reset_memory(self, caller: Caller) -> int:
        return await self.threads.reset_memory(caller)

    async def erase_user(self, caller: Caller) -> ErasureReceipt:
        return await self.threads.erase_user(caller)

    async def ready(self) -> dict[str, str]:
        checks = await self.threads.ready()
        if self._draining:  # a load balancer stops sending here; runs are refused (503)
            checks["service"] = "shutting down"
        return checks
