"""Executing one run: its thread held, the graph inside the backend's round, the round stored
whole, the thread let go, the caller answered.

One task owns a run from its claim to its acknowledgement (``RunExecutor.own``, the task
``RunService.start_run`` creates): it takes the thread's lock (``async with lock.hold(…)``,
which yields the claim that fences the round's writes), tells the service whether the run is
admitted (``Started.admission``: admitted, refused — busy, a duplicate message — or a retry
of a run that completed meanwhile), runs and stores the round, and leaves the ``async with``
— the lock is entered and left by this one task, never released by another. The order is the
backend's contract (``ports.storage.Backend``): within the run's round, the transcript's
seed (a cold start is stored with the round), the graph streamed into the run's queue under
the run's deadline, the outcome read from the final state, the round stored
(``RoundWork.store``: archive, checkpoints, run record and the round's follow-up work in the
profile's order, then upkeep); then the thread's lock is released; only then is ``end`` sent
(or the JSON body returned), and the follow-up workers are woken (``recorded``): the
follow-up work — the memory the round teaches — is theirs (``app.followups``). A run that
ends any other way — the SSE client gone, an error, a crash, a refusal — leaves the thread as
it was, and its ``error`` (or problem) too is sent only once the lock is released. A release
that fails is logged: it never turns the run's outcome into an error.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessageChunk, HumanMessage
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.trace import SpanKind

from threadkeeper.app.agent import RunTrace, current_trace
from threadkeeper.app.metrics import (
    COLD_STARTS,
    COMPACTIONS,
    LOCK_WAIT,
    RUN_DURATION,
    SUMMARY_FOLDS,
    THREAD_BYTES,
    TIME_TO_FIRST_TOKEN,
    WINDOW_TOKENS,
    count_round_bytes,
    count_run,
)
from threadkeeper.app.runs.handles import CompletedRun, LiveRun
from threadkeeper.app.runs.outcome import finish
from threadkeeper.app.service import (
    Caller,
    RunEvent,
    RunFailed,
    RunResultOut,
    Unavailable,
    problem_spec,
    run_failure,
)
from threadkeeper.app.telemetry import (
    AGENT_NAME,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    ConversationIds,
    record_failure,
    tracer,
)
from threadkeeper.domain.errors import DomainError, RunTimeout, ThreadBusy
from threadkeeper.domain.followups import MEMORY
from threadkeeper.domain.threads import ThreadRef, log_name
from threadkeeper.domain.tokens import TokenCounter, message_text

if TYPE_CHECKING:  # the app is wired with a backend; it never imports one
    from threadkeeper.ports.storage import Backend

log = logging.getLogger("threadkeeper.app.runs")

STREAM_MODES = ["messages", "custom"]
"""An SSE run: the model's token stream (``messages``) and the stages (``custom``)."""
CUSTOM_ONLY = ["custom"]
"""A JSON run: no token stream is asked for, so no model streams one for nobody (a chunk per
token is an object, a callback and a merge each)."""


MAX_MODEL_CALLS = 8
"""Model calls one run may make (each tool step is one more). A run that keeps asking for
tools — a model that loops, or a budget too small to show the result it asked for — fails
(``RunFailed``) at this bound instead of making calls until LangGraph's default recursion
limit (~10,000 steps, each one a paid call with a real model)."""
WEIGH_EVERY_SECONDS = 30.0
"""How often a process weighs the thread of a round it stored (``threadkeeper.thread.bytes``):
at most once per this many seconds. Weighing reads every row of the thread (on embedded, every
checkpoint it ever had: 1.5 ms of CPU at 20 turns), so weighing after every round made a turn
cost more the longer its thread (turn 50 ÷ turn 5 up to 1.5 in latency); sampled in time its
cost per run is nil under load, and a quiet service still reports a sample per round."""
RECURSION_LIMIT = 3 * MAX_MODEL_CALLS + 1
"""The graph steps of ``MAX_MODEL_CALLS`` model calls on the longest pipeline: per call the
history hook before the model (``compact``), the model (which writes the answer stamped) and
the tools; one step before the agent. A pipeline without a hook node before the model gets up
to half as many calls again."""


def run_config(ref: ThreadRef, caller: Caller) -> dict[str, Any]:
    """The graph's config for a run on ``ref`` (the checkpoints' thread is its key)."""
    return {
        "recursion_limit": RECURSION_LIMIT,
        "configurable": {
            "thread_id": ref.key,
            "tenant_id": ref.tenant_id,
            "user_id": ref.user_id,
            "locale": caller.locale or "",
            "thread": ref.thread_id,
        },
    }


CANCELLED = "cancelled"
"""``threadkeeper.runs``'s status of a run whose client left before it ended."""
CLIENT_CLOSED = 499
"""Its ``http.response.status_code``: no answer was sent (the code proxies log for it)."""


FollowUpsOf = Callable[[str, Mapping[str, Any], str], Sequence[str]]
"""The kinds of follow-up work a stored round leaves (``domain.followups``), from its outcome's
status, the thread's state after it and the system message its run was last sent: recorded
with the round, in its transaction."""


def memory_only(status: str, values: Mapping[str, Any], system: str) -> Sequence[str]:
    """An answered round teaches memory; any other leaves no follow-up work."""
    return (MEMORY,) if status == "answered" else ()


@dataclass(frozen=True)
class Started:
    """A run the service has accepted, its human message built: its task (``own``) takes the
    thread and tells whether it is admitted (``admission``)."""

    run: LiveRun
    hold: AbstractAsyncContextManager[str]
    """The thread's lock, not entered yet: the run's task holds it (``async with``)."""
    admit: Callable[[], Awaitable[CompletedRun | None]]
    """The service's checks once the thread is held: a refusal is raised (a duplicate
    message); a run that completed while this retry of it waited for the thread is its
    stored answer; ``None``: the run is admitted."""
    ref: ThreadRef
    caller: Caller
    human: HumanMessage
    given_id: str | None
    deltas: bool = True
    """Whether the answer's deltas are streamed to the caller (``RunRequest.deltas``)."""
    admitted: float = field(default_factory=time.perf_counter)
    """When the service was asked for the run (``time.perf_counter``): run duration and time
    to first token are measured from here."""
    admission: asyncio.Future[CompletedRun | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """The run's task answers the service here: ``None`` once the run is admitted (``run``
    is its handle), a ``CompletedRun`` to replay, or the refusal raised (``ThreadBusy``…).
    A refusal or a replay is answered once the thread is let go."""


@dataclass
class Ending:
    """How an admitted run ended: told its caller once the thread is let go."""

    outcome: RunResultOut | None = None
    """The stored round's outcome (``end``)."""
    failure: DomainError | None = None
    """Nothing was stored: ``error`` (or the problem)."""
    followups: int = 0
    """Follow-up work the stored round recorded (the worker is woken only for some)."""


def mode_of(request: Any) -> str:
    """``sse`` or ``json``: how a run (``Started`` or ``RunRequest``) answers (metrics)."""
    return "sse" if request.deltas else "json"


class RunExecutor:
    """Executes admitted runs (see the module docstring)."""

    def __init__(
        self,
        *,
        agent: Any,
        backend: Backend,
        recorded: Callable[[], None] = lambda: None,
        counter: TokenCounter,
        prompt: str,
        run_timeout: float,
        draining: Callable[[], bool],
        profile: str = "",
        conversations: ConversationIds | None = None,
        followups_of: FollowUpsOf | None = None,
    ) -> None:
        self.agent = agent
        self.backend = backend
        self.recorded = recorded
        """Called once a round recorded follow-up work (wakes this process's worker)."""
        self.counter = counter
        self.prompt = prompt
        self.run_timeout = run_timeout
        self.draining = draining
        self.profile = profile
        self.conversations = conversations or ConversationIds(None)
        self.followups_of = followups_of or memory_only
        """The kinds of follow-up work a round leaves, by its status and the thread's state."""
        self.background: set[asyncio.Task[None]] = set()
        """Threads being weighed after their rounds (shutdown waits for them)."""
        self._weighed: float | None = None
        """When this process last weighed a thread (``time.monotonic``)."""

    async def own(self, started: Started) -> None:
        """The run's task, from its claim to its acknowledgement (see the module docstring):
        the thread is held for the admission's checks and the run (``async with``), let go,
        and only then is the caller answered — its refusal, its replay, ``end`` or
        ``error``."""
        run, admission = started.run, started.admission
        # not admitted: the refusal or the replay, answered once the thread is let go
        answer: CompletedRun | Exception | None = None
        ending = Ending()
        entered = cancelled = False
        waited = time.perf_counter()
        try:
            async with started.hold as claim:
                entered = True
                self._lock_wait(waited, "held")
                try:
                    try:
                        answer = await started.admit()
                    except Exception as refused:
                        answer = refused
                    if answer is None and not admission.done():  # done: its caller left
                        admission.set_result(None)  # admitted: the caller has its handle
                        await self.traced(started, claim, ending)
                except asyncio.CancelledError:
                    cancelled = True
                    raise
        except Exception as exc:
            if not entered:  # refused by the lock (or its store): nothing is held
                if isinstance(exc, ThreadBusy):
                    self._lock_wait(waited, "busy")
                answer = exc
            else:  # everything within catches its own errors: this is the release's
                log.warning(
                    "run %s on %s: releasing the thread failed",
                    run.run_id,
                    log_name(started.ref.key),
                    exc_info=True,
                )
                if cancelled:
                    raise asyncio.CancelledError from exc
        finally:
            # the thread is let go: now the caller is answered
            if not admission.done():
                if isinstance(answer, Exception):
                    admission.set_exception(answer)
                elif answer is not None:
                    admission.set_result(answer)
                else:  # cancelled before it was admitted: shutdown, or its caller gone
                    admission.set_exception(self._cancelled())
            if ending.failure is not None:
                run.fail(ending.failure)  # an SSE client still there gets `error`
            if (outcome := ending.outcome) is not None:
                self._record(started, outcome.status, 200)
                run.succeed(outcome)
                self._weigh_later(started.ref.key)
                if ending.followups:  # a clarifying or escalated round records none
                    self.recorded()
            run.close()

    def _lock_wait(self, waited: float, outcome: str) -> None:
        """``threadkeeper.lock.wait``: how long the thread took to be held (or refused)."""
        LOCK_WAIT.record(
            time.perf_counter() - waited, {"profile": self.profile, "outcome": outcome}
        )

    def _cancelled(self) -> DomainError:
        """What a cancelled run fails with: shutdown's ``Unavailable``, or ``RunFailed``."""
        if self.draining():
            return Unavailable("the service is shutting down; nothing was stored")
        return RunFailed("the run was cancelled")

    async def traced(self, started: Started, claim: str, ending: Ending) -> None:
        """``execute`` in an ``invoke_agent`` span (GenAI semantic conventions; a child of the
        request's span: the task copies the request's context). The thread is named by
        ``gen_ai.conversation.id`` (an HMAC of its key), never by its key or the user's id."""
        run, ref = started.run, started.ref
        conversation = self.conversations.of(ref.key)
        attributes: dict[str, str] = {
            GEN_AI_OPERATION_NAME: "invoke_agent",
            GEN_AI_AGENT_NAME: AGENT_NAME,
            "threadkeeper.run_id": run.run_id,
            "threadkeeper.tenant_id": ref.tenant_id,
            "threadkeeper.profile": self.profile,
        }
        if conversation is not None:
            attributes[GEN_AI_CONVERSATION_ID] = conversation
        with tracer().start_as_current_span(
            f"invoke_agent {AGENT_NAME}",
            kind=SpanKind.INTERNAL,
            record_exception=False,  # messages can hold thread keys: record_failure instead
            set_status_on_exception=False,
            attributes=attributes,
        ) as span:
            try:
                await self.execute(started, claim, ending, conversation)
            except BaseException as exc:
                record_failure(span, exc)
                raise
            if ending.outcome is not None:
                span.set_attribute("threadkeeper.status", ending.outcome.status)
            elif ending.failure is not None:
                record_failure(span, ending.failure)

    def _count_failure(self, started: Started, failure: DomainError) -> None:
        """The run in ``threadkeeper.runs`` and ``threadkeeper.run.duration``, by its status:
        the stored outcome's, or the slug of the problem it failed with. Counted before the
        caller is answered, so a client that reads ``/metrics`` next sees its run."""
        spec = problem_spec(failure)
        status, code = (spec.slug, spec.status) if spec else ("run-failed", 500)
        self._record(started, status, code)

    def _record(self, started: Started, status: str, code: int) -> None:
        """``threadkeeper.runs`` and ``threadkeeper.run.duration`` of a run that ended."""
        mode = mode_of(started)
        count_run(self.profile, status, code, mode)
        RUN_DURATION.record(
            time.perf_counter() - started.admitted,
            {"profile": self.profile, "status": status, "mode": mode},
        )

    async def execute(
        self, started: Started, claim: str, ending: Ending, conversation: str | None = None
    ) -> None:
        """The admitted run within its thread's hold (``claim``): the graph in the round, the
        round stored; how it ended is left in ``ending`` (its caller is answered by ``own``
        once the thread is let go). A cancellation is recorded there too, then raised."""
        run, ref, human = started.run, started.ref, started.human
        config = run_config(ref, started.caller)
        trace = RunTrace(conversation_id=conversation)  # traced() named the thread
        current_trace.set(trace)
        try:
            await run.queue.put(
                RunEvent("metadata", {"run_id": run.run_id, "thread_id": ref.thread_id})
            )
            with self.backend.round(ref.key, claim) as round_work:
                deadline = asyncio.timeout(self.run_timeout)
                try:
                    async with deadline:
                        seed = await self.backend.transcript.seed(ref.key)
                        if seed is not None:  # a cold start, stored with the round
                            await self.agent.aupdate_state(config, seed)
                        first_token = True
                        async for mode, payload in self.agent.astream(
                            {"messages": [human]},
                            config,
                            stream_mode=STREAM_MODES if started.deltas else CUSTOM_ONLY,
                            durability="exit",
                        ):
                            event = stream_event(mode, payload)
                            if event is None:
                                continue
                            if event.event == "messages":
                                if trace.model_call is not None:
                                    trace.model_call.chunk_seen()
                                if first_token:
                                    first_token = False
                                    TIME_TO_FIRST_TOKEN.record(
                                        time.perf_counter() - started.admitted,
                                        {"profile": self.profile},
                                    )
                            await run.queue.put(event)
                        state = await self.agent.aget_state(config)
                except TimeoutError as exc:
                    if deadline.expired():
                        raise RunTimeout(self.run_timeout) from exc
                    raise
                run.finishing = True
                finished = finish(
                    run_id=run.run_id,
                    ref=ref,
                    human=human,
                    given_id=started.given_id,
                    values=state.values,
                    trace=trace,
                    counter=self.counter,
                    prompt=self.prompt,
                )
                # what the round teaches is follow-up work, recorded with it: done after `end`
                system = trace.system_prompts[-1] if trace.system_prompts else self.prompt
                followups = self.followups_of(finished.outcome.status, state.values, system)
                with tracer().start_as_current_span("threadkeeper.commit", record_exception=False):
                    await round_work.store(finished.record, finished.round, trace.tools, followups)
            ending.outcome = finished.outcome  # stored: a failing release does not undo it
            ending.followups = len(followups)
            self._count_stored(trace, cold_start=seed is not None)
            count_round_bytes(round_work.written, self.profile)
        except asyncio.CancelledError:
            failure = ending.failure = self._cancelled()
            if self.draining():
                self._count_failure(started, failure)
            elif run.client_gone:
                # its own outcome, not a 5xx that pages someone: nobody was answered (499, as
                # proxies log a client that closed its request)
                log.info(
                    "run %s on %s cancelled: its client went away; nothing was stored",
                    run.run_id,
                    log_name(ref.key),
                )
                self._record(started, CANCELLED, CLIENT_CLOSED)
            else:
                log.warning(
                    "run %s on %s was cancelled; nothing stored", run.run_id, log_name(ref.key)
                )
                self._count_failure(started, failure)
            raise
        except Exception as exc:
            failure = ending.failure = run_failure(exc)
            if isinstance(failure, RunFailed):
                log.exception("run %s on %s failed", run.run_id, log_name(ref.key))
            else:
                log.warning("run %s on %s: %s", run.run_id, log_name(ref.key), failure)
            ending.outcome = None
            self._count_failure(started, failure)
        finally:
            trace.release()  # a connection opened during the run keeps this context

    def _weigh_later(self, thread_key: str) -> None:
        """``threadkeeper.thread.bytes``: after a stored round — at most one per
        ``WEIGH_EVERY_SECONDS`` — its thread's storage by kind (the figures of
        ``GET /v1/threads/{thread_id}/storage``), weighed once the caller has its answer and
        outside any trace; a failure only goes unmeasured."""
        now = time.monotonic()
        if self._weighed is not None and now - self._weighed < WEIGH_EVERY_SECONDS:
            return
        self._weighed = now
        task = asyncio.create_task(self._weigh(thread_key), context=contextvars.Context())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _weigh(self, thread_key: str) -> None:
        try:
            with suppress_instrumentation():  # no database spans of its own
                usage = await self.backend.storage_usage(thread_key)
        except Exception:
            log.debug("weighing %s failed", log_name(thread_key), exc_info=True)
            return
        kinds = self.backend.storage_kinds
        for kind, size in usage.by_kind().items():
            if kind in kinds:
                THREAD_BYTES.record(size, {"profile": self.profile, "kind": kind})

    def _count_stored(self, trace: RunTrace, *, cold_start: bool) -> None:
        """What a stored round did: its windows' tokens before and after trimming, its folds
        and compactions, a cold start."""
        profile = {"profile": self.profile}
        for window in trace.windows:
            WINDOW_TOKENS.record(window.tokens, {**profile, "stage": "after_trim"})
            if window.before_trim is not None:
                WINDOW_TOKENS.record(window.before_trim, {**profile, "stage": "before_trim"})
        if folds := trace.events.get("summary_fold"):
            SUMMARY_FOLDS.add(folds, {**profile, "fold": "in_run"})
        if taken := trace.events.get("summary_ahead"):
            SUMMARY_FOLDS.add(taken, {**profile, "fold": "ahead"})
        if compactions := trace.events.get("compaction"):
            COMPACTIONS.add(compactions, profile)
        if cold_start:
            COLD_STARTS.add(1, profile)


def stream_event(mode: str, payload: Any) -> RunEvent | None:
    """The SSE event of one item of the graph's stream (``None``: not one clients see)."""
    if mode == "messages":
        chunk, metadata = payload
        if (
            isinstance(chunk, AIMessageChunk)
            and metadata.get("langgraph_node") == "model"
            and (text := message_text(chunk))
        ):
            return RunEvent("messages", {"id": chunk.id, "delta": text})
        return None
    if mode == "custom" and isinstance(payload, dict) and "stage" in payload:
        return RunEvent("custom", payload)
    return None
