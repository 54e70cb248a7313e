"""``HistoryPolicy`` conformance: the model's window under a token budget.

For every budget from "only the newest message fits" to "everything fits": never over budget
in exact tokens (recounted from ``count_text``, not from the counter's cache), starting on a
human message (the system prompt and summary are sent ahead of it), no orphaned tool call or
tool result, the newest turn kept (whole when it fits), older turns whole and without gaps,
deterministic, and the history never mutated. A newest message that alone exceeds the budget
is refused with a domain error, never cut.

The conversations are built here (fa / zh / en text, parallel tool calls whose results arrive
out of order, a system prompt and a rolling summary); ``threadkeeper.conformance.compactor`` uses
them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.errors import ContextOverflow, DomainError, MessageTooLarge
from threadkeeper.domain.history import HistoryPolicy, Window
from threadkeeper.domain.tokens import (
    MESSAGE_FRAMING,
    REPLY_PRIMING,
    TOOL_CALL_FRAMING,
    TokenCounter,
    message_text,
    tool_call_text,
)

TEXTS = (
    "How do I renew my health insurance policy before it expires next month?",
    "سلام، می‌خواهم قرارداد بیمه درمان تکمیلی‌ام را تمدید کنم. هزینه‌اش چقدر است؟",
    "你好，我想续保我的医疗保险，请问费用是多少？材料已经准备好了。",
    "Claim #۱۲۳۴ — 理赔状态 pending; لطفاً check 2024-05-01 and the premium.",
)
SYSTEM = "You answer insurance questions in the user's language. پاسخ کوتاه بده. 请简短回答。"
SUMMARY = (
    "Summary of the earlier conversation:\n- User: asked whether dental care is covered.\n"
    "- Assistant: 牙科保险 is part of the family plan; بیمه دندان‌پزشکی جداست."
)


# --- conversations -----------------------------------------------------------------------------


def text(n: int, repeat: int = 1) -> str:
    return " ".join([TEXTS[n % len(TEXTS)]] * repeat)


def turn(n: int, *, tools: bool, result_repeat: int = 4) -> list[BaseMessage]:
    """Turn ``n``: a human message, then (``tools``) an AI message with two parallel tool calls
    whose results arrive in reverse order, then a plain answer."""
    messages: list[BaseMessage] = [HumanMessage(text(n), id=f"h{n}")]
    if tools:
        calls = [
            {"name": "search_policies", "args": {"query": text(n + 1)}, "id": f"c{n}a"},
            {"name": "get_claim_status", "args": {"claim": f"{n}", "locale": "fa"}, "id": f"c{n}b"},
        ]
        messages += [
            AIMessage(text(n + 2) if n % 3 else "", tool_calls=calls, id=f"a{n}call"),
            ToolMessage(text(n + 3, result_repeat), tool_call_id=f"c{n}b", id=f"t{n}b"),
            ToolMessage(text(n + 1, result_repeat), tool_call_id=f"c{n}a", id=f"t{n}a"),
        ]
    messages.append(AIMessage(text(n + 1), id=f"a{n}"))
    return messages


def conversation(turns: int = 6, *, result_repeat: int = 4) -> list[BaseMessage]:
    """``turns`` turns, every other one with parallel tool calls; the newest has tool calls."""
    history: list[BaseMessage] = []
    for n in range(turns):
        history += turn(n, tools=(turns - 1 - n) % 2 == 0, result_repeat=result_repeat)
    return history


def corrupted_conversation() -> list[BaseMessage]:
    """What real checkpoints sometimes hold: messages before the first human one, an orphaned
    tool result, an empty AI message, and a tool call whose result never came."""
    history: list[BaseMessage] = [
        AIMessage("Welcome! خوش آمدید", id="pre-ai"),
        ToolMessage("stale", tool_call_id="ghost-0", id="pre-orphan"),
    ]
    history += turn(0, tools=True)
    history.append(ToolMessage("late and unknown", tool_call_id="ghost-1", id="orphan-1"))
    history += turn(1, tools=False)
    history.append(AIMessage("", id="empty-ai"))
    history.append(HumanMessage(text(2), id="h2"))
    unanswered = {"name": "search_policies", "args": {"query": "x"}, "id": "never-answered"}
    history.append(AIMessage("", tool_calls=[unanswered], id="a2-unanswered"))
    history += turn(3, tools=True)[1:]  # tool step and answer of the same (newest) turn
    return history


# --- exact accounting, independent of the counter's cache --------------------------------------


def cost(counter: TokenCounter, message: BaseMessage) -> int:
    tokens = MESSAGE_FRAMING + counter.count_text(message_text(message))
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            tokens += TOOL_CALL_FRAMING + counter.count_text(
                tool_call_text(call["name"], call["args"])
            )
    return tokens


def system_cost(counter: TokenCounter, value: str | None) -> int:
    return MESSAGE_FRAMING + counter.count_text(value) if value else 0


def fixed_cost(counter: TokenCounter, system: str) -> int:
    return REPLY_PRIMING + system_cost(counter, system)


def sent_cost(
    counter: TokenCounter, messages: Sequence[BaseMessage], system: str, summary: str | None
) -> int:
    """Everything sent for ``messages``: reply priming, system prompt, summary and messages."""
    return (
        fixed_cost(counter, system)
        + system_cost(counter, summary)
        + sum(cost(counter, m) for m in messages)
    )


def newest_human_index(history: Sequence[BaseMessage]) -> int:
    return max(i for i, m in enumerate(history) if isinstance(m, HumanMessage))


def budget_sweep(
    counter: TokenCounter, history: Sequence[BaseMessage], system: str, steps: int = 30
) -> list[int]:
    """Budgets from the smallest that fits the newest message to more than everything needs."""
    low = fixed_cost(counter, system) + cost(counter, history[newest_human_index(history)])
    high = sent_cost(counter, history, system, SUMMARY) + 10
    return sorted({low + (high - low) * k // steps for k in range(steps + 1)})


def assert_well_formed(messages: Sequence[BaseMessage], history: Sequence[BaseMessage]) -> None:
    """Starts on a human message; no orphaned tool call or result; the history's newest human
    message is the window's last human message; no message twice."""
    assert messages, "a history with a human message gives a non-empty window"
    assert isinstance(messages[0], HumanMessage), f"starts on {type(messages[0]).__name__}"
    open_calls: dict[str, int] = {}
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"orphaned tool result {message.id}"
            open_calls[message.tool_call_id] += 1
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                assert call["id"] not in open_calls, f"call id {call['id']} twice"
                open_calls[str(call["id"])] = 0
    unanswered = {call: n for call, n in open_calls.items() if n != 1}
    assert not unanswered, f"tool calls without exactly one result: {unanswered}"
    newest = history[newest_human_index(history)]
    shown_humans = [m for m in messages if isinstance(m, HumanMessage)]
    assert shown_humans[-1].id == newest.id
    assert shown_humans[-1].content == newest.content
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)), "a message shown twice"


def snapshot(history: Sequence[BaseMessage]) -> list[dict[str, object]]:
    return [m.model_dump() for m in history]


class HistoryPolicyConformance:
    """Subclass and provide ``policy`` (a fixture returning a ``HistoryPolicy``); the budget
    is checked in the policy's own counter."""

    def window(
        self,
        policy: HistoryPolicy,
        history: Sequence[BaseMessage],
        budget: int,
        system: str = SYSTEM,
        summary: str | None = SUMMARY,
    ) -> Window:
        return policy.window(history, budget=budget, system=system, summary=summary)

    def test_everything_is_shown_when_everything_fits(self, policy: HistoryPolicy) -> None:
        history = conversation()
        counter = policy.counter
        budget = sent_cost(counter, history, SYSTEM, SUMMARY)
        window = self.window(policy, history, budget)
        assert window.messages == tuple(history)
        assert window.summary == SUMMARY
        assert window.tokens == budget
        assert window.start == 0
        assert window.omitted == 0

    @pytest.mark.parametrize("summary", [SUMMARY, None])
    def test_never_over_budget_in_exact_tokens(
        self, policy: HistoryPolicy, summary: str | None
    ) -> None:
        counter = policy.counter
        for history in (conversation(), corrupted_conversation()):
            for budget in budget_sweep(counter, history, SYSTEM):
                window = self.window(policy, history, budget, summary=summary)
                exact = sent_cost(counter, window.messages, SYSTEM, window.summary)
                assert exact <= budget, f"{exact} tokens sent for a budget of {budget}"
                assert window.tokens == exact, "the window reports what it really costs"
                assert window.budget == budget

    def test_windows_start_on_a_human_message_without_orphans(self, policy: HistoryPolicy) -> None:
        counter = policy.counter
        for history in (conversation(), corrupted_conversation()):
            for budget in budget_sweep(counter, history, SYSTEM):
                window = self.window(policy, history, budget)
                assert_well_formed(window.messages, history)
                assert window.summary in (None, SUMMARY)
                # the window is made of the history's own messages, unchanged
                by_id = {m.id: m for m in history}
                assert all(by_id[m.id] is m for m in window.messages)

    def test_without_a_summary_none_is_sent(self, policy: HistoryPolicy) -> None:
        history = conversation()
        for summary in (None, ""):
            window = self.window(policy, history, 10**6, summary=summary)
            assert window.summary is None
            assert window.messages == tuple(history)

    def test_messages_before_the_first_human_message_are_never_shown(
        self, policy: HistoryPolicy
    ) -> None:
        history = corrupted_conversation()
        window = self.window(policy, history, 10**6)
        assert window.messages[0].id == "h0"
        shown = {m.id for m in window.messages}
        assert not shown & {"pre-ai", "pre-orphan", "orphan-1", "a2-unanswered"}

    def test_the_newest_turn_is_kept_whole_when_it_fits(self, policy: HistoryPolicy) -> None:
        counter = policy.counter
        history = conversation()
        newest = newest_human_index(history)
        newest_turn = history[newest:]
        for budget in budget_sweep(counter, history, SYSTEM):
            window = self.window(policy, history, budget)
            if sent_cost(counter, newest_turn, SYSTEM, None) <= budget:  # the summary goes first
                assert window.messages[-len(newest_turn) :] == tuple(newest_turn)
                # older turns: whole, newest first, without gaps -- a suffix of the history
                assert window.messages == tuple(history[window.start :])
                assert isinstance(history[window.start], HumanMessage)
            else:
                # only the newest human message and the newest of its steps
                assert window.start == newest
                assert window.messages[0] is history[newest]
                tail = window.messages[1:]
                assert tail == tuple(history[len(history) - len(tail) :])
                assert window.omitted > 0

    def test_an_older_turn_is_not_shown_when_the_next_newer_one_is_not(
        self, policy: HistoryPolicy
    ) -> None:
        counter = policy.counter
        history = conversation(turns=4)
        # a huge turn just before the newest one; turn 0 alone would fit beside the newest
        huge = [HumanMessage(text(2, 40), id="h-huge"), AIMessage(text(3, 40), id="a-huge")]
        history = [*history[:-5], *huge, *history[-5:]]  # before the newest turn (5 messages)
        newest_turn = history[-5:]
        budget = sent_cost(counter, [*history[:2], *newest_turn], SYSTEM, None)
        window = self.window(policy, history, budget, summary=None)
        assert window.messages == tuple(newest_turn), "no gap: nothing older than the huge turn"

    def test_the_summary_goes_before_any_of_the_newest_turn(self, policy: HistoryPolicy) -> None:
        counter = policy.counter
        history = conversation()
        newest_turn = history[newest_human_index(history) :]
        budget = sent_cost(counter, newest_turn, SYSTEM, None)
        assert sent_cost(counter, newest_turn, SYSTEM, SUMMARY) > budget
        window = self.window(policy, history, budget)
        assert window.summary is None
        assert window.messages == tuple(newest_turn)

    def test_it_is_deterministic_and_never_mutates_the_history(self, policy: HistoryPolicy) -> None:
        counter = policy.counter
        for history in (conversation(), corrupted_conversation()):
            before = snapshot(history)
            copy = [m.model_copy(deep=True) for m in history]
            for budget in budget_sweep(counter, history, SYSTEM, steps=10):
                first = self.window(policy, history, budget)
                again = self.window(policy, history, budget)
                assert again == first
                of_copy = self.window(policy, copy, budget)
                assert [m.id for m in of_copy.messages] == [m.id for m in first.messages]
                assert (of_copy.summary, of_copy.tokens, of_copy.start) == (
                    first.summary,
                    first.tokens,
                    first.start,
                )
            assert snapshot(history) == before

    def test_a_newest_message_over_the_budget_is_refused_not_cut(
        self, policy: HistoryPolicy
    ) -> None:
        counter = policy.counter
        history = [*conversation(turns=2), HumanMessage(text(1, 30), id="h-big")]
        needed = cost(counter, history[-1])
        for budget in (1, needed // 2, needed - 1):
            with pytest.raises(MessageTooLarge) as refused:
                self.window(policy, history, budget, system="", summary=None)
            assert refused.value.budget == budget
            assert refused.value.tokens == needed
        # a little more than the message itself: a window, or a refusal -- never a cut message
        for budget in range(needed, needed + REPLY_PRIMING + 1):
            try:
                window = self.window(policy, history, budget, system="", summary=None)
            except DomainError:
                continue
            assert window.messages[-1] is history[-1]
            assert window.tokens <= budget

    def test_a_system_prompt_that_leaves_no_room_is_refused(self, policy: HistoryPolicy) -> None:
        counter = policy.counter
        history = conversation(turns=2)
        newest = cost(counter, history[newest_human_index(history)])
        budget = newest + REPLY_PRIMING  # the newest message fits, but not beside the prompt
        with pytest.raises(ContextOverflow):
            self.window(policy, history, budget, system=SYSTEM * 5)

    def test_a_history_without_a_human_message_gives_an_empty_window(
        self, policy: HistoryPolicy
    ) -> None:
        history: list[BaseMessage] = [AIMessage("Welcome!", id="only-ai")]
        window = self.window(policy, history, 10_000, summary=None)
        assert window.messages == ()
        assert window.tokens <= 10_000
