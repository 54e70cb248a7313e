"""What the model sees: the ``HistoryPolicy`` port and the turn-window policy.

A *turn* starts at a human message and runs to the next one. Within a turn, a *step* is an AI
message together with the results of all its tool calls, or a lone message. The window is
built from whole steps and whole turns, newest first, so it always starts on a human message
and never holds a tool call without its result or a result without its call.

Pure: the policy reads the persisted history and returns a selection; it never mutates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.tokens import MESSAGE_FRAMING, REPLY_PRIMING, TokenCounter


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

    def window(
        self,
        history: Sequence[BaseMessage],
        *,
        budget: int,
        system: str = "",
        summary: str | None = None,
    ) -> Window:
        """The newest turns that fit, with the system prompt and summary.

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

    def window(
        self,
        history: Sequence[BaseMessage],
        *,
        budget: int,
        system: str = "",
        summary: str | None = None,
    ) -> Window:
        count = self.counter.count
        fixed = REPLY_PRIMING + self.counter.count_system(system)
        newest = _last_human_index(history)
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

        # The whole newest turn fits; take older turns whole, newest first, while they fit.
        # One pass back over the history: a late turn's window is most of it (issue 12).
        turns: list[Sequence[BaseMessage]] = []
        start = end = newest
        cost, steps_in_turn = 0, False
        for begin in range(newest - 1, -1, -1):
            message = history[begin]
            if not isinstance(message, HumanMessage):
                cost += count(message)
                steps_in_turn = (
                    steps_in_turn
                    or isinstance(message, ToolMessage)
                    or bool(isinstance(message, AIMessage) and message.tool_calls)
                )
                continue
            if steps_in_turn:
                turn, turn_omitted = _whole_turn(history, begin, end)
                cost = sum(count(m) for m in turn)
            else:
                turn, turn_omitted = history[begin:end], 0
                cost += count(message)
            if used + cost > budget:
                break
            used += cost
            turns.append(turn)
            omitted += turn_omitted
            start = end = begin
            cost, steps_in_turn = 0, False
        return Window(
            (*(m for turn in reversed(turns) for m in turn), human, *tail),
            summary=summary,
            tokens=used,
            budget=budget,
            start=start,
            omitted=omitted,
            counter=self.counter.name,
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
