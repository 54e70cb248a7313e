"""Runs: the per-run record of what the model saw, its final body, and feedback on it.

A run record makes three things possible: an idempotent retry (a completed ``run_id`` returns
its stored final body), ``threadkeeper replay`` (the exact model input, rebuilt), and feedback
(which must name a run that exists).
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from threadkeeper.domain.compact import Segment, decode_window
from threadkeeper.domain.errors import DomainError
from threadkeeper.domain.prompt import DOCUMENTS_OPEN, DOCUMENTS_REF, MEMORY_CLOSE, MEMORY_OPEN

RunStatus = Literal["answered", "clarifying", "escalate"]


class UnknownRun(DomainError):
    """No such run in this thread (HTTP 404)."""


class IdempotencyMismatch(DomainError):
    """A ``run_id`` already completed in this thread arrived with another request (HTTP 409).

    ``run_id`` is an idempotency key scoped to the thread: an identical retry gets the stored
    answer; the same key with another message content or message id is refused, naming the
    field that differs (never what the stored request said).
    """

    def __init__(self, run_id: str, field: str) -> None:
        super().__init__(
            f"run {run_id} already completed in this thread with another {field}; "
            "use a new run_id for a new message"
        )
        self.run_id = run_id
        self.field = field


def content_digest(content: str) -> str:
    """What a run record keeps of its human message to recognise a retry: a SHA-256."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


FORGOTTEN = "[forgotten: the user reset their memory]"


def stored_prompt(system_prompt: str) -> str:
    """The system prompt as a run record keeps it: the retrieved documents' text replaced by
    ``DOCUMENTS_REF`` (the record lists their ``chunk_ids``; replay renders them again from the
    knowledge base). Keeps the record small — the documents are most of the prompt."""
    start = system_prompt.rfind(DOCUMENTS_OPEN)
    if start < 0:
        return system_prompt
    return system_prompt[:start] + DOCUMENTS_REF


def without_memory(record: RunRecord) -> RunRecord:
    """``record`` with what it held of the user's memory removed: the values in the system
    prompt's ``<memory>`` block and the profile in an escalation's ``handoff_context``.

    The keys and versions stay in ``memory_keys`` (what the run read, not what it said).
    The ``<documents>`` block follows the memory block and its text is escaped, so the last
    ``</memory>`` before it closes the block even if a remembered value contains one.
    """
    prompt = record.system_prompt
    start = prompt.find(MEMORY_OPEN)
    if start >= 0:
        documents = prompt.rfind(DOCUMENTS_OPEN)
        end = prompt.rfind(MEMORY_CLOSE, start, documents if documents > start else len(prompt))
        if end > start:
            prompt = prompt[: start + len(MEMORY_OPEN)] + FORGOTTEN + prompt[end:]
    response = record.response
    handoff = response.get("handoff_context")
    if isinstance(handoff, dict) and handoff.get("profile"):
        response = {**response, "handoff_context": {**handoff, "profile": []}}
    if prompt == record.system_prompt and response is record.response:
        return record
    return msgspec.structs.replace(record, system_prompt=prompt, response=response)


class ModelCall(msgspec.Struct, frozen=True, omit_defaults=True):
    """One model call of a run: the window it was shown.

    A record names the window either by ``message_ids`` (records written before windows were
    compact, and ``Replay`` records, decoded) or by ``window``: segments of the thread's
    order relative to the run's human message (``domain.compact.encode_window``), with
    ``message_ids`` empty.
    """

    message_ids: tuple[str, ...]
    summary: str | None
    tokens: int
    budget: int
    counter: str
    window: tuple[Segment, ...] | None = None

    def ids(self, order: Sequence[str], anchor: str) -> list[str]:
        """The ids of the messages shown, given the thread's order (``thread_order``)."""
        if self.window is None:
            return list(self.message_ids)
        return decode_window(self.window, order, anchor)


class RunRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    run_id: str
    thread_key: str
    tenant_id: str
    user_id: str
    thread_id: str
    human_message_id: str
    status: RunStatus
    created_at: datetime
    response: dict[str, Any]
    """The final body (``end`` event / JSON-mode response) exactly as sent."""
    system_prompt: str
    """The system message the model got at the start of the run (prompt and memory), its
    documents block stored as ``DOCUMENTS_REF`` (``stored_prompt``; texts via ``chunk_ids``)."""
    prompt_version: str
    chunk_ids: tuple[str, ...] = ()
    memory_keys: tuple[str, ...] = ()
    """``kind/key@updated_at`` of each memory item the run read."""
    model_calls: tuple[ModelCall, ...] = ()
    checkpoint_id: str | None = None
    """The thread's checkpoint after the run (where replay reads the messages)."""
    content_digest: str = ""
    """``content_digest`` of the human message ("" in records written before it was kept)."""
    message_id_given: bool = False
    """Whether the caller named the human message's id (else threadkeeper made one up, and a
    retry without one is not a different request)."""

    def mismatch(self, content: str, message_id: str | None) -> str | None:
        """The request field in which a retry of this run differs from it, if any."""
        if message_id is not None and message_id != self.human_message_id:
            return "message.id"
        if message_id is None and self.message_id_given:
            return "message.id"
        if self.content_digest and content_digest(content) != self.content_digest:
            return "message.content"
        return None


class Feedback(msgspec.Struct, frozen=True):
    run_id: str
    thread_key: str
    tenant_id: str
    user_id: str
    score: Literal[1, -1]
    comment: str | None
    at: datetime


RunCursor = tuple[datetime, str, str]
"""Where a page of ``RunRecords.since`` ended: the last record's (``created_at``,
``thread_key``, ``run_id``) — the order the records are listed in (``cursor_of``)."""

EXPORT_PAGE = 200
"""Records per page when every record since a time is read (``record_pages``)."""


def cursor_of(record: RunRecord) -> RunCursor:
    return (record.created_at, record.thread_key, record.run_id)


def _utc(value: datetime) -> datetime:
    """An aware time in UTC (a naive one is taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class RunRecords(ABC):
    """Per-run records and feedback, scoped by thread key."""

    @abstractmethod
    async def save(self, record: RunRecord) -> bool:
        """Store a completed run; ``False`` when ``run_id`` is already stored (kept as is)."""

    @abstractmethod
    async def get(self, thread_key: str, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    async def by_human_message(self, thread_key: str, message_id: str) -> RunRecord | None:
        """The completed run whose human message has this id."""

    @abstractmethod
    async def add_feedback(self, feedback: Feedback) -> None:
        """Record feedback on a stored run (a later one for the same run replaces it).

        Raises:
            UnknownRun: the run is not stored for this thread.
        """

    @abstractmethod
    async def feedback_of(self, runs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Feedback]:
        """The feedback on each of ``runs`` (``(thread_key, run_id)``) that has some, by run
        (one page of ``since``: export)."""

    @abstractmethod
    async def feedback_count(self, thread_key: str) -> int:
        """How many feedback items the thread has (what deleting it deletes)."""

    @abstractmethod
    async def user_feedback(self, tenant_id: str, user_id: str) -> list[Feedback]:
        """The user's feedback in the tenant, oldest first (export)."""

    @abstractmethod
    async def user_newest(self, tenant_id: str, user_id: str) -> datetime | None:
        """When the user's newest run in the tenant was recorded (``None``: none recorded)."""

    @abstractmethod
    async def user_threads(self, tenant_id: str, user_id: str) -> list[str]:
        """Keys of the threads with run records of the user in the tenant."""

    @abstractmethod
    async def delete_thread(self, thread_key: str) -> tuple[int, int]:
        """Delete the thread's run records and feedback: (runs, feedback) deleted."""

    @abstractmethod
    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        """Delete the user's run records and feedback in the tenant: (runs, feedback)."""

    @abstractmethod
    async def forget_memory(self, tenant_id: str, user_id: str) -> int:
        """Remove what the user's run records hold of their memory (``without_memory``), when
        the user resets it; how many records changed."""

    @abstractmethod
    async def since(
        self,
        cutoff: datetime,
        *,
        tenant_id: str | None = None,
        after: RunCursor | None = None,
        limit: int = EXPORT_PAGE,
    ) -> list[RunRecord]:
        """One page of the records stored at or after ``cutoff`` (inclusive: a record whose
        ``created_at`` equals it is listed), of one tenant or of all, in the order of
        (``created_at``, ``thread_key``, ``run_id``) — the key order the store keeps, which
        need not be Python's for the two strings; at most ``limit`` of them, those after
        ``after`` (exclusive: the ``cursor_of`` the previous page's last record). Records of
        deleted threads and erased users are gone, so never listed (``record_pages``)."""

    async def kept_texts(self, thread_key: str) -> int:
        """How many texts the thread's records keep apart from them (content-addressed
        summaries and prompts, stored once per thread); 0 where records hold their texts."""
        return 0


async def record_pages(
    runs: RunRecords,
    cutoff: datetime,
    *,
    tenant_id: str | None = None,
    page: int = EXPORT_PAGE,
) -> AsyncIterator[list[RunRecord]]:
    """Every record stored at or after ``cutoff``, oldest first, a page (one ``since``) at a
    time: at most ``page`` records are held. A page shorter than ``page`` is the last one
    (so ``N`` records take ``N // page + 1`` reads); an empty one is not yielded."""
    after: RunCursor | None = None
    while True:
        records = await runs.since(cutoff, tenant_id=tenant_id, after=after, limit=page)
        if records:
            yield records
        if len(records) < page:
            return
        after = cursor_of(records[-1])


class InMemoryRunRecords(RunRecords):
    """Dicts: the unit-test fake and the reference for the conformance suite."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], RunRecord] = {}
        self._feedback: dict[tuple[str, str], Feedback] = {}
        self._mutex = threading.Lock()

    async def save(self, record: RunRecord) -> bool:
        with self._mutex:
            key = (record.thread_key, record.run_id)
            if key in self._runs:
                return False
            self._runs[key] = record
            return True

    async def get(self, thread_key: str, run_id: str) -> RunRecord | None:
        return self._runs.get((thread_key, run_id))

    async def since(
        self,
        cutoff: datetime,
        *,
        tenant_id: str | None = None,
        after: RunCursor | None = None,
        limit: int = EXPORT_PAGE,
    ) -> list[RunRecord]:
        cutoff = _utc(cutoff)
        start = None if after is None else (_utc(after[0]), after[1], after[2])
        found = sorted(
            (
                r
                for r in list(self._runs.values())
                if _utc(r.created_at) >= cutoff and (tenant_id is None or r.tenant_id == tenant_id)
            ),
            key=lambda r: (_utc(r.created_at), r.thread_key, r.run_id),
        )
        if start is not None:
            found = [r for r in found if (_utc(r.created_at), r.thread_key, r.run_id) > start]
        return found[:limit]

    async def by_human_message(self, thread_key: str, message_id: str) -> RunRecord | None:
        for (key, _), record in self._runs.items():
            if key == thread_key and record.human_message_id == message_id:
                return record
        return None

    async def add_feedback(self, feedback: Feedback) -> None:
        if (feedback.thread_key, feedback.run_id) not in self._runs:
            raise UnknownRun(feedback.run_id)
        self._feedback[(feedback.thread_key, feedback.run_id)] = feedback

    async def feedback_of(self, runs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Feedback]:
        return {run: self._feedback[run] for run in runs if run in self._feedback}

    async def feedback_count(self, thread_key: str) -> int:
        return sum(1 for key in self._feedback if key[0] == thread_key)

    async def user_feedback(self, tenant_id: str, user_id: str) -> list[Feedback]:
        mine = [
            f for f in self._feedback.values() if (f.tenant_id, f.user_id) == (tenant_id, user_id)
        ]
        return sorted(mine, key=lambda f: (f.at, f.run_id))

    async def user_newest(self, tenant_id: str, user_id: str) -> datetime | None:
        times = [
            r.created_at
            for r in self._runs.values()
            if (r.tenant_id, r.user_id) == (tenant_id, user_id)
        ]
        return max(times, default=None)

    async def user_threads(self, tenant_id: str, user_id: str) -> list[str]:
        return sorted(
            {
                r.thread_key
                for r in self._runs.values()
                if (r.tenant_id, r.user_id) == (tenant_id, user_id)
            }
        )

    async def delete_thread(self, thread_key: str) -> tuple[int, int]:
        with self._mutex:
            runs = [k for k in self._runs if k[0] == thread_key]
            feedback = [k for k in self._feedback if k[0] == thread_key]
            for k in runs:
                del self._runs[k]
            for k in feedback:
                del self._feedback[k]
            return len(runs), len(feedback)

    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        keys = {
            r.thread_key
            for r in self._runs.values()
            if (r.tenant_id, r.user_id) == (tenant_id, user_id)
        }
        runs = feedback = 0
        for key in keys:
            r, f = await self.delete_thread(key)
            runs, feedback = runs + r, feedback + f
        return runs, feedback

    async def forget_memory(self, tenant_id: str, user_id: str) -> int:
        changed = 0
        with self._mutex:
            for key, record in list(self._runs.items()):
                if (record.tenant_id, record.user_id) != (tenant_id, user_id):
                    continue
                redacted = without_memory(record)
                if redacted is not record:
                    self._runs[key] = redacted
                    changed += 1
        return changed
