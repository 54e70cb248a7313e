"""The rolling summary (ADR-0007): what dropped older turns said, folded into one text.

Once a thread has more than ``after_turns`` turns, every message that falls out of the model's
window is folded into the summary, which is sent ahead of the window. The summary is lossy by
construction; the persisted history is not touched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.domain.tokens import TokenCounter, message_text

SUMMARY_HEADING = "Summary of the earlier conversation:"


@dataclass(frozen=True, slots=True)
class Summary:
    """A rolling summary as kept in thread state (a plain mapping there)."""

    text: str
    version: int
    through_id: str | None
    """Id of the newest message the summary covers."""

    def to_state(self) -> dict[str, Any]:
        return {"text": self.text, "version": self.version, "through_id": self.through_id}

    @classmethod
    def from_state(cls, value: Mapping[str, Any] | None) -> Summary | None:
        if not value:
            return None
        return cls(str(value["text"]), int(value["version"]), value.get("through_id"))


def encode_summary(value: Mapping[str, Any] | None) -> str | None:
    """A state summary as text (the archive keeps it with the round that produced it)."""
    summary = Summary.from_state(value)
    return None if summary is None else msgspec.json.encode(summary.to_state()).decode()


def decode_summary(text: str | None) -> dict[str, Any] | None:
    """``encode_summary``'s text back as state (``None``: none, or not a summary)."""
    if not text:
        return None
    state = msgspec.json.decode(text)
    summary = Summary.from_state(state) if isinstance(state, dict) else None
    return None if summary is None else summary.to_state()


class Summarizer(Protocol):
    """Folds messages into a previous summary, within ``max_tokens``."""

    async def summarize(
        self, previous: str | None, messages: Sequence[BaseMessage], *, max_tokens: int
    ) -> str: ...


def count_turns(history: Sequence[BaseMessage]) -> int:
    return sum(1 for m in history if isinstance(m, HumanMessage))


def more_turns_than(history: Sequence[BaseMessage], turns: int) -> bool:
    """``count_turns(history) > turns``, reading only as far as it takes (a late turn's
    history is long; the answer is known after ``turns`` + 1 human messages)."""
    seen = 0
    for message in history:
        if isinstance(message, HumanMessage):
            seen += 1
            if seen > turns:
                return True
    return False


def messages_to_fold(
    history: Sequence[BaseMessage],
    window_start: int,
    summary: Summary | None,
    *,
    after_turns: int,
) -> list[BaseMessage]:
    """The messages before the window that the summary does not cover yet.

    Empty until the thread has more than ``after_turns`` turns.
    """
    if not more_turns_than(history, after_turns):
        return []
    begin = 0
    if summary is not None and summary.through_id is not None:
        for index in range(len(history) - 1, -1, -1):
            if history[index].id == summary.through_id:
                begin = index + 1
                break
    return [m for m in history[begin:window_start] if isinstance(m, HumanMessage | AIMessage)]


_SENTENCE_END = re.compile(r"(?<=[.!?؟。！？])\s*")


def first_sentence(text: str, limit: int) -> str:
    """The first sentence of ``text`` (any of fa/zh/en punctuation), at most ``limit`` chars."""
    text = " ".join(text.split())
    head = _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


@dataclass(slots=True)
class ExtractiveSummarizer:
    """Offline and deterministic: the first sentence of each folded human and AI message.

    When the result would exceed ``max_tokens``, the oldest lines after the first
    ``head_lines`` go first: the summary keeps how the conversation began (what ADR-0007's
    summary is for) and the most recent dropped context.
    """

    counter: TokenCounter
    sentence_chars: int = 160
    head_lines: int = 2

    async def summarize(
        self, previous: str | None, messages: Sequence[BaseMessage], *, max_tokens: int
    ) -> str:
        return self.fold(previous, messages, max_tokens=max_tokens)

    def _tokens(self, lines: list[str]) -> int:
        return self.counter.count_system("\n".join([SUMMARY_HEADING, *lines]))

    def _select(self, lines: list[str], max_tokens: int) -> list[str]:
        """Over the limit: the first ``head_lines`` (how the conversation began) while they
        fit, then the newest lines, newest first, while they fit. Exact counts throughout."""
        head: list[str] = []
        for line in lines[: self.head_lines]:
            if self._tokens([*head, line]) > max_tokens:
                break
            head.append(line)
        # the newest lines that fit, found by bisection (a count grows with the lines it
        # covers): a walk line by line counts the growing summary once per line, quadratic in
        # its length (6.5% of a turn late in a long thread, py-spy)
        rest = lines[self.head_lines :]
        fits, over = 0, len(rest) + 1  # ``fits`` newest lines fit; ``over`` do not
        while over - fits > 1:
            middle = (fits + over) // 2
            if self._tokens([*head, *rest[len(rest) - middle :]]) <= max_tokens:
                fits = middle
            else:
                over = middle
        return [*head, *rest[len(rest) - fits :]] if fits else head

    def fold(
        self, previous: str | None, messages: Sequence[BaseMessage], *, max_tokens: int
    ) -> str:
        lines = previous.splitlines()[1:] if previous else []
        for message in messages:
            text = message_text(message)
            if not text.strip() or (isinstance(message, AIMessage) and message.tool_calls):
                continue
            who = "User" if isinstance(message, HumanMessage) else "Assistant"
            lines.append(f"- {who}: {first_sentence(text, self.sentence_chars)}")
        if self._tokens(lines) > max_tokens:
            lines = self._select(lines, max_tokens)
        return "\n".join([SUMMARY_HEADING, *lines]) if lines else ""


# --- folding ahead of need ----------------------------------------------------------------------

FOLD_HEADROOM = 0.2
"""The share of the window's budget a fold leaves free: a run that must fold folds that much
further than it needs (so the next runs need no fold for a while), and follow-up work folds
ahead once a thread has less than this left (``app.runs.fold``)."""

FOLD_AHEAD_HEADROOM = 0.4
"""The share a fold made ahead by follow-up work leaves free: it must still cover what the
run after next needs, since the next run starts the instant the answer ends, before the fold
(a model call) is made. A run that brings more than that — a long message, documents far
longer than the last run's — folds the rest itself (and waits for it)."""


class AheadSummary(msgspec.Struct, frozen=True):
    """A fold made after a round, for the thread's next run (kept apart from the checkpoints:
    follow-up work is never a writer of the thread's state).

    It folds the thread's messages after the state's summary version ``base_version`` (0: none)
    through ``through_id`` into ``text``. The next run's ``summarize`` hook takes it when the
    state's summary is still ``base_version`` and ``through_id`` is in its history."""

    base_version: int
    through_id: str
    text: str


class SummariesAhead(Protocol):
    """Where folds made ahead are kept, one per thread (the newest)."""

    async def ahead(self, thread_key: str) -> AheadSummary | None: ...

    async def keep(
        self, thread_key: str, tenant_id: str, user_id: str, summary: AheadSummary
    ) -> None: ...


def fold_ahead_plan(
    history: Sequence[BaseMessage],
    summary: Summary | None,
    window_start: int,
    *,
    after_turns: int,
) -> tuple[list[BaseMessage], str | None]:
    """(the messages a fold ahead folds, the id of the newest it covers): those before
    ``window_start`` — where the next run's window is expected to begin — that ``summary`` does
    not cover yet; nothing until the thread has more than ``after_turns`` turns."""
    fold = messages_to_fold(history, window_start, summary, after_turns=after_turns)
    if not fold:
        return [], None
    return fold, history[window_start - 1].id


def index_of(history: Sequence[BaseMessage], message_id: str | None) -> int | None:
    """The position of the message ``message_id`` in ``history`` (newest first search)."""
    if message_id is None:
        return None
    for index in range(len(history) - 1, -1, -1):
        if history[index].id == message_id:
            return index
    return None


class InMemorySummariesAhead:
    """``SummariesAhead`` in a dict (tests, the in-memory backend)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, str, AheadSummary]] = {}

    async def ahead(self, thread_key: str) -> AheadSummary | None:
        row = self.rows.get(thread_key)
        return None if row is None else row[2]

    async def keep(
        self, thread_key: str, tenant_id: str, user_id: str, summary: AheadSummary
    ) -> None:
        self.rows[thread_key] = (tenant_id, user_id, summary)

    def forget(self, *, thread_key: str | None = None, user: tuple[str, str] | None = None) -> None:
        for key, (tenant_id, user_id, _) in list(self.rows.items()):
            if key == thread_key or (tenant_id, user_id) == user:
                del self.rows[key]

    def rows_of(self, tenant_id: str, user_id: str, thread_keys: Sequence[str]) -> int:
        keys = set(thread_keys)
        return sum(
            1
            for key, (t, u, _) in self.rows.items()
            if (t, u) == (tenant_id, user_id) or key in keys
        )
