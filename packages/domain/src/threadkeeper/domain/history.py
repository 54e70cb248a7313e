"""What the model sees: the ``HistoryPolicy`` port and the turn-window policy.

A *turn* starts at a human message and runs to the next one. Within a turn, a *step* is an AI
message together with the results of all its tool calls, or a lone message. The window is
built from whole steps and whole turns, newest first, so it always starts on a human message
and never holds a tool call without its result or a result without its call.

Pure: the policy reads the persisted history and returns a selection; it never mutates it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain import caches
from threadkeeper.domain.caches import messages_bytes
from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.tokens import (
    MESSAGE_FRAMING,
    REPLY_PRIMING,
    TokenCounter,
    content_snapshot,
)


@dataclass(frozen=True, slots=True)
class Window:
    """The model's view of a thread for one call, and what it cost."""

    messages: tuple[BaseMessage, ...]
    """The history part, oldest first (the system prompt and summary are sent before it)."""
    summary: str | None
    """The rolling summary sent with the window; ``None`` when there is none or it did not fit."""
    tokens: int
    """Everything sent: system prompt, summary, messages, framing and reply priming."""
    budget: int
    start: int
    """Index in the history of the first message shown (``len(history)`` when empty)."""
    omitted: int = 0
    """Messages at or after ``start`` left out: orphaned tool results, unanswered tool calls,
    or older steps of an oversized newest turn."""
    counter: str = field(default="")
    before_trim: int | None = None
    """Tokens of everything the window was chosen from (the same parts untrimmed), when the
    hook that made it counted them (``hooks.trim.before_trim``)."""

    @property
    def first_id(self) -> str | None:
        return self.messages[0].id if self.messages else None

    @property
    def last_id(self) -> str | None:
        return self.messages[-1].id if self.messages else None


class HistoryPolicy(Protocol):
    """Chooses the model's window from the full history under a token budget."""

    counter: TokenCounter
    _turns: TurnIndexes = field(default_factory=lambda: TurnIndexes(), repr=False, compare=False)

    def window(
        self,
        history: Sequence[BaseMessage],
        *,
        budget: int,
        system: str = "",
        summary: str | None = None,
        first: int = 0,
    ) -> Window:
        """The newest turns that fit, with the system prompt and summary; the messages before
        ``first`` (those the summary covers) are not candidates — as if the history began at
        ``first``, but ``Window.start`` counts from the history's start.

        Raises:
            MessageTooLarge: the newest human message alone exceeds ``budget``.
            ContextOverflow: the system prompt leaves no room for the newest human message.
        """
        ...


def steps_of(messages: Sequence[BaseMessage]) -> tuple[list[list[BaseMessage]], int]:
    """Group a turn's tail into complete steps; return them and how many messages were left out.

    A tool result is placed right after the AI message that called it; a result whose call is
    unknown, a duplicate result, and an AI message whose calls are not all answered are left
    out — providers reject both kinds of orphan.
    """
    steps: list[list[BaseMessage]] = []
    open_calls: dict[str, tuple[int, set[str]]] = {}  # call id -> (step index, unanswered ids)
    incomplete: set[int] = set()
    left_out = 0
    for message in messages:
        if isinstance(message, ToolMessage):
            entry = open_calls.pop(message.tool_call_id, None)
            if entry is None:
                left_out += 1
                continue
            index, pending = entry
            pending.discard(message.tool_call_id)
            steps[index].append(message)
            if not pending:
                incomplete.discard(index)
            continue
        steps.append([message])
        if isinstance(message, AIMessage) and message.tool_calls:
            index = len(steps) - 1
            call_ids = [call.get("id") for call in message.tool_calls]
            waiting = {call_id for call_id in call_ids if call_id}
            incomplete.add(index)
            if len(waiting) != len(call_ids):  # a call without an id can't be answered
                continue
            for call_id in waiting:
                open_calls[call_id] = (index, waiting)
    if incomplete:
        kept = []
        for index, step in enumerate(steps):
            if index in incomplete:
                left_out += len(step)
            else:
                kept.append(step)
        steps = kept
    return steps, left_out


@dataclass(slots=True)
class TurnWindowPolicy:
    """Keeps the newest whole turns under the budget (ADR-0007 trimming, done right).

    - The newest human message is always in the window; if it alone is over budget the call is
      refused with ``MessageTooLarge`` rather than cut.
    - The newest turn's steps are kept newest first while they fit; older turns are kept whole,
      newest first, and the first one that does not fit ends the window (no gaps).
    - The summary is dropped before any part of the newest turn would be, and older turns
      are dropped before the summary.
    """

    counter: TokenCounter
    _turns: TurnIndexes = field(default_factory=lambda: TurnIndexes(), repr=False, compare=False)

    def window(
        self,
        history: Sequence[BaseMessage],
        *,
        budget: int,
        system: str = "",
        summary: str | None = None,
        first: int = 0,
    ) -> Window:
        count = self.counter.count
        fixed = REPLY_PRIMING + self.counter.count_system(system)
        newest = _last_human_index(history)
        if newest is not None and newest < first:
            newest = None
        if newest is None:
            if fixed > budget:
                raise ContextOverflow(fixed, budget)
            return Window(
                (),
                summary=None,
                tokens=fixed,
                budget=budget,
                start=len(history),
                counter=self.counter.name,
            )
        human = history[newest]
        human_tokens = count(human)
        if human_tokens + REPLY_PRIMING > budget:
            raise MessageTooLarge(human_tokens, budget)
        if fixed + human_tokens > budget:
            raise ContextOverflow(fixed + human_tokens, budget)
        used = fixed + human_tokens

        # The newest turn comes before the summary: mid-run, the tool result the model just
        # asked for matters more than what older turns said.
        steps, omitted = steps_of(history[newest + 1 :])
        tail: list[BaseMessage] = []
        whole = True
        for index in range(len(steps) - 1, -1, -1):
            cost = sum(count(m) for m in steps[index])
            if used + cost > budget:
                omitted += sum(len(step) for step in steps[: index + 1])
                whole = False
                break
            used += cost
            tail[:0] = steps[index]
        if summary:
            summary_tokens = self.counter.count_system(summary)
            if used + summary_tokens <= budget:
                used += summary_tokens
            else:
                summary = None
        else:
            summary = None
        if not whole:
            # The newest turn alone overflows: its older steps go, and so do older turns.
            return Window(
                (human, *tail),
                summary=summary,
                tokens=used,
                budget=budget,
                start=newest,
                omitted=omitted,
                counter=self.counter.name,
            )

        # The whole newest turn fits; take older turns whole, newest first, while they fit:
        # from the thread's turn index, which a late turn extends by its new turns only, so a
        # late turn's window costs no pass over the history (issue 12). The whole history is
        # indexed, ``first`` or not: a rolling summary moves ``first`` every turn.
        indexed = self._turns.of(history, newest, count)
        oldest = indexed.oldest_taken(budget - used, first)
        # the turns taken and the one before them (which did not fit) must cost what they
        # were indexed at; older turns do not change which ones fit
        if not indexed.unchanged_from(history, indexed.begins[oldest - 1] if oldest else 0):
            indexed = self._turns.afresh(history, newest, count)
            oldest = indexed.oldest_taken(budget - used, first)
        used += indexed.cost_from(oldest)
        omitted += indexed.omitted_from(oldest)
        return Window(
            (*indexed.messages_from(oldest, history, newest), human, *tail),
            summary=summary,
            tokens=used,
            budget=budget,
            start=indexed.begins[oldest] if oldest < len(indexed.begins) else newest,
            omitted=omitted,
            counter=self.counter.name,
        )


_INDEXED_THREADS = 256
"""Histories a :class:`TurnIndexes` keeps an index of (one per thread in flight, and then
some); when full it is emptied, as the other per-message memos are."""
INDEXED_BYTES = 64 << 20
"""... or when the messages its indexes hold take more bytes than this (``caches.
message_bytes``: 64 MiB)."""


@dataclass(frozen=True, slots=True)
class TurnIndex:
    """The whole turns of ``history[:end]`` that a window may take, oldest first.

    A turn runs from a human message to the next (``end`` is a human message's index, the
    newest turn's); turns with tool steps are the turn without its orphans (``_whole_turn``).
    ``prefix[i]`` is the cost of turns ``0 .. i - 1``, so the turns from ``i`` on cost
    ``prefix[-1] - prefix[i]``: the window's older turns are the longest run of newest turns
    whose cost fits, found by bisection instead of a pass back over the history.
    """

    messages: tuple[BaseMessage, ...]
    """``history[:end + 1]`` as indexed: the same objects in the same places make it valid."""
    contents: tuple[object, ...]
    """Each of ``messages``' content when indexed (an assignment replaces it)."""
    calls: tuple[object, ...]
    """Each of ``messages``' tool calls when indexed."""
    begins: tuple[int, ...]
    """Each turn's human message, in the history."""
    prefix: tuple[int, ...]
    """Cost of the turns before each turn, and of all of them last (``len(begins) + 1``)."""
    omitted: tuple[int, ...]
    """Messages the turns before each turn leave out, as ``prefix`` (orphans, unanswered)."""
    whole: dict[int, tuple[int, ...]]
    """The turns that are not a plain slice of the history (orphans left out), by position:
    the indexes of the messages they keep."""
    size: int = 0
    """The bytes of ``messages`` (``caches.message_bytes``)."""

    @property
    def end(self) -> int:
        return len(self.messages) - 1

    def oldest_taken(self, room: int, first: int) -> int:
        """The oldest turn such that it and every newer one cost at most ``room`` together,
        and that begins at or after ``first``."""
        fitting = bisect_left(self.prefix, self.prefix[-1] - room, 0, len(self.begins))
        return max(fitting, bisect_left(self.begins, first))

    def unchanged_from(self, history: Sequence[BaseMessage], position: int) -> bool:
        """Whether the indexed messages from ``position`` on still have the content and tool
        calls they were indexed with (``history`` holds them at the same places)."""
        contents, calls = content_snapshot(history[position : len(self.messages)])
        return contents == self.contents[position:] and calls == self.calls[position:]

    def cost_from(self, first: int) -> int:
        return self.prefix[-1] - self.prefix[first]

    def omitted_from(self, first: int) -> int:
        return self.omitted[-1] - self.omitted[first]

    def messages_from(
        self, first: int, history: Sequence[BaseMessage], newest: int
    ) -> tuple[BaseMessage, ...]:
        """The messages of turns ``first ..`` of ``history``, oldest first (the newest human
        message and the steps after it are the caller's)."""
        if first >= len(self.begins):
            return ()
        begin = self.begins[first]
        if not self.whole or next(reversed(self.whole)) < first:  # plain turns: one slice
            return tuple(history[begin:newest])
        ends = (*self.begins[first + 1 :], newest)
        out: list[BaseMessage] = []
        for at, stop in zip(range(first, len(self.begins)), ends, strict=True):
            kept = self.whole.get(at)
            if kept is None:
                out.extend(history[self.begins[at] : stop])
            else:
                out.extend(history[i] for i in kept)
        return tuple(out)


class TurnIndexes:
    """A :class:`TurnIndex` per history, found again by the history's first message and
    extended by the turns a later call's history adds after the indexed ones.

    An index is used only for a history whose first ``end + 1`` messages are the messages it
    indexed (the same objects, or equal ones; a message replaced, a shorter or rewritten
    history, is indexed afresh); the caller checks that the turns it takes, and the one before
    them, still have the content they were indexed with (``TurnIndex.unchanged_from``: a
    message given new content in place) and has the history indexed afresh otherwise — the
    turns before those do not change which turns fit. Indexes are replaced, never changed in
    place, so a reader never sees one half extended. Emptied when full (``_INDEXED_THREADS``
    histories, or their messages over :data:`INDEXED_BYTES`) and on every deletion
    (``caches.forget``: an index says nothing of its thread).
    """

    __slots__ = ("__weakref__", "_bytes", "_known")

    def __init__(self) -> None:
        self._known: dict[int, TurnIndex] = {}
        self._bytes = 0
        caches.register(self)

    def of(
        self, history: Sequence[BaseMessage], newest: int, count: Callable[[BaseMessage], int]
    ) -> TurnIndex:
        """The index of the turns of ``history[:newest]`` (``newest``: the newest human
        message's index)."""
        if newest == 0:
            return _EMPTY
        key = id(history[0])
        known = self._known.get(key)
        if known is not None and not self._valid(known, history, newest):
            known = None
        if known is not None and known.end == newest:
            return known
        return self._keep(key, _extend(known, history, newest, count))

    def afresh(
        self, history: Sequence[BaseMessage], newest: int, count: Callable[[BaseMessage], int]
    ) -> TurnIndex:
        """The index of ``history`` built anew (an indexed message was given new content)."""
        return self._keep(id(history[0]), _extend(None, history, newest, count))

    def _keep(self, key: int, index: TurnIndex) -> TurnIndex:
        replaced = self._known.get(key)
        held = self._bytes - (replaced.size if replaced is not None else 0)
        if len(self._known) >= _INDEXED_THREADS or held + index.size > INDEXED_BYTES:
            self._known, held = {}, 0
        self._known[key] = index
        self._bytes = held + index.size
        return index

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        self._known, self._bytes = {}, 0

    @property
    def size(self) -> int:
        """The bytes of the messages the indexes hold (``caches.message_bytes``)."""
        return self._bytes

    @staticmethod
    def _valid(index: TurnIndex, history: Sequence[BaseMessage], newest: int) -> bool:
        end = index.end
        return end <= newest and tuple(history[: end + 1]) == index.messages

    def __len__(self) -> int:
        return len(self._known)


_EMPTY = TurnIndex((), (), (), (), (0,), (0,), {})


def _extend(
    known: TurnIndex | None,
    history: Sequence[BaseMessage],
    newest: int,
    count: Callable[[BaseMessage], int],
) -> TurnIndex:
    """``known`` (or nothing) extended by the turns of ``history`` up to ``newest``."""
    if known is None:  # messages before the first human one are never shown: no turn
        start = 0
        begins: list[int] = []
        prefix, omitted = [0], [0]
        whole: dict[int, tuple[int, ...]] = {}
    else:
        start = known.end
        begins, prefix = list(known.begins), list(known.prefix)
        omitted, whole = list(known.omitted), dict(known.whole)
    humans = [i for i in range(start, newest) if isinstance(history[i], HumanMessage)]
    for begin, end in zip(humans, [*humans[1:], newest][: len(humans)], strict=True):
        turn: Sequence[BaseMessage] = history[begin:end]
        turn_omitted = 0
        if any(
            isinstance(m, ToolMessage) or (isinstance(m, AIMessage) and m.tool_calls) for m in turn
        ):
            turn, turn_omitted = _whole_turn(history, begin, end)
            positions = {id(m): i for i, m in enumerate(history[begin:end], begin)}
            whole[len(begins)] = tuple(positions[id(m)] for m in turn)
        begins.append(begin)
        prefix.append(prefix[-1] + sum(map(count, turn)))
        omitted.append(omitted[-1] + turn_omitted)
    part = tuple(history[: newest + 1])
    if known is None:
        contents, calls = content_snapshot(part)
        size = messages_bytes(part)
    else:  # the indexed part's (checked where a window uses it) and the new messages'
        new = part[len(known.messages) :]
        new_contents, new_calls = content_snapshot(new)
        contents, calls = known.contents + new_contents, known.calls + new_calls
        size = known.size + messages_bytes(new)
    return TurnIndex(
        part, contents, calls, tuple(begins), tuple(prefix), tuple(omitted), whole, size
    )


def _whole_turn(
    history: Sequence[BaseMessage], begin: int, end: int
) -> tuple[Sequence[BaseMessage], int]:
    """``history[begin:end]`` (a human message and its turn) without orphans."""
    turn = history[begin:end]
    for message in turn:
        if isinstance(message, ToolMessage) or (
            isinstance(message, AIMessage) and message.tool_calls
        ):
            steps, omitted = steps_of(turn[1:])
            return [turn[0], *(m for step in steps for m in step)], omitted
    return turn, 0


def _last_human_index(history: Sequence[BaseMessage], upto: int | None = None) -> int | None:
    index = len(history) - 1 if upto is None else upto
    while index >= 0:
        if isinstance(history[index], HumanMessage):
            return index
        index -= 1
    return None


def window_tokens(window: Window, counter: TokenCounter, system: str = "") -> int:
    """Recount a window from scratch — the check the property tests and replay use."""
    total = REPLY_PRIMING + counter.count_system(system)
    if window.summary:
        total += counter.count_system(window.summary)
    return total + sum(counter.count(m) for m in window.messages)


__all__ = [
    "MESSAGE_FRAMING",
    "HistoryPolicy",
    "TurnWindowPolicy",
    "Window",
    "steps_of",
    "window_tokens",
]
