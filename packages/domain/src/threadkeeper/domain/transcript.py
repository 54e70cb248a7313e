"""The transcript: what ``GET /messages`` serves, and the ``TranscriptArchive`` port.

Where a profile's transcript is the checkpoint state itself, the same paging rule
(``page_messages``) runs over the messages read from state.
"""

from __future__ import annotations

import hashlib
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.domain.errors import UnknownMessage, UnknownThread
from threadkeeper.domain.tokens import message_text

MAX_PAGE = 100


class Citation(msgspec.Struct, frozen=True):
    chunk_id: str
    doc_id: str
    title: str


class TranscriptMessage(msgspec.Struct, frozen=True):
    """One bubble of the conversation: a human message or a final, non-empty AI answer."""

    id: str
    role: Literal["human", "ai"]
    content: str
    created_at: datetime
    citations: tuple[Citation, ...] = ()
    status: str | None = None
    """An answer's run status (``answered``, ``clarifying``, ``escalate``): kept with an
    archived answer so that the escalation rule still counts clarifications after a cold
    start, whatever the model. Not part of the API's transcript."""


class Round(msgspec.Struct, frozen=True):
    """A completed run: the human message and the answer, archived together or not at all."""

    run_id: str
    thread_key: str
    tenant_id: str
    user_id: str
    thread_id: str
    human: TranscriptMessage
    ai: TranscriptMessage
    summary: str | None = None
    """The thread's rolling summary after this round, if any (used by cold start)."""


class ToolInvocation(msgspec.Struct, frozen=True):
    """One tool call of a run, as the audit trail keeps it: never its arguments or output."""

    tool: str
    call_id: str
    arguments_digest: str
    duration_ms: float
    status: Literal["success", "error"]
    at: datetime


def arguments_digest(arguments: Any) -> str:
    """SHA-256 of the canonical JSON of a tool call's arguments."""
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class TranscriptPage(msgspec.Struct, frozen=True):
    messages: list[TranscriptMessage]
    next_before: str | None


def page_messages(
    messages: Sequence[TranscriptMessage], *, limit: int, before: str | None = None
) -> TranscriptPage:
    """The ``limit`` messages older than ``before`` (newest page when ``None``), oldest first.

    ``next_before`` is the cursor for the next older page, ``None`` when there is none.

    Raises:
        ValueError: ``limit`` outside 1..100.
        UnknownMessage: ``before`` is not a message of this transcript.
    """
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be within 1..{MAX_PAGE}")
    end = len(messages)
    if before is not None:
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].id == before:
                end = index
                break
        else:
            raise UnknownMessage(before)
    start = max(0, end - limit)
    page = list(messages[start:end])
    return TranscriptPage(page, next_before=page[0].id if start > 0 and page else None)


class TranscriptArchive(ABC):
    """The permanent record of completed rounds (the blog design's MySQL archive)."""

    @abstractmethod
    async def append_round(self, round_: Round, tools: Sequence[ToolInvocation] = ()) -> bool:
        """Store both messages of a round atomically, with the audit rows of its tool calls
        (kept apart from the transcript). ``False`` if the thread already holds ``run_id``
        (idempotent: a retry never duplicates a round). ``run_id`` is unique per thread
        only: the same id in another thread is another round."""

    @abstractmethod
    async def page(
        self, thread_key: str, *, limit: int, before: str | None = None
    ) -> TranscriptPage:
        """A page of the transcript, as ``page_messages`` defines it.

        Raises:
            UnknownThread: nothing is archived for ``thread_key``.
            UnknownMessage: ``before`` is not in the thread.
        """

    @abstractmethod
    async def recent(self, thread_key: str, limit: int) -> list[TranscriptMessage]:
        """The newest ``limit`` messages, oldest first (cold-start seed); empty if unknown."""

    @abstractmethod
    async def find(self, thread_key: str, ids: Sequence[str]) -> list[TranscriptMessage]:
        """The thread's archived messages with these ids, oldest first; unknown ids are
        skipped (replay of messages that compaction removed from the checkpoints)."""

    @abstractmethod
    async def latest_summary(self, thread_key: str) -> str | None:
        """The rolling summary stored with the thread's newest round that has one."""

    @abstractmethod
    async def count(self, thread_key: str) -> int:
        """How many messages the thread has archived (what deleting it deletes)."""

    @abstractmethod
    async def delete_thread(self, thread_key: str) -> int:
        """Delete the thread's rounds; the number of messages deleted (0 when already gone)."""

    @abstractmethod
    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        """Delete every round of the user in the tenant: (threads, messages) deleted."""


class InMemoryTranscriptArchive(TranscriptArchive):
    """A dict of rounds: the unit-test fake and the reference for the conformance suite."""

    def __init__(self) -> None:
        self._rounds: dict[str, list[Round]] = {}
        self._run_ids: set[tuple[str, str]] = set()
        self.tools: dict[tuple[str, str], list[ToolInvocation]] = {}
        """Audit rows by (thread key, run id)."""
        self._mutex = threading.Lock()

    async def append_round(self, round_: Round, tools: Sequence[ToolInvocation] = ()) -> bool:
        key = (round_.thread_key, round_.run_id)
        with self._mutex:
            if key in self._run_ids:
                return False
            self._run_ids.add(key)
            self._rounds.setdefault(round_.thread_key, []).append(round_)
            if tools:
                self.tools[key] = list(tools)
            return True

    def _messages(self, thread_key: str) -> list[TranscriptMessage]:
        return [m for r in self._rounds.get(thread_key, []) for m in (r.human, r.ai)]

    async def page(
        self, thread_key: str, *, limit: int, before: str | None = None
    ) -> TranscriptPage:
        if thread_key not in self._rounds:
            raise UnknownThread(thread_key)
        return page_messages(self._messages(thread_key), limit=limit, before=before)

    async def recent(self, thread_key: str, limit: int) -> list[TranscriptMessage]:
        return self._messages(thread_key)[-limit:] if limit > 0 else []

    async def find(self, thread_key: str, ids: Sequence[str]) -> list[TranscriptMessage]:
        wanted = set(ids)
        return [m for m in self._messages(thread_key) if m.id in wanted]

    async def latest_summary(self, thread_key: str) -> str | None:
        for round_ in reversed(self._rounds.get(thread_key, [])):
            if round_.summary:
                return round_.summary
        return None

    async def count(self, thread_key: str) -> int:
        return len(self._messages(thread_key))

    async def delete_thread(self, thread_key: str) -> int:
        with self._mutex:
            rounds = self._rounds.pop(thread_key, [])
            self._run_ids.difference_update((thread_key, r.run_id) for r in rounds)
            for round_ in rounds:
                self.tools.pop((thread_key, round_.run_id), None)
            return 2 * len(rounds)

    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        keys = [
            key
            for key, rounds in self._rounds.items()
            if rounds and rounds[0].tenant_id == tenant_id and rounds[0].user_id == user_id
        ]
        messages = 0
        for key in keys:
            messages += await self.delete_thread(key)
        return len(keys), messages


def stamp_of(message: BaseMessage) -> dict[str, Any]:
    """What the agent stamped on a message (``response_metadata["threadkeeper"]``: its time,
    an answer's status and citations)."""
    value = message.response_metadata.get("threadkeeper")
    return value if isinstance(value, dict) else {}


def to_transcript(messages: Sequence[BaseMessage]) -> list[TranscriptMessage]:
    """Human messages and AI messages with text, as ``GET /messages`` serves them."""
    out: list[TranscriptMessage] = []
    for message in messages:
        text = message_text(message)
        meta = stamp_of(message)
        at = datetime.fromisoformat(meta["at"]) if "at" in meta else datetime.fromtimestamp(0, UTC)
        if isinstance(message, HumanMessage):
            out.append(TranscriptMessage(str(message.id), "human", text, at))
        elif isinstance(message, AIMessage) and text.strip():
            citations = tuple(
                Citation(c["chunk_id"], c["doc_id"], c["title"]) for c in meta.get("citations", [])
            )
            status = meta.get("status")
            out.append(
                TranscriptMessage(
                    str(message.id), "ai", text, at, citations, str(status) if status else None
                )
            )
    return out


def from_transcript(message: TranscriptMessage) -> BaseMessage:
    """An archived message back as a chat message (cold start), ids, citations and the
    answer's status kept (the escalation rule counts clarifications by it)."""
    meta: dict[str, Any] = {"at": message.created_at.isoformat(), "restored": True}
    if message.role == "human":
        return HumanMessage(
            message.content, id=message.id, response_metadata={"threadkeeper": meta}
        )
    meta["citations"] = [msgspec.structs.asdict(c) for c in message.citations]
    if message.status:
        meta["status"] = message.status
    return AIMessage(message.content, id=message.id, response_metadata={"threadkeeper": meta})
