"""Folds made ahead of need keep the window's invariant (issue 27).

After a round, follow-up work folds the thread's older turns into an ``AheadSummary`` row
(``app.runs.fold.SummaryJob``); the next run's ``summarize`` hook takes it when it continues the
state's summary and covers what that run must fold, or folds the rest onto it. Over generated
conversations, budgets and summary lengths, with the fold ahead made after some rounds and not
others (a worker that is behind), turn after turn:

- no message is both in the summary and in the window, and nothing falls between them;
- the model is never sent more than the budget;
- a run that finds a fold made ahead of its own need makes no summary call of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables.config import var_child_runnable_config

from tests.unit.domain.conversations import Conversation, clean_conversations
from tests.unit.hooks.test_summary_window_properties import (
    COUNTER,
    PROPERTY,
    SYSTEM,
    SizedSummarizer,
    check,
    request_for,
    turns_of,
)
from threadkeeper.app.runs.fold import SummaryJob
from threadkeeper.domain.followups import SUMMARY, FollowUp
from threadkeeper.domain.history import Window
from threadkeeper.domain.summary import InMemorySummariesAhead, Summary
from threadkeeper.hooks.settings import HookSettings
from threadkeeper.hooks.summarize import SummarizeMiddleware
from threadkeeper.hooks.trim import show_window

THREAD = "acme|u1|t1"


class CountingSummarizer(SizedSummarizer):
    """``SizedSummarizer`` that counts its calls and remembers what it was asked to fold."""

    def __init__(self, share: float) -> None:
        super().__init__(share)
        self.calls: list[tuple[str | None, list[str | None]]] = []

    async def summarize(
        self, previous: str | None, messages: Sequence[BaseMessage], *, max_tokens: int
    ) -> str:
        self.calls.append((previous, [m.id for m in messages]))
        return await super().summarize(previous, messages, max_tokens=max_tokens)


class StateAgent:
    """What ``SummaryJob`` reads of the agent: the thread's state."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {"messages": []}

    async def aget_state(self, config: dict[str, Any]) -> Any:
        assert config["configurable"]["thread_id"] == THREAD
        return type("State", (), {"values": self.values})()


def job() -> FollowUp:
    return FollowUp(
        id=1,
        kind=SUMMARY,
        thread_key=THREAD,
        tenant_id="acme",
        user_id="u1",
        run_id="r",
        attempts=1,
        lease="l",
        enqueued_at=datetime.now(UTC),
    )


async def call(
    summarize: SummarizeMiddleware, settings_: HookSettings, request: ModelRequest[Any]
) -> tuple[ModelRequest[Any], dict[str, Any] | None]:
    """The request the model would be sent, and the summary the call stores (if it changed)."""
    sent: list[ModelRequest[Any]] = []

    async def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        sent.append(request)
        return ModelResponse(result=[AIMessage("ok")])

    token = var_child_runnable_config.set({"configurable": {"thread_id": THREAD}})
    try:
        response = await summarize.awrap_model_call(request, handler)
    finally:
        var_child_runnable_config.reset(token)
    stored = None
    if isinstance(response, ExtendedModelResponse) and response.command is not None:
        stored = dict(response.command.update)["summary"]  # type: ignore[arg-type]
    return sent[0], stored


@settings(PROPERTY, max_examples=max(10, settings().max_examples // 5))  # 20 in ``dev``
@given(
    conversation=clean_conversations(max_turns=24),
    budget=st.integers(min_value=900, max_value=6000),
    share=st.floats(min_value=0.05, max_value=1.0),
    after_turns=st.integers(min_value=0, max_value=6),
    worker=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_folds_ahead_neither_overlap_nor_leave_a_gap_nor_exceed_the_budget(
    conversation: Conversation,
    budget: int,
    share: float,
    after_turns: int,
    worker: list[bool],
) -> None:
    seen: list[Window] = []
    events: list[str] = []
    summarizer = CountingSummarizer(share)
    ahead = InMemorySummariesAhead()
    settings_ = HookSettings(
        budget=budget,
        counter=COUNTER,
        summary_after_turns=after_turns,
        summarizer=summarizer,
        system_prompt=SYSTEM,
        observer=seen.append,
        on_event=events.append,
        ahead=ahead,
    )
    summarize = SummarizeMiddleware(settings_)
    agent = StateAgent()
    folds = SummaryJob(agent, settings_, ahead)
    stored: dict[str, Any] | None = None
    history: list[BaseMessage] = []
    for index, turn in enumerate(turns_of(conversation)):
        if not isinstance(turn[0], HumanMessage):
            continue
        history += turn[:1]
        calls, noted = len(summarizer.calls), len(events)
        try:
            request, new = asyncio.run(call(summarize, settings_, request_for(history, stored)))
            shown = show_window(settings_, request)
        except Exception:  # the newest message alone over the budget: a 413, no window
            history = history[:-1]
            continue
        window = seen[-1]
        assert list(shown.messages) == list(window.messages)
        assert window.tokens <= budget, f"{window.tokens} tokens sent, budget {budget}"
        if new is not None:
            stored = new
        check(history, window, Summary.from_state(stored))
        if events[noted:] == ["summary_ahead"]:
            assert len(summarizer.calls) == calls, "a fold made ahead was taken: no call"
            assert new is not None
        history += turn[1:]
        agent.values = {"messages": list(history), **({"summary": stored} if stored else {})}
        if worker[index % len(worker)] and folds.wanted(agent.values):
            write = asyncio.run(folds.prepare(job(), last=False))
            if write is not None:
                asyncio.run(write())
