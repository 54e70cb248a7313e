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

from threadkeeper.domain.tokens import REPLY_PRIMING, TokenCounter, message_text

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
"""The least share of the conversation's room (the window's budget less the summary's share
and the system message, which is sent whole every time) that follow-up work keeps free: it
folds ahead once less would be free after the next ``AHEAD_RUNS`` runs (``fold_budgets``)."""

FOLD_AHEAD_HEADROOM = 0.4
"""The least share of the conversation's room a fold leaves free — made ahead by follow-up
work or by a run that must fold itself — and at least two turns more than ``FOLD_HEADROOM``
asks: a thread is folded at most every other turn (each fold is a model call)."""

AHEAD_RUNS = 3
"""How many runs ahead a fold is made. The fold is made while the next runs run: the next one
starts the instant the answer ends, and a fold takes as long as a run (a model call) and then
some (a worker must take the work first), so a fold for the run after next still races that
run's start and lost about half the time. A fold for the third run has two runs' time."""


def newest_turn_tokens(history: Sequence[BaseMessage], counter: TokenCounter) -> int:
    """The tokens of the newest whole turn of ``history`` (its human message and all that
    answered it; the one before when the newest has no answer yet): what a run adds."""
    humans = []  # the newest two human messages' positions, newest first
    for index in range(len(history) - 1, -1, -1):
        if isinstance(history[index], HumanMessage):
            humans.append(index)
            if len(humans) == 2:
                break
    if not humans:
        return 0
    begin, end = humans[0], len(history)
    if end - begin == 1 and len(humans) == 2:  # a run's own message, not answered yet
        begin, end = humans[1], humans[0]
    return sum(counter.count(message) for message in history[begin:end])


def fold_budgets(
    history: Sequence[BaseMessage], *, budget: int, system: str, counter: TokenCounter
) -> tuple[int, int]:
    """``fold_room`` for a thread's ``history`` and the system message ``system``."""
    fixed = REPLY_PRIMING + counter.count_system(system)
    return fold_room(budget, fixed, newest_turn_tokens(history, counter))


def fold_room(budget: int, fixed: int, turn: int) -> tuple[int, int]:
    """(the budget whose overflow asks for a fold ahead, the budget a fold folds for).

    ``budget`` is the window's budget less the summary's share, ``fixed`` what the system
    message takes of it and ``turn`` what a run adds (``newest_turn_tokens``). The room is
    what is left for the conversation. A fold is wanted once less than ``AHEAD_RUNS`` turns
    (the runs ahead but the last, which brings its message, and a turn's worth for the system
    message's growth: memory, documents) — and ``FOLD_HEADROOM`` of the room — would be free;
    it leaves two turns more free, and ``FOLD_AHEAD_HEADROOM`` of the room. Neither frees the
    newest turn's room: the window always holds the newest turn. Shares alone were wrong both
    ways: with a system message taking half the budget, a share of the whole budget was the
    whole room, and a share of the room may be less than the two runs a fold ahead must
    cover."""
    room = max(0, budget - fixed)
    cap = max(0, room - turn)
    want = max(int(FOLD_HEADROOM * room), AHEAD_RUNS * turn)
    leave = max(int(FOLD_AHEAD_HEADROOM * room), want + 2 * turn)
    return budget - min(want, cap), budget - min(leave, cap)


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


def ahead_reach(
    found: AheadSummary | None, summary: Summary | None, history: Sequence[BaseMessage]
) -> int | None:
    """The position in ``history`` of the newest message the fold made ahead ``found`` covers,
    when it may take the place of the state's ``summary``; else ``None``.

    It may when it was made on that summary or an earlier one and reaches further: a fold made
    on summary *b* covers the thread from its start through its message, so it covers all that
    a later summary covers when it reaches beyond it (a run may have taken an earlier fold
    made ahead, or folded itself, while this one was being made). It may not when it was made
    on a later summary than the state's, or when its message is no longer in ``history``."""
    if found is None or found.base_version > (summary.version if summary else 0):
        return None
    begin = index_of(history, summary.through_id) if summary else -1
    covered = index_of(history, found.through_id)
    if covered is None or begin is None or covered <= begin:
        return None
    return covered


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
