"""``FakeThreadService``: the ``ThreadService`` Protocol in memory, for the HTTP tests.

A real fake (cosmicpython), not a mock: threads are lists of transcript messages, a run is a
scripted answer streamed as ``metadata`` → ``custom`` (retrieval) → ``messages`` deltas →
``end`` and is atomic like the real one — the round is stored only when the run completes, and
an abandoned event iterator (client gone) leaves the thread as it was and frees it. Switches
simulate the rest: ``busy`` threads (409), ``fail`` (``error`` event / ``RunFailed``),
``delay`` between events, ``readiness``. Every call is recorded in ``calls``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from threadkeeper.app.service import (
    MAX_MESSAGE_BYTES,
    Caller,
    DuplicateMessage,
    MemoryEntry,
    MemoryView,
    RunEvent,
    RunFailed,
    RunRequest,
)
from threadkeeper.domain.errors import MessageTooLarge, ThreadBusy, UnknownThread
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.runs import UnknownRun
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.transcript import (
    Citation,
    TranscriptMessage,
    TranscriptPage,
    page_messages,
)

CITATION = Citation(chunk_id="chunk-1", doc_id="doc-1", title="Returns policy")
RETRIEVAL = {
    "stage": "retrieval",
    "status": "end",
    "chunks": [{"chunk_id": CITATION.chunk_id, "title": CITATION.title}],
}
DELTAS = 3
"""How many ``messages`` events carry the answer."""


def answer_to(content: str) -> str:
    return f"You said: {content}"


def split(text: str, parts: int) -> list[str]:
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


async def one_per_batch(events: AsyncIterator[RunEvent]) -> AsyncIterator[list[RunEvent]]:
    """``RunHandle.batches()`` of a handle that queues nothing ahead: one event per batch;
    closing it closes ``events``."""
    try:
        async for event in events:
            yield [event]
    finally:
        await events.aclose()  # type: ignore[attr-defined]


@dataclass
class Thread:
    tenant_id: str
    user_id: str
    thread_id: str
    messages: list[TranscriptMessage] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Completed run id → its final body."""
    feedback: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    human_ids: dict[str, str] = field(default_factory=dict)
    """Human message id → the run that stored it."""


class FakeRun:
    """A ``RunHandle``: the scripted run, executed by ``events()`` or ``result()``."""

    def __init__(
        self,
        service: FakeThreadService,
        caller: Caller,
        thread: Thread,
        request: RunRequest,
        run_id: str,
    ) -> None:
        self.run_id = run_id
        self._service = service
        self._caller = caller
        self._thread = thread
        self._request = request
        self._human_id = request.message.id or f"h-{run_id}"
        self._ai_id = f"ai-{run_id}"
        self._text = answer_to(request.message.content)
        self._failing = service.fail
        self._settled = False

    def _body(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thread_id": self._thread.thread_id,
            "status": "answered",
            "message": {
                "id": self._ai_id,
                "role": "ai",
                "content": self._text,
                "citations": [
                    {"chunk_id": c.chunk_id, "doc_id": c.doc_id, "title": c.title}
                    for c in (CITATION,)
                ],
            },
            "usage": {
                "input_tokens": len(self._request.message.content.split()),
                "output_tokens": 4,
                "source": "counted",
            },
        }

    def _script(self) -> list[RunEvent]:
        events = [
            RunEvent("metadata", {"run_id": self.run_id, "thread_id": self._thread.thread_id}),
            RunEvent("custom", RETRIEVAL),
        ]
        deltas = split(self._text, DELTAS)
        if self._failing:
            return [
                *events,
                RunEvent("messages", {"id": self._ai_id, "delta": deltas[0]}),
                RunEvent("error", self._service.failure_problem()),
            ]
        events += [RunEvent("messages", {"id": self._ai_id, "delta": d}) for d in deltas]
        return [*events, RunEvent("end", self._body())]

    def _complete(self) -> dict[str, Any]:
        """Store the whole round at once (the run's atomic commit) and free the thread."""
        now = datetime.now(UTC)
        body = self._body()
        self._thread.messages += [
            TranscriptMessage(self._human_id, "human", self._request.message.content, now),
            TranscriptMessage(self._ai_id, "ai", self._text, now, (CITATION,)),
        ]
        self._thread.runs[self.run_id] = body
        self._thread.human_ids[self._human_id] = self.run_id
        self._settle()
        return body

    def _settle(self) -> None:
        if not self._settled:
            self._settled = True
            self._service.busy.pop(self._service.key(self._caller, self._thread.thread_id), None)

    async def events(self) -> AsyncIterator[RunEvent]:
        self._service.iterators_opened.append(self.run_id)
        finished = False
        try:
            for event in self._script():
                if self._service.delay:
                    await asyncio.sleep(self._service.delay)
                if event.event == "end":
                    self._complete()
                    finished = True
                elif event.event == "error":
                    self._settle()
                    finished = True
                yield event
        finally:
            if not finished:
                # The client is gone: nothing of the round is stored; the thread is free.
                self._service.iterators_closed.append(self.run_id)
                self._settle()

    def batches(self) -> AsyncIterator[list[RunEvent]]:
        return one_per_batch(self.events())

    async def result(self) -> dict[str, Any]:
        for _ in self._script():
            if self._service.delay:
                await asyncio.sleep(self._service.delay)
        if self._failing:
            self._settle()
            raise RunFailed("scripted failure")
        return self._complete()


class CompletedRun:
    """The ``RunHandle`` of a ``run_id`` already completed: its stored body, no new run."""

    def __init__(self, run_id: str, thread_id: str, body: dict[str, Any]) -> None:
        self.run_id = run_id
        self._thread_id = thread_id
        self._body = body

    async def events(self) -> AsyncIterator[RunEvent]:
        yield RunEvent("metadata", {"run_id": self.run_id, "thread_id": self._thread_id})
        yield RunEvent("end", self._body)

    def batches(self) -> AsyncIterator[list[RunEvent]]:
        return one_per_batch(self.events())

    async def result(self) -> dict[str, Any]:
        return self._body


class FakeThreadService:
    """In-memory ``ThreadService`` (user thread scope: tenant, user and thread id)."""

    def __init__(self) -> None:
        self.threads: dict[str, Thread] = {}
        self.busy: dict[str, str] = {}
        """Thread key → the run in flight (set one to simulate a run on another replica)."""
        self.memory_items: dict[tuple[str, str], MemoryView] = {}
        self.readiness: dict[str, str] = {"checkpoints": "ok", "memory": "ok"}
        self.fail = False
        self.delay = 0.0
        self.calls: list[tuple[str, Any]] = []
        self.refused: list[tuple[int, str, bool]] = []
        self.iterators_opened: list[str] = []
        self.iterators_closed: list[str] = []
        """Run ids whose event iterator was closed or cancelled before its last event."""

    # --- helpers for tests ----------------------------------------------------------------

    @staticmethod
    def key(caller: Caller, thread_id: str) -> str:
        return ThreadRef(caller.tenant_id, caller.user_id, thread_id).key

    def thread(self, caller: Caller, thread_id: str) -> Thread | None:
        return self.threads.get(self.key(caller, thread_id))

    def seed_thread(self, caller: Caller, thread_id: str, turns: int) -> Thread:
        """A thread of ``turns`` completed rounds (messages ``h1``, ``a1``, ``h2`` …)."""
        thread = self._thread(caller, thread_id)
        at = datetime(2026, 1, 1, tzinfo=UTC)
        for n in range(1, turns + 1):
            run_id = str(uuid.UUID(int=n))
            thread.messages += [
                TranscriptMessage(f"h{n}", "human", f"question {n}", at),
                TranscriptMessage(f"a{n}", "ai", f"answer {n}", at, (CITATION,)),
            ]
            thread.runs[run_id] = {"run_id": run_id, "thread_id": thread_id}
            thread.human_ids[f"h{n}"] = run_id
        return thread

    def seed_memory(self, caller: Caller, profile: int, facts: int) -> MemoryView:
        source = {"thread_id": "t1", "message_id": "h1", "at": datetime(2026, 1, 1, tzinfo=UTC)}
        view = MemoryView(
            profile=[MemoryEntry(f"p{i}", f"profile {i}", source) for i in range(profile)],
            facts=[MemoryEntry(f"f{i}", f"fact {i}", source) for i in range(facts)],
        )
        self.memory_items[(caller.tenant_id, caller.user_id)] = view
        return view

    def failure_problem(self) -> dict[str, Any]:
        return {
            "type": "urn:threadkeeper:problem:run-failed",
            "title": "Run failed",
            "status": 500,
            "detail": "The run did not complete; the thread is unchanged.",
        }

    def _thread(self, caller: Caller, thread_id: str) -> Thread:
        key = self.key(caller, thread_id)
        if key not in self.threads:
            self.threads[key] = Thread(caller.tenant_id, caller.user_id, thread_id)
        return self.threads[key]

    # --- ThreadService --------------------------------------------------------------------

    def count_refused(self, status: int, slug: str, *, deltas: bool) -> None:
        self.refused.append((status, slug, deltas))

    async def start_run(
        self, caller: Caller, thread_id: str, request: RunRequest
    ) -> FakeRun | CompletedRun:
        self.calls.append(("start_run", (caller, thread_id, request)))
        if len(request.message.content.encode()) > MAX_MESSAGE_BYTES:
            raise MessageTooLarge(len(request.message.content), MAX_MESSAGE_BYTES)
        key = self.key(caller, thread_id)
        existing = self.threads.get(key)
        if existing is not None and request.run_id in existing.runs:
            return CompletedRun(request.run_id, thread_id, existing.runs[request.run_id])
        if key in self.busy:
            raise ThreadBusy(self.busy[key])
        message_id = request.message.id
        if existing is not None and message_id is not None and message_id in existing.human_ids:
            raise DuplicateMessage(message_id, existing.human_ids[message_id])
        run_id = request.run_id or str(uuid.uuid4())
        self.busy[key] = run_id
        return FakeRun(self, caller, self._thread(caller, thread_id), request, run_id)

    async def messages(
        self, caller: Caller, thread_id: str, *, limit: int, before: str | None
    ) -> TranscriptPage:
        self.calls.append(("messages", (caller, thread_id, limit, before)))
        thread = self.thread(caller, thread_id)
        if thread is None or not thread.messages:
            raise UnknownThread(thread_id)
        return page_messages(thread.messages, limit=limit, before=before)

    async def storage(self, caller: Caller, thread_id: str) -> StorageUsage:
        """Bytes of the thread's messages as UTF-8 (``messages``) and 64 per run record."""
        self.calls.append(("storage", (caller, thread_id)))
        thread = self.thread(caller, thread_id)
        if thread is None or not thread.messages:
            raise UnknownThread(thread_id)
        return StorageUsage(
            checkpoints=sum(len(m.content.encode()) for m in thread.messages),
            run_records=64 * len(thread.runs),
            feedback=16 * len(thread.feedback),
        )

    async def delete_thread(self, caller: Caller, thread_id: str) -> None:
        self.calls.append(("delete_thread", (caller, thread_id)))
        self.threads.pop(self.key(caller, thread_id), None)

    async def add_feedback(
        self, caller: Caller, thread_id: str, run_id: str, score: int, comment: str | None
    ) -> None:
        self.calls.append(("add_feedback", (caller, thread_id, run_id, score, comment)))
        thread = self.thread(caller, thread_id)
        if thread is None or run_id not in thread.runs:
            raise UnknownRun(run_id)
        thread.feedback[run_id] = (score, comment)

    async def memory(self, caller: Caller) -> MemoryView:
        self.calls.append(("memory", caller))
        return self.memory_items.get((caller.tenant_id, caller.user_id), MemoryView([], []))

    async def reset_memory(self, caller: Caller) -> int:
        self.calls.append(("reset_memory", caller))
        view = self.memory_items.pop((caller.tenant_id, caller.user_id), MemoryView([], []))
        return len(view.profile) + len(view.facts)

    async def erase_user(self, caller: Caller) -> ErasureReceipt:
        self.calls.append(("erase_user", caller))
        mine = [
            key
            for key, t in self.threads.items()
            if (t.tenant_id, t.user_id) == (caller.tenant_id, caller.user_id)
        ]
        receipt = ErasureReceipt()
        for key in mine:
            thread = self.threads.pop(key)
            receipt = receipt + ErasureReceipt(
                threads=1, messages=len(thread.messages), feedback=len(thread.feedback)
            )
        left = {"memory": 0}  # the fake deletes everything: its verification finds nothing
        return receipt + ErasureReceipt(
            memory_items=await self.reset_memory(caller), remaining=left
        )

    async def ready(self) -> dict[str, str]:
        return dict(self.readiness)
