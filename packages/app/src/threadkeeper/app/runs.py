"""The run service: one run per message, atomic, streamed — ``ThreadService`` implemented.

A run executes in its own task. Its checkpoint writes are staged (``AtomicSaver``) and
committed only when the graph finished; then the run record is saved and memory written; then
the thread's lock is released; only then is ``end`` sent (or the JSON body returned). A run
that ends any other way — the SSE client gone, an error, a crash — leaves the thread as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import msgspec
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from threadkeeper.adapters.atomic import AtomicSaver
from threadkeeper.adapters.checkpoint_retention import delete_store_prefix
from threadkeeper.adapters.rounds import RoundStore, RoundWrite
from threadkeeper.app.agent import PROMPT_VERSION, RunTrace, current_trace
from threadkeeper.app.memory import MemoryExtractor, RuleExtractor
from threadkeeper.app.metrics import MEMORY_WRITE_FAILURES, count_refusals
from threadkeeper.app.service import (
    MAX_MESSAGE_BYTES,
    Caller,
    DuplicateMessage,
    MemoryView,
    MessageTooLong,
    RunEvent,
    RunFailed,
    RunRequest,
    Unavailable,
    run_failure,
)
from threadkeeper.app.stored import (
    decode_summary,
    encode_summary,
    from_transcript,
    load_memory,
    memory_view,
    stamp_of,
    to_transcript,
    transcript_page,
)
from threadkeeper.app.telemetry import record_failure, tracer
from threadkeeper.domain.errors import DomainError, MessageTooLarge, RunTimeout, UnknownThread
from threadkeeper.domain.extraction import RoundText
from threadkeeper.domain.locks import RunFences, ThreadLock
from threadkeeper.domain.memory import (
    MemoryItem,
    MemoryKind,
    MemoryRules,
    Provenance,
    memory_namespace,
    user_namespace,
)
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.runs import (
    Feedback,
    IdempotencyMismatch,
    ModelCall,
    RunRecord,
    RunRecords,
    content_digest,
    stored_prompt,
)
from threadkeeper.domain.summary import Summary
from threadkeeper.domain.threads import ThreadRef, ThreadScope
from threadkeeper.domain.tokens import MESSAGE_FRAMING, REPLY_PRIMING, TokenCounter, message_text
from threadkeeper.domain.transcript import (
    Round,
    TranscriptArchive,
    TranscriptMessage,
    TranscriptPage,
)

RECENT_FOR_HANDOFF = 6
COLD_START_MESSAGES = 20
"""A thread without checkpoints is seeded with this many of its newest archived messages."""
RUN_TIMEOUT_SECONDS = 120.0
SHUTDOWN_GRACE_SECONDS = 20.0
MEMORY_RETRY_DELAY_SECONDS = 1.0
MEMORY_WRITE_SECONDS = 10.0
"""The memory write after a stored round (a model-based extraction included) holds the
thread and the ``end`` event this long at most; then it is retried in the background."""
log = logging.getLogger(__name__)


class Backend(Protocol):
    saver: BaseCheckpointSaver[Any]
    store: BaseStore
    runs: RunRecords
    rounds: RoundStore
    """Stores a finished run's round whole, with its run record, fenced by its claim."""
    fences: RunFences
    lock: ThreadLock
    profile: str
    archive: TranscriptArchive | None
    """The permanent transcript where it lives outside the checkpoints (redis-mysql): written
    once a run finished, read by ``GET /messages``, the seed of a cold start."""

    async def after_commit(self, thread_key: str) -> None:
        """Storage upkeep once a round is committed, still under the thread's lock."""
        ...

    async def health(self) -> dict[str, str]: ...


class ThreadRetention(Protocol):
    """``Retention`` plus deleting one thread (what ``DELETE /v1/threads/…`` needs)."""

    async def delete_thread(self, thread_key: str) -> ErasureReceipt: ...

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt: ...


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class CompletedRun:
    run_id: str
    body: dict[str, Any]
    thread_id: str

    async def events(self) -> AsyncGenerator[RunEvent, None]:
        yield RunEvent("metadata", {"run_id": self.run_id, "thread_id": self.thread_id})
        yield RunEvent("end", self.body)

    async def result(self) -> dict[str, Any]:
        return self.body


@dataclass
class LiveRun:
    run_id: str
    task: asyncio.Task[None] | None = None
    finishing: bool = False
    """The graph has finished: the round is being stored and the run is no longer cancelled
    when its client leaves (a finished run is stored whole)."""
    queue: asyncio.Queue[RunEvent | DomainError | None] = field(default_factory=asyncio.Queue)
    outcome: asyncio.Future[dict[str, Any]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def events(self) -> AsyncGenerator[RunEvent, None]:
        finished = False
        try:
            while (event := await self.queue.get()) is not None:
                if isinstance(event, DomainError):
                    finished = True
                    raise event
                yield event
            finished = True
        finally:
            task = self.task
            if not finished and task is not None and not task.done() and not self.finishing:
                task.cancel()  # the client is gone: the run must leave no trace

    async def result(self) -> dict[str, Any]:
        return await asyncio.shield(self.outcome)


class RunService:
    """``ThreadService`` over a backend, the compiled agent and its ``AtomicSaver``."""

    def __init__(
        self,
        *,
        agent: Any,
        saver: AtomicSaver,
        backend: Backend,
        retention: ThreadRetention,
        counter: TokenCounter,
        budget: int,
        scope: ThreadScope,
        rules: MemoryRules,
        prompt: str,
        extractor: MemoryExtractor | None = None,
        run_timeout: float = RUN_TIMEOUT_SECONDS,
    ) -> None:
        self.agent = agent
        self.saver = saver
        self.backend = backend
        self.retention = retention
        self.counter = counter
        self.budget = budget
        self.scope = scope
        self.rules = rules
        self.prompt = prompt
        self.extractor: MemoryExtractor = extractor or RuleExtractor()
        self.archive: TranscriptArchive | None = backend.archive
        self.run_timeout = run_timeout
        self._tasks: set[asyncio.Task[None]] = set()
        """Runs in flight (shutdown drains them)."""
        self._runs: dict[asyncio.Task[None], LiveRun] = {}
        self._draining = False
        self._background: set[asyncio.Task[None]] = set()
        """Retries of memory writes after a stored round."""

    # -- runs -------------------------------------------------------------------------------

    def _ref(self, caller: Caller, thread_id: str) -> ThreadRef:
        return ThreadRef(caller.tenant_id, caller.user_id, thread_id, self.scope)

    def _config(self, ref: ThreadRef, caller: Caller) -> dict[str, Any]:
        return {
            "configurable": {
                "thread_id": ref.key,
                "tenant_id": ref.tenant_id,
                "user_id": ref.user_id,
                "locale": caller.locale or "",
                "thread": ref.thread_id,
            }
        }

    async def start_run(
        self, caller: Caller, thread_id: str, request: RunRequest
    ) -> CompletedRun | LiveRun:
        if self._draining:
            raise Unavailable("the service is shutting down; retry on another replica")
        ref = self._ref(caller, thread_id)
        content = request.message.content
        size = len(content.encode("utf-8"))
        if size > MAX_MESSAGE_BYTES:
            raise MessageTooLong(size, MAX_MESSAGE_BYTES)
        run_id = request.run_id or str(uuid.uuid4())
        if request.run_id is not None and (done := await self._completed(ref, request)):
            return done  # a retry of a completed run: its stored answer, no new run
        human = HumanMessage(
            content,
            id=request.message.id or str(uuid.uuid4()),
            response_metadata={"threadkeeper": {"at": now().isoformat(), "run_id": run_id}},
        )
        tokens = self.counter.count(human)
        if tokens + REPLY_PRIMING > self.budget:
            raise MessageTooLarge(tokens, self.budget)

        hold = self.backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id)
        claim = await hold.__aenter__()  # ThreadBusy propagates: nothing was stored
        try:
            if request.run_id is not None and (done := await self._completed(ref, request)):
                await hold.__aexit__(None, None, None)
                return done  # it completed while this retry waited for the thread
            if request.message.id is not None:
                await self._refuse_duplicate(ref, caller, request.message.id, run_id)
            run = LiveRun(run_id)
            task = asyncio.create_task(
                self._traced(run, hold, claim, ref, caller, human, request.message.id)
            )
            run.task = task
            self._tasks.add(task)
            self._runs[task] = run
            task.add_done_callback(self._run_done)
        except BaseException:
            await hold.__aexit__(None, None, None)
            raise
        return run

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
        return CompletedRun(request.run_id, done.response, ref.thread_id)

    async def _refuse_duplicate(
        self, ref: ThreadRef, caller: Caller, message_id: str, run_id: str
    ) -> None:
        earlier = await self.backend.runs.by_human_message(ref.key, message_id)
        if earlier is not None:
            raise DuplicateMessage(message_id, earlier.run_id)
        state = await self.agent.aget_state(self._config(ref, caller))
        if any(m.id == message_id for m in (state.values or {}).get("messages", [])):
            raise DuplicateMessage(message_id, None)

    async def _traced(
        self,
        run: LiveRun,
        hold: AbstractAsyncContextManager[str],
        claim: str,
        ref: ThreadRef,
        caller: Caller,
        human: HumanMessage,
        given_id: str | None,
    ) -> None:
        """``_execute`` in a ``threadkeeper.run`` span (a child of the request's span: the task
        copies the request's context)."""
        with tracer().start_as_current_span(
            "threadkeeper.run",
            record_exception=False,  # messages can hold thread keys: record_failure instead
            set_status_on_exception=False,
            attributes={
                "threadkeeper.run_id": run.run_id,
                "threadkeeper.tenant_id": ref.tenant_id,
                "threadkeeper.thread_id": ref.thread_id,
                "threadkeeper.profile": self.backend.profile,
            },
        ) as span:
            try:
                await self._execute(run, hold, claim, ref, caller, human, given_id)
            except BaseException as exc:
                record_failure(span, exc)
                raise
            outcome = run.outcome
            if outcome.done() and not outcome.cancelled() and outcome.exception() is None:
                span.set_attribute("threadkeeper.status", str(outcome.result()["status"]))
            elif outcome.done() and not outcome.cancelled():
                record_failure(span, cast("BaseException", outcome.exception()))

    async def _execute(
        self,
        run: LiveRun,
        hold: AbstractAsyncContextManager[str],
        claim: str,
        ref: ThreadRef,
        caller: Caller,
        human: HumanMessage,
        given_id: str | None,
    ) -> None:
        config = self._config(ref, caller)
        trace = RunTrace()
        current_trace.set(trace)
        body: dict[str, Any] | None = None
        try:
            await run.queue.put(
                RunEvent("metadata", {"run_id": run.run_id, "thread_id": ref.thread_id})
            )
            with self.saver.staging(ref.key) as staging:
                deadline = asyncio.timeout(self.run_timeout)
                try:
                    async with deadline:
                        if self.archive is not None:
                            await self._cold_start(self.archive, config, ref)
                        async for mode, payload in self.agent.astream(
                            {"messages": [human]},
                            config,
                            stream_mode=["messages", "custom"],
                            durability="exit",
                        ):
                            event = _event(mode, payload)
                            if event is not None:
                                await run.queue.put(event)
                        state = await self.agent.aget_state(config)
                except TimeoutError as exc:
                    if deadline.expired():
                        raise RunTimeout(self.run_timeout) from exc
                    raise
                run.finishing = True
                values = state.values
                body, record, answer = self._finish(run.run_id, ref, human, values, trace)
                record = msgspec.structs.replace(
                    record,
                    content_digest=content_digest(message_text(human)),
                    message_id_given=given_id is not None,
                )
                write = RoundWrite(
                    staging=staging,
                    claim=claim,
                    record=record,
                    round=self._round(run.run_id, ref, human, answer, values),
                    tools=tuple(trace.tools),
                )
                with tracer().start_as_current_span("threadkeeper.commit", record_exception=False):
                    head = await self.backend.rounds.commit(write)
            # The round is stored: nothing from here on may turn it into an error answer.
            try:
                if head is not None:  # None: the checkpoints were not written (upkeep neither)
                    await self.backend.after_commit(ref.key)
            except Exception:  # the next run's upkeep catches up
                log.warning("storage upkeep after run %s failed", run.run_id, exc_info=True)
            if body["status"] == "answered":
                await self._remember_or_retry(ref, human, body, run.run_id, claim)
        except asyncio.CancelledError:
            failure: DomainError = RunFailed("the run was cancelled")
            if self._draining:
                failure = Unavailable("the service is shutting down; nothing was stored")
            if not run.outcome.done():
                run.outcome.set_exception(failure)
            run.queue.put_nowait(failure)  # an SSE client still there gets `error`
            raise
        except Exception as exc:
            failure = run_failure(exc)
            if isinstance(failure, RunFailed):
                log.exception("run %s on %s failed", run.run_id, ref.key)
            else:
                log.warning("run %s on %s: %s", run.run_id, ref.key, failure)
            if not run.outcome.done():
                run.outcome.set_exception(failure)
            body = None
            await run.queue.put(failure)
        finally:
            with contextlib.suppress(Exception):
                await hold.__aexit__(None, None, None)  # released before `end` is sent
            if body is not None:
                if not run.outcome.done():
                    run.outcome.set_result(body)
                run.queue.put_nowait(RunEvent("end", body))
            run.queue.put_nowait(None)
            if run.outcome.done() and not run.outcome.cancelled():
                run.outcome.exception()  # mark retrieved: JSON mode may never ask

    def _usage(
        self, human: HumanMessage, produced: Sequence[BaseMessage], trace: RunTrace
    ) -> dict[str, Any]:
        """Token usage of the run's model calls: the provider's figures when it reported them
        for every call (``source: "provider"``), otherwise threadkeeper's count with the
        configured tokenizer — input as each call's window was counted, output as the
        replies' text and tool calls count (``source: "counted"``)."""
        replies = [m for m in produced if isinstance(m, AIMessage)]
        if replies and all(m.usage_metadata for m in replies):
            return {
                "input_tokens": sum(
                    m.usage_metadata["input_tokens"] for m in replies if m.usage_metadata
                ),
                "output_tokens": sum(
                    m.usage_metadata["output_tokens"] for m in replies if m.usage_metadata
                ),
                "source": "provider",
            }
        inputs = sum(w.tokens for w in trace.windows) or self.counter.count(human)
        outputs = sum(max(0, self.counter.count(m) - MESSAGE_FRAMING) for m in replies)
        return {"input_tokens": inputs, "output_tokens": outputs, "source": "counted"}

    async def _remember_or_retry(
        self, ref: ThreadRef, human: HumanMessage, body: dict[str, Any], run_id: str, claim: str
    ) -> None:
        """Write memory from a stored round, still holding the thread (an erasure waits for
        it, and so never races it). A failure does not touch the answer: it is logged,
        counted, and retried once in the background — unless the thread was claimed since
        (the user erased, or a newer run)."""
        try:
            async with asyncio.timeout(MEMORY_WRITE_SECONDS):
                await self._remember(ref, human, body)
        except Exception:
            log.warning("memory write after run %s failed; retrying once", run_id, exc_info=True)
            task = asyncio.create_task(self._retry_memory(ref, human, body, run_id, claim))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _retry_memory(
        self, ref: ThreadRef, human: HumanMessage, body: dict[str, Any], run_id: str, claim: str
    ) -> None:
        await asyncio.sleep(MEMORY_RETRY_DELAY_SECONDS)
        try:
            if not await self.backend.fences.holds(ref.key, claim):
                MEMORY_WRITE_FAILURES.labels(outcome="lost").inc()
                log.warning("memory of run %s not retried: the thread was claimed since", run_id)
                return
            async with asyncio.timeout(MEMORY_WRITE_SECONDS):
                await self._remember(ref, human, body)
        except Exception:
            MEMORY_WRITE_FAILURES.labels(outcome="lost").inc()
            log.error("memory write after run %s failed again; not kept", run_id, exc_info=True)
        else:
            MEMORY_WRITE_FAILURES.labels(outcome="retried").inc()

    async def _cold_start(
        self, archive: TranscriptArchive, config: dict[str, Any], ref: ThreadRef
    ) -> None:
        """A thread with no checkpoint (TTL expired, Redis flushed or restarted) but an archive
        is seeded, before the run, with its newest archived messages and latest summary. So is
        a thread whose checkpoint is behind the archive (a round stored while Redis did not
        answer, or whose commit's outcome was learnt late): its checkpoint lacks the newest
        archived answer, and the model would never see that round again."""
        current = await self.saver.aget_tuple(cast("Any", config))
        if current is not None:
            newest = await archive.recent(ref.key, 1)
            held = {m.id for m in current.checkpoint["channel_values"].get("messages", [])}
            if not newest or newest[-1].id in held:
                return
            log.warning("the checkpoint of %s is behind its archive: starting cold", ref.key)
            await self.saver.adelete_thread(ref.key)
        seed = await archive.recent(ref.key, COLD_START_MESSAGES)
        if not seed:
            return
        values: dict[str, Any] = {"messages": [from_transcript(m) for m in seed]}
        summary = decode_summary(await archive.latest_summary(ref.key))
        if summary is not None:
            values["summary"] = summary
        await self.agent.aupdate_state(config, values)
        log.info("cold start of %s from %d archived messages", ref.key, len(seed))

    def _round(
        self,
        run_id: str,
        ref: ThreadRef,
        human: HumanMessage,
        answer: AIMessage,
        values: dict[str, Any],
    ) -> Round:
        """The round as a transcript archive keeps it (human message, answer, summary)."""
        human_text = to_transcript([human])[0]
        answer_text = to_transcript([answer]) or [
            TranscriptMessage(str(answer.id), "ai", "", human_text.created_at)
        ]
        return Round(
            run_id=run_id,
            thread_key=ref.key,
            tenant_id=ref.tenant_id,
            user_id=ref.user_id,
            thread_id=ref.thread_id,
            human=human_text,
            ai=answer_text[0],
            summary=encode_summary(values.get("summary")),
        )

    def _finish(
        self,
        run_id: str,
        ref: ThreadRef,
        human: HumanMessage,
        values: dict[str, Any],
        trace: RunTrace,
    ) -> tuple[dict[str, Any], RunRecord, AIMessage]:
        messages: list[BaseMessage] = values.get("messages", [])
        start = next(i for i in range(len(messages) - 1, -1, -1) if messages[i].id == human.id)
        produced = messages[start + 1 :]
        answer = next(
            (m for m in reversed(produced) if isinstance(m, AIMessage) and not m.tool_calls),
            None,
        )
        if answer is None:
            raise RuntimeError("the agent ended without an answer")
        meta = stamp_of(answer)
        status = meta.get("status", "answered")
        usage = self._usage(human, produced, trace)
        body: dict[str, Any] = {
            "run_id": run_id,
            "thread_id": ref.thread_id,
            "status": status,
            "message": {
                "id": answer.id,
                "role": "ai",
                "content": message_text(answer),
                "citations": meta.get("citations", []),
            },
            "usage": usage,
        }
        memory = trace.memory
        if status == "escalate":
            summary = Summary.from_state(values.get("summary"))
            recent = to_transcript(messages)[-RECENT_FOR_HANDOFF:]
            body["handoff_context"] = {
                "conversation_summary": summary.text if summary else "",
                "profile": [
                    {"key": m["key"], "value": m["value"]}
                    for m in memory
                    if m["kind"] == MemoryKind.PROFILE.value
                ],
                "recent_messages": [
                    {"id": m.id, "role": m.role, "content": m.content} for m in recent
                ],
            }
        chunks = trace.retrieved
        record = RunRecord(
            run_id=run_id,
            thread_key=ref.key,
            tenant_id=ref.tenant_id,
            user_id=ref.user_id,
            thread_id=ref.thread_id,
            human_message_id=str(human.id),
            status=status,
            created_at=now(),
            response=body,
            system_prompt=stored_prompt(
                trace.system_prompts[0] if trace.system_prompts else self.prompt
            ),
            prompt_version=PROMPT_VERSION,
            chunk_ids=tuple(c["chunk_id"] for c in chunks),
            memory_keys=tuple(f"{m['kind']}/{m['key']}@{m['updated_at']}" for m in memory),
            model_calls=tuple(
                ModelCall(
                    tuple(str(m.id) for m in w.messages), w.summary, w.tokens, w.budget, w.counter
                )
                for w in trace.windows
            ),
        )
        return body, record, answer

    async def _remember(self, ref: ThreadRef, human: HumanMessage, body: dict[str, Any]) -> None:
        store = self.backend.store
        existing = [
            MemoryItem(
                kind=MemoryKind(m["kind"]),
                key=m["key"],
                value=m["value"],
                source=Provenance(
                    str(m["source"].get("thread_id", "")),
                    str(m["source"].get("message_id", "")),
                    datetime.fromisoformat(m["source"]["at"]) if m["source"].get("at") else now(),
                ),
            )
            for m in await load_memory(store, ref.tenant_id, ref.user_id)
        ]
        plan = await self.extractor.plan(
            RoundText(
                thread_id=ref.thread_id,
                message_id=str(human.id),
                human=message_text(human),
                answer=body["message"]["content"],
                at=now(),
            ),
            existing,
            self.rules,
        )
        count_refusals(plan.refused)
        for item in plan.puts:
            await store.aput(
                memory_namespace(ref.tenant_id, ref.user_id, item.kind),
                item.key,
                {
                    "value": item.value,
                    "source": {
                        "thread_id": item.source.thread_id,
                        "message_id": item.source.message_id,
                        "at": item.source.at.isoformat(),
                    },
                },
            )
        for kind, key in plan.deletes:
            await store.adelete(memory_namespace(ref.tenant_id, ref.user_id, kind), key)

    async def wait_idle(self) -> None:
        """Wait for every run in flight (and memory retries)."""
        if self._tasks or self._background:
            await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)

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
        await self.wait_idle()
        return len(cancelled)

    # -- reads and deletions ---------------------------------------------------------------

    async def messages(
        self, caller: Caller, thread_id: str, *, limit: int, before: str | None
    ) -> TranscriptPage:
        ref = self._ref(caller, thread_id)
        try:
            return await transcript_page(
                self.saver, self.archive, ref.key, limit=limit, before=before
            )
        except UnknownThread:
            raise UnknownThread(thread_id) from None  # the caller's id, not the storage key

    async def delete_thread(self, caller: Caller, thread_id: str) -> None:
        await self.retention.delete_thread(self._ref(caller, thread_id).key)

    async def add_feedback(
        self, caller: Caller, thread_id: str, run_id: str, score: int, comment: str | None
    ) -> None:
        ref = self._ref(caller, thread_id)
        await self.backend.runs.add_feedback(
            Feedback(
                run_id=run_id,
                thread_key=ref.key,
                tenant_id=ref.tenant_id,
                user_id=ref.user_id,
                score=cast("Any", score),
                comment=comment,
                at=now(),
            )
        )

    async def memory(self, caller: Caller) -> MemoryView:
        return await memory_view(self.backend.store, caller.tenant_id, caller.user_id)

    async def reset_memory(self, caller: Caller) -> int:
        """Delete the user's memory, and what their run records hold of it (the memory block
        of the stored prompts, the profile of stored escalations)."""
        deleted = await delete_store_prefix(
            self.backend.store, user_namespace(caller.tenant_id, caller.user_id)
        )
        await self.backend.runs.forget_memory(caller.tenant_id, caller.user_id)
        return deleted

    async def erase_user(self, caller: Caller) -> ErasureReceipt:
        return await self.retention.erase_user(caller.tenant_id, caller.user_id)

    async def ready(self) -> dict[str, str]:
        return await self.backend.health()


def _event(mode: str, payload: Any) -> RunEvent | None:
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
