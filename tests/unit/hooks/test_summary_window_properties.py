"""The rolling summary and the window never overlap and leave no gap (issue 10).

With a real, short summary, turns already folded into it were sent again in the window:
``summarize`` reserves ``summary_tokens`` when it chooses what to fold, and ``trim`` then filled
the room the short summary left with folded turns. Over generated conversations, budgets and
summary lengths, turn after turn (the summary rolls: each call starts from the summary the
previous call stored), on both paths — ``summarize`` + ``trim`` (embedded, postgres) and
``compact`` with ``summarize`` (redis-mysql) — once the model is sent a summary:

- no message is both in the summary and in the window (the window starts after the newest
  message the summary covers);
- nothing falls between them: every earlier turn is in one or the other (the window starts
  right after it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import ModelRequest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from tests.support.scripted_model import ScriptedChatModel
from tests.unit.domain.conversations import Conversation, clean_conversations
from threadkeeper.domain.history import Window
from threadkeeper.domain.summary import Summary
from threadkeeper.domain.tokens import TiktokenCounter
from threadkeeper.hooks.compact import CompactMiddleware
from threadkeeper.hooks.settings import HookSettings
from threadkeeper.hooks.summarize import SummarizeMiddleware
from threadkeeper.hooks.trim import show_window

COUNTER = TiktokenCounter("o200k_base")
SYSTEM = "You answer insurance questions from the documents."
PROPERTY = settings(
    max_examples=settings().max_examples * 3 // 5,  # 60 in the unit suite's ``dev`` profile
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class SizedSummarizer:
    """A summary of about ``share`` × the allowed tokens, whatever it folds — a real model's
    summary is usually much shorter than the room reserved for it — and, as every
    ``Summarizer`` must, never over ``max_tokens`` (counted as the summary is sent)."""

    def __init__(self, share: float) -> None:
        self.share = share

    async def summarize(
        self, previous: str | None, messages: Sequence[BaseMessage], *, max_tokens: int
    ) -> str:
        words = max(1, int(max_tokens * self.share))
        while True:
            text = "Summary of the earlier conversation: " + " ".join(["claim"] * words)
            if COUNTER.count_system(text) <= max_tokens or words == 1:
                return text
            words -= max(1, words // 20)


def request_for(history: list[BaseMessage], summary: dict[str, Any] | None) -> Any:
    state: dict[str, Any] = {"messages": history}
    if summary is not None:
        state["summary"] = summary
    return ModelRequest(
        model=ScriptedChatModel(),
        messages=list(history),
        system_message=SystemMessage(SYSTEM),
        state=state,  # type: ignore[arg-type]
    )


def check(history: Sequence[BaseMessage], window: Window, summary: Summary | None) -> None:
    if window.summary is None or summary is None or summary.through_id is None:
        return  # no summary sent: nothing to compare
    ids = [m.id for m in history]
    # compaction removes what it folded: then the whole history is after the summary
    covered = ids.index(summary.through_id) if summary.through_id in ids else -1
    shown = [ids.index(m.id) for m in window.messages]
    assert shown, "the newest message is always shown"
    assert min(shown) > covered, (
        f"messages {sorted(i for i in shown if i <= covered)} are both in the summary (through "
        f"{covered}) and in the window"
    )
    first = window.start
    assert first == covered + 1, (
        f"messages {covered + 1}..{first - 1} are neither in the summary (through {covered}) "
        f"nor in the window (from {first})"
    )


def turns_of(conversation: Conversation) -> list[list[BaseMessage]]:
    """The conversation's messages, one list per turn (each starts on a human message)."""
    turns: list[list[BaseMessage]] = []
    for message in conversation.history:
        if isinstance(message, HumanMessage) or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


@PROPERTY
@given(
    conversation=clean_conversations(max_turns=40),
    budget=st.integers(min_value=900, max_value=6000),
    share=st.floats(min_value=0.05, max_value=1.0),
    after_turns=st.integers(min_value=0, max_value=6),
)
def test_summarize_then_trim_neither_overlap_nor_leave_a_gap(
    conversation: Conversation, budget: int, share: float, after_turns: int
) -> None:
    seen: list[Window] = []
    settings_ = HookSettings(
        budget=budget,
        counter=COUNTER,
        summary_after_turns=after_turns,
        summarizer=SizedSummarizer(share),
        observer=seen.append,
    )
    summarize = SummarizeMiddleware(settings_)
    stored: dict[str, Any] | None = None
    history: list[BaseMessage] = []
    for turn in turns_of(conversation):
        history += turn
        if not isinstance(history[-1], HumanMessage):
            continue  # only a turn's first call (its human message newest) is generated here
        request = request_for(history, stored)
        summary, fold, through, _ = summarize._to_fold(request)
        if fold:
            assert settings_.summarizer is not None
            text = asyncio.run(
                settings_.summarizer.summarize(None, fold, max_tokens=settings_.summary_tokens)
            )
            request, new = summarize._updated(request, summary, text, through)
            stored = new.to_state()
        try:
            shown = show_window(settings_, request)
        except Exception:  # the newest message alone over the budget: a 413, no window
            continue
        window = seen[-1]
        assert list(shown.messages) == list(window.messages)
        check(history, window, Summary.from_state(stored))


@PROPERTY
@given(
    conversation=clean_conversations(max_turns=40),
    budget=st.integers(min_value=900, max_value=6000),
    share=st.floats(min_value=0.05, max_value=1.0),
)
def test_compact_with_summarize_neither_overlap_nor_leave_a_gap(
    conversation: Conversation, budget: int, share: float
) -> None:
    seen: list[Window] = []
    settings_ = HookSettings(
        budget=budget,
        counter=COUNTER,
        summarizer=SizedSummarizer(share),
        system_prompt=SYSTEM,
        observer=seen.append,
    )
    compact = CompactMiddleware(settings_)
    compact.summarizes = True
    state: dict[str, Any] = {"messages": []}
    for turn in turns_of(conversation):
        state["messages"] = [*state["messages"], *turn]
        if not isinstance(state["messages"][-1], HumanMessage):
            continue
        try:
            update = asyncio.run(compact.abefore_model(state, None))  # type: ignore[arg-type]
        except Exception:
            continue
        if update is not None:
            state = {**state, "messages": list(update["messages"][1:])}  # after RemoveMessage
            if "summary" in update:
                state["summary"] = update["summary"]
        history = state["messages"]
        request = request_for(history, state.get("summary"))
        try:
            show_window(settings_, request)
        except Exception:
            continue
        check(history, seen[-1], Summary.from_state(state.get("summary")))
