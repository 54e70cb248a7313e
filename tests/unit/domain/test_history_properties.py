"""Properties of ``TurnWindowPolicy.window`` and ``WindowCompactor.compact`` on generated
fa/zh/en conversations, checked against an independent exact count.

The oracle counts with ``bpe_openai``'s own o200k_base tokenizer (a separate implementation
from the tiktoken encoding the counter uses) and never reads the window's numbers or the
counter's cache.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import bpe_openai  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from tests.unit.domain.conversations import (
    Conversation,
    budgets,
    clean_conversations,
    conversations,
    corrupted_conversations,
    texts,
)
from threadkeeper.domain.compaction import TRUNCATION_MARK, Compaction, WindowCompactor
from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.history import TurnWindowPolicy, Window, window_tokens
from threadkeeper.domain.tokens import (
    MESSAGE_FRAMING,
    REPLY_PRIMING,
    TOOL_CALL_FRAMING,
    TiktokenCounter,
)

COUNTER = TiktokenCounter("o200k_base")
POLICY = TurnWindowPolicy(COUNTER)
ORACLE = bpe_openai.get_encoding("o200k_base")

#: 1.5 x the Hypothesis profile's examples (150 in ``dev``; see ``tests/unit/conftest.py``).
PROPERTY = settings(
    max_examples=settings().max_examples * 3 // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the independent oracle ------------------------------------------------------------------


def exact(text: str) -> int:
    return len(ORACLE.encode_ordinary(text))


def cost(message: BaseMessage) -> int:
    assert isinstance(message.content, str)
    tokens = MESSAGE_FRAMING + exact(message.content)
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            serialized = call["name"] + json.dumps(call["args"], ensure_ascii=False, sort_keys=True)
            tokens += TOOL_CALL_FRAMING + exact(serialized)
    return tokens


def system_cost(text: str | None) -> int:
    return MESSAGE_FRAMING + exact(text) if text else 0


def fixed_cost(system: str) -> int:
    return REPLY_PRIMING + system_cost(system)


def recount(window: Window, system: str) -> int:
    return fixed_cost(system) + system_cost(window.summary) + sum(cost(m) for m in window.messages)


def humans(messages: Sequence[BaseMessage]) -> list[int]:
    return [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]


def clean_steps(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """Steps of an uncorrupted turn tail: an AI message and the tool results right after it."""
    grouped: list[list[BaseMessage]] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            grouped[-1].append(message)
        else:
            grouped.append([message])
    return grouped


def assert_valid_window(messages: Sequence[BaseMessage], history: Sequence[BaseMessage]) -> None:
    """Properties 2-4 on a list of messages chosen from ``history``."""
    newest = history[humans(history)[-1]]
    assert messages, "a history with a human message must give a non-empty window"
    # 2. starts on a human message
    assert isinstance(messages[0], HumanMessage)
    # 3. no orphans: every result follows its call; every call has exactly one result after it
    open_calls: dict[str, int] = {}
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"orphaned tool result {message.id}"
            open_calls[message.tool_call_id] += 1
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                assert call["id"] not in open_calls
                open_calls[str(call["id"])] = 0
    unanswered = {call: n for call, n in open_calls.items() if n != 1}
    assert not unanswered, f"tool calls without exactly one result: {unanswered}"
    # 4. the newest human message is there, and it is the window's last human message
    window_humans = [m for m in messages if isinstance(m, HumanMessage)]
    assert window_humans[-1].id == newest.id
    assert window_humans[-1].content == newest.content
    # no message twice
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids))


def window_or_refusal(conv: Conversation, budget: int) -> Window | None:
    """The window, or ``None`` after checking that the refusal was the right one (property 7)."""
    human = cost(conv.history[conv.newest_human])
    try:
        window = POLICY.window(
            conv.history, budget=budget, system=conv.system, summary=conv.summary
        )
    except MessageTooLarge:
        assert human + REPLY_PRIMING > budget
        return None
    except ContextOverflow:
        assert human + REPLY_PRIMING <= budget
        assert fixed_cost(conv.system) + human > budget
        return None
    assert human + REPLY_PRIMING <= budget
    assert fixed_cost(conv.system) + human <= budget
    return window


# --- TurnWindowPolicy.window -----------------------------------------------------------------


@PROPERTY
@given(conversations(), budgets)
def test_window_is_exact_valid_and_deterministic(conv: Conversation, budget: int) -> None:
    window = window_or_refusal(conv, budget)
    if window is None:
        return
    # 1. never over budget, in exact tokens recounted from scratch
    exact_tokens = recount(window, conv.system)
    assert exact_tokens <= budget
    assert exact_tokens == window.tokens
    assert window_tokens(window, TiktokenCounter("o200k_base"), conv.system) == exact_tokens
    assert window.budget == budget
    # 2-4. starts on a human message, no orphans, the newest human message is there and last
    assert_valid_window(window.messages, conv.history)
    # 2. the summary is only ever the one passed in, and only when there was one
    if conv.summary:
        assert window.summary in (None, conv.summary)
    else:
        assert window.summary is None
    # the window is made of the history's own messages, unchanged, from ``start`` on
    by_id = {m.id: m for m in conv.history}
    assert all(by_id[m.id] is m for m in window.messages)
    assert conv.history[window.start] is window.messages[0]
    # messages before the first human message are never shown
    first_human = humans(conv.history)[0]
    assert not {m.id for m in window.messages} & {m.id for m in conv.history[:first_human]}
    # 6. deterministic, and independent of what the counter has cached
    again = POLICY.window(conv.history, budget=budget, system=conv.system, summary=conv.summary)
    fresh = TurnWindowPolicy(TiktokenCounter("o200k_base")).window(
        conv.history, budget=budget, system=conv.system, summary=conv.summary
    )
    assert again == window
    assert fresh == window
    assert [m.id for m in fresh.messages] == [m.id for m in window.messages]


@PROPERTY
@given(clean_conversations(), budgets)
def test_window_is_a_maximal_suffix_without_gaps(conv: Conversation, budget: int) -> None:
    window = window_or_refusal(conv, budget)
    if window is None:
        return
    history = conv.history
    newest = conv.newest_human
    newest_turn = history[newest:]
    sent_fixed = fixed_cost(conv.system) + system_cost(window.summary)
    if sent_fixed + sum(cost(m) for m in newest_turn) <= budget:
        # 4. the whole newest turn fits beside what else is sent, so it is kept whole ...
        assert window.messages[-len(newest_turn) :] == tuple(newest_turn)
        # 5. ... the window is a contiguous suffix of the history ...
        assert window.messages == tuple(history[window.start :])
        assert window.omitted == 0
        # ... and the next older turn would not have fitted
        before = humans(history[: window.start])
        if before:
            older_turn = history[before[-1] : window.start]
            assert recount(window, conv.system) + sum(cost(m) for m in older_turn) > budget
    else:
        # The newest turn is cut: its human message and its newest steps, and nothing older.
        assert window.start == newest
        assert window.messages[0] is history[newest]
        kept_tail = window.messages[1:]
        assert kept_tail == tuple(history[len(history) - len(kept_tail) :])
        all_steps = clean_steps(history[newest + 1 :])
        kept_steps = clean_steps(kept_tail)
        dropped = all_steps[: len(all_steps) - len(kept_steps)]
        assert dropped, "the whole newest turn did not fit, so some step must be left out"
        assert recount(window, conv.system) + sum(cost(m) for m in dropped[-1]) > budget
        assert window.omitted == sum(len(step) for step in dropped)


@PROPERTY
@given(
    conversations(max_turns=8),
    texts(min_chars=3_000, max_chars=12_000),
    st.integers(-40, 40),
    st.booleans(),
)
def test_message_too_large_exactly_when_the_newest_message_exceeds_the_budget(
    conv: Conversation, huge: str, slack: int, with_system: bool
) -> None:
    message = HumanMessage(huge, id="huge-newest")
    history = (*conv.history, message)
    budget = max(1, cost(message) + REPLY_PRIMING + slack)
    system = conv.system if with_system else ""
    policy = TurnWindowPolicy(TiktokenCounter("o200k_base"))
    if cost(message) + REPLY_PRIMING > budget:
        with pytest.raises(MessageTooLarge) as raised:
            policy.window(history, budget=budget, system=system, summary=conv.summary)
        assert raised.value.tokens == cost(message)
        assert raised.value.budget == budget
    elif fixed_cost(system) + cost(message) > budget:
        with pytest.raises(ContextOverflow):
            policy.window(history, budget=budget, system=system, summary=conv.summary)
    else:
        window = policy.window(history, budget=budget, system=system, summary=conv.summary)
        assert window.messages[-1] is message
        assert recount(window, system) <= budget


# --- WindowCompactor.compact -----------------------------------------------------------------

#: ``None``: no tool result needs truncating (the limit is the longest result).
MAX_TOOL_CHARS = st.sampled_from((None, 50, 300, 2000))


def longest_tool_result(history: Sequence[BaseMessage]) -> int:
    lengths = [len(str(m.content)) for m in history if isinstance(m, ToolMessage)]
    return max(lengths, default=1)


def compaction_or_refusal(
    compactor: WindowCompactor, conv: Conversation, budget: int
) -> Compaction | None:
    human = cost(conv.history[conv.newest_human])
    try:
        return compactor.compact(
            conv.history, budget=budget, system=conv.system, summary=conv.summary
        )
    except MessageTooLarge:
        assert human + REPLY_PRIMING > budget
    except ContextOverflow:
        assert fixed_cost(conv.system) + human > budget
    return None


def check_compaction(conv: Conversation, budget: int, max_chars: int) -> Compaction | None:
    compaction = compaction_or_refusal(
        WindowCompactor(POLICY, max_tool_chars=max_chars), conv, budget
    )
    if compaction is None:
        return None
    kept = compaction.kept
    # 2-4 hold for what is kept
    assert_valid_window(kept, conv.history)
    assert not any(
        isinstance(m, AIMessage) and not m.tool_calls and not str(m.content).strip() for m in kept
    ), "an empty AI message was kept"
    # what is kept is what the model may see: it fits the budget
    assert fixed_cost(conv.system) + sum(cost(m) for m in kept) <= budget
    assert compaction.dropped == len(conv.history) - len(kept)
    # tool results: at most ``max_chars`` of the original text plus the mark, under a new id
    originals = {m.tool_call_id: m for m in conv.history if isinstance(m, ToolMessage)}
    history_ids = {m.id for m in conv.history}
    truncated = 0
    for message in kept:
        if not isinstance(message, ToolMessage):
            assert message.id in history_ids
            continue
        original = originals[message.tool_call_id]
        text = str(original.content)
        if len(text) <= max_chars:
            assert message is original
            continue
        truncated += 1
        mark = TRUNCATION_MARK.format(omitted=len(text) - max_chars)
        assert message.content == text[:max_chars] + mark
        assert message.id != original.id
        assert message.id not in history_ids
    assert compaction.truncated == truncated
    return compaction


@PROPERTY
@given(clean_conversations(), budgets, MAX_TOOL_CHARS)
def test_compactor_on_clean_histories(conv: Conversation, budget: int, limit: int | None) -> None:
    max_chars = limit or longest_tool_result(conv.history)
    compaction = check_compaction(conv, budget, max_chars)
    if compaction is None or limit is not None:
        return
    # nothing to clean: unchanged exactly when the history fits as it is
    history_cost = fixed_cost(conv.system) + sum(cost(m) for m in conv.history)
    if history_cost + system_cost(conv.summary) <= budget:
        assert not compaction.changed
        assert compaction.kept == conv.history
    elif history_cost > budget:
        assert compaction.changed
        assert compaction.truncated == 0


@PROPERTY
@given(corrupted_conversations(), budgets, MAX_TOOL_CHARS)
def test_compactor_on_corrupted_histories(
    conv: Conversation, budget: int, limit: int | None
) -> None:
    check_compaction(conv, budget, limit or longest_tool_result(conv.history))


@PROPERTY
@given(conversations(max_turns=12), budgets, MAX_TOOL_CHARS)
def test_compacting_again_changes_nothing_once_it_fits(
    conv: Conversation, budget: int, limit: int | None
) -> None:
    compactor = WindowCompactor(POLICY, max_tool_chars=limit or longest_tool_result(conv.history))
    first = compaction_or_refusal(compactor, conv, budget)
    if first is None:
        return
    if fixed_cost(conv.system) + sum(cost(m) for m in first.kept) > budget:
        return  # the kept-window properties above fail on this; nothing more to say here
    second = compactor.compact(first.kept, budget=budget, system=conv.system, summary=conv.summary)
    assert second.kept == first.kept
    assert not second.changed


@PROPERTY
@given(conversations(), budgets, MAX_TOOL_CHARS)
def test_compacting_the_same_input_twice_gives_the_same_result(
    conv: Conversation, budget: int, limit: int | None
) -> None:
    """Deterministic: the same history compacted twice -- by the same compactor, by a new one
    with a cold counter, and from a deep copy of the messages -- keeps the same messages with
    the same ids and content, and the history itself is never changed."""
    max_chars = limit or longest_tool_result(conv.history)
    before = [m.model_dump() for m in conv.history]
    copy = [m.model_copy(deep=True) for m in conv.history]
    compactors = (
        WindowCompactor(POLICY, max_tool_chars=max_chars),
        WindowCompactor(POLICY, max_tool_chars=max_chars),
        WindowCompactor(TurnWindowPolicy(TiktokenCounter("o200k_base")), max_tool_chars=max_chars),
    )
    outcomes: list[object] = []
    for compactor, history in zip(compactors, (conv.history, conv.history, copy), strict=True):
        try:
            compaction = compactor.compact(
                history, budget=budget, system=conv.system, summary=conv.summary
            )
        except (MessageTooLarge, ContextOverflow) as refused:
            outcomes.append((type(refused), str(refused)))
            continue
        outcomes.append(
            (
                [(m.id, type(m).__name__, m.content, m.model_dump()) for m in compaction.kept],
                compaction.dropped,
                compaction.truncated,
                compaction.changed,
            )
        )
    assert outcomes[1] == outcomes[0], "the same compactor, the same input, another result"
    assert outcomes[2] == outcomes[0], "a fresh compactor or a copied history changed the result"
    assert [m.model_dump() for m in conv.history] == before, "compaction mutated the history"
