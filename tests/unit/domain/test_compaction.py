"""Worked examples of tool-result truncation and ``WindowCompactor`` (``CharacterCounter``)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.compaction import (
    TRUNCATION_MARK,
    WindowCompactor,
    is_empty_ai,
    truncate_tool_result,
    truncate_tool_results,
)
from threadkeeper.domain.errors import MessageTooLarge
from threadkeeper.domain.history import TurnWindowPolicy
from threadkeeper.domain.tokens import CharacterCounter


def compactor(max_tool_chars: int = 2000, target: float = 0.75) -> WindowCompactor:
    return WindowCompactor(
        TurnWindowPolicy(CharacterCounter()), max_tool_chars=max_tool_chars, target=target
    )


def call(id_: str, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "search", "args": {"q": "x"}, "id": call_id}], id=id_)


def turns(count: int) -> list[BaseMessage]:
    """``count`` turns of a 7-token human message and a 7-token answer."""
    history: list[BaseMessage] = []
    for n in range(count):
        history += [HumanMessage(f"q{n:03d}", id=f"h{n}"), AIMessage(f"a{n:03d}", id=f"a{n}")]
    return history


# --- truncation ------------------------------------------------------------------------------


def test_a_short_tool_result_is_returned_as_is() -> None:
    message = ToolMessage("x" * 10, tool_call_id="c1", id="t1")
    assert truncate_tool_result(message, 10) is message


def test_a_long_tool_result_is_cut_marked_and_renamed() -> None:
    message = ToolMessage("نتیجه " * 100, tool_call_id="c1", id="t1")
    short = truncate_tool_result(message, 50)
    assert short.content == ("نتیجه " * 100)[:50] + TRUNCATION_MARK.format(omitted=550)
    assert short.id not in (None, "t1")
    assert short.tool_call_id == "c1"
    # the original is untouched, and the rule is deterministic
    assert message.content == "نتیجه " * 100
    assert truncate_tool_result(message, 50) == short


def test_truncate_tool_results_counts_what_it_cut() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("x" * 100, id="h1"),
        call("a1", "c1"),
        ToolMessage("y" * 100, tool_call_id="c1", id="t1"),
        ToolMessage("z" * 5, tool_call_id="c2", id="t2"),
    ]
    out, cut = truncate_tool_results(messages, 20)
    assert cut == 1
    assert out[0] is messages[0]  # only tool results are cut
    assert out[2].id != "t1"
    assert out[3] is messages[3]


def test_truncating_an_already_truncated_result_changes_nothing() -> None:
    """A result that was cut once (and persisted by compaction) must not be cut again: that
    would replace the mark, lose how much was omitted, and give it yet another id."""
    once = truncate_tool_result(ToolMessage("x" * 50, tool_call_id="c1", id="t1"), 10)
    assert truncate_tool_result(once, 10) is once


@pytest.mark.parametrize(
    ("message", "empty"),
    [
        (AIMessage("", id="a"), True),
        (AIMessage("  \n ", id="a"), True),
        (AIMessage([], id="a"), True),
        (AIMessage("ok", id="a"), False),
        (call("a", "c1"), False),
        (HumanMessage("", id="h"), False),
        (ToolMessage("", tool_call_id="c", id="t"), False),
    ],
)
def test_is_empty_ai(message: BaseMessage, empty: bool) -> None:
    assert is_empty_ai(message) is empty


# --- compaction ------------------------------------------------------------------------------


def test_a_clean_history_that_fits_is_left_alone() -> None:
    history = turns(3)
    compaction = compactor().compact(history, budget=1000)
    assert not compaction.changed
    assert compaction.kept == tuple(history)
    assert all(a is b for a, b in zip(compaction.kept, history, strict=True))


def test_empty_ai_messages_are_dropped_even_when_everything_fits() -> None:
    history = [HumanMessage("q", id="h1"), AIMessage("", id="empty"), AIMessage("ok", id="a1")]
    compaction = compactor().compact(history, budget=1000)
    assert compaction.changed
    assert compaction.dropped == 1
    assert [m.id for m in compaction.kept] == ["h1", "a1"]


def test_oversized_tool_results_are_truncated_even_when_everything_fits() -> None:
    history = [
        HumanMessage("q", id="h1"),
        call("a1", "c1"),
        ToolMessage("r" * 100, tool_call_id="c1", id="t1"),
    ]
    compaction = compactor(max_tool_chars=10).compact(history, budget=1000)
    assert compaction.changed
    assert compaction.truncated == 1
    assert compaction.dropped == 0
    kept_result = compaction.kept[2]
    assert kept_result.content == "r" * 10 + TRUNCATION_MARK.format(omitted=90)
    assert kept_result.id != "t1"


def test_a_history_over_budget_is_compacted_to_the_target_share() -> None:
    # 10 turns of 14 tokens: 143 with priming. Over 100, so compact to 75: 5 turns (73).
    history = turns(10)
    compaction = compactor().compact(history, budget=100)
    assert [m.id for m in compaction.kept] == [m.id for m in history[10:]]
    assert compaction.dropped == 10
    assert compaction.truncated == 0
    assert compaction.changed


def test_a_newest_message_larger_than_the_target_keeps_the_full_window() -> None:
    # the newest message (83 tokens) does not fit 75% of 100 but fits 100: the full window
    # (the newest message and the one older turn that fits beside it) is kept instead.
    history = [*turns(3), HumanMessage("x" * 80, id="big")]
    compaction = compactor().compact(history, budget=100)
    assert [m.id for m in compaction.kept] == ["h2", "a2", "big"]
    assert compaction.dropped == 4


def test_a_newest_message_over_the_budget_is_refused() -> None:
    with pytest.raises(MessageTooLarge):
        compactor().compact([HumanMessage("x" * 200, id="big")], budget=100)


def test_orphans_are_dropped_by_compaction() -> None:
    history = [
        HumanMessage("q", id="h1"),
        ToolMessage("stale", tool_call_id="ghost", id="t0"),
        call("a1", "c1"),  # never answered
        AIMessage("ok", id="a2"),
    ]
    compaction = compactor().compact(history, budget=1000)
    assert [m.id for m in compaction.kept] == ["h1", "a2"]
    assert compaction.dropped == 2


def test_messages_before_the_first_human_message_are_not_kept() -> None:
    """The kept list replaces the whole history and must itself be a valid window: it starts
    on a human message and holds no orphaned tool result."""
    history = [
        AIMessage("stray greeting", id="a0"),
        ToolMessage("stale", tool_call_id="ghost", id="t0"),
        HumanMessage("hi", id="h1"),
    ]
    compaction = compactor().compact(history, budget=1000)
    assert [m.id for m in compaction.kept] == ["h1"]
    assert compaction.dropped == 2


def test_compacting_a_compacted_history_again_changes_nothing() -> None:
    """Once compacted (tool results truncated) and within budget, the next turn's compaction
    has nothing to do: otherwise the hook rewrites the whole thread on every model call."""
    history = [
        HumanMessage("q", id="h1"),
        call("a1", "c1"),
        ToolMessage("r" * 100, tool_call_id="c1", id="t1"),
        AIMessage("done", id="a2"),
    ]
    first = compactor(max_tool_chars=10).compact(history, budget=1000)
    assert first.truncated == 1
    second = compactor(max_tool_chars=10).compact(list(first.kept), budget=1000)
    assert not second.changed
    assert second.kept == first.kept
