"""Worked examples of ``TurnWindowPolicy`` with ``CharacterCounter`` (1 token per character).

Costs, for reference: a message is 3 + its characters; a tool call adds 3 + len(name + JSON
arguments); a system prompt or summary is 3 + its characters; every window adds 3 (priming).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.history import TurnWindowPolicy, Window, steps_of, window_tokens
from threadkeeper.domain.tokens import REPLY_PRIMING, CharacterCounter


def policy() -> TurnWindowPolicy:
    return TurnWindowPolicy(CharacterCounter())


def human(id_: str, text: str) -> HumanMessage:
    return HumanMessage(text, id=id_)


def ai(id_: str, text: str) -> AIMessage:
    return AIMessage(text, id=id_)


def calling(id_: str, *call_ids: str) -> AIMessage:
    """An AI message calling ``f(x=1)`` once per call id: each call costs 3 + 9 tokens."""
    return AIMessage(
        "", tool_calls=[{"name": "f", "args": {"x": 1}, "id": c} for c in call_ids], id=id_
    )


def result(id_: str, call_id: str, text: str) -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id, id=id_)


def ids(window: Window) -> list[str | None]:
    return [m.id for m in window.messages]


# Five messages of 7 tokens each: three turns.
THREE_TURNS: list[BaseMessage] = [
    human("h1", "aaaa"),
    ai("a1", "bbbb"),
    human("h2", "cccc"),
    ai("a2", "dddd"),
    human("h3", "eeee"),
]


# --- older turns go first --------------------------------------------------------------------


def test_everything_fits() -> None:
    window = policy().window(THREE_TURNS, budget=38)
    assert ids(window) == ["h1", "a1", "h2", "a2", "h3"]
    assert window.tokens == 38
    assert window.start == 0
    assert window.omitted == 0
    assert window.first_id == "h1"
    assert window.last_id == "h3"
    assert window.counter == "characters"


def test_oldest_turns_are_dropped_first_and_whole() -> None:
    # one token short of everything: the oldest turn goes, whole (never just h1 or just a1)
    window = policy().window(THREE_TURNS, budget=37)
    assert ids(window) == ["h2", "a2", "h3"]
    assert window.tokens == 3 + 7 + 14
    assert window.start == 2
    # one token short of two turns: only the newest message is left
    window = policy().window(THREE_TURNS, budget=23)
    assert ids(window) == ["h3"]
    assert window.tokens == 10
    assert window.start == 4


def test_no_gaps_an_older_turn_that_fits_after_one_that_does_not_is_not_taken() -> None:
    history = [
        human("h1", "x"),  # 4 tokens: would fit
        ai("a1", "y"),  # 4
        human("h2", "c" * 40),  # 43: does not fit
        ai("a2", "d"),  # 4
        human("h3", "e"),  # 4
    ]
    window = policy().window(history, budget=3 + 4 + 20)
    assert ids(window) == ["h3"]


def test_the_window_never_mutates_the_history() -> None:
    history = list(THREE_TURNS)
    before = [m.model_copy() for m in history]
    window = policy().window(history, budget=23)
    assert history == before
    assert all(a is b for a, b in zip(history, THREE_TURNS, strict=True))
    assert window.messages[0] is THREE_TURNS[-1]


# --- the summary -----------------------------------------------------------------------------


def test_the_summary_is_dropped_before_the_newest_human_message() -> None:
    history = [human("h1", "hello")]  # 8 tokens; the summary "sum" costs 6
    kept = policy().window(history, budget=3 + 8 + 6, summary="sum")
    assert kept.summary == "sum"
    assert kept.tokens == 17
    dropped = policy().window(history, budget=3 + 8 + 5, summary="sum")
    assert dropped.summary is None
    assert ids(dropped) == ["h1"]
    assert dropped.tokens == 11


def test_the_summary_is_sent_ahead_of_older_turns() -> None:
    history = [human("h1", "aa"), ai("a1", "bb"), human("h2", "cc")]  # 5 tokens each
    window = policy().window(history, budget=3 + 5 + 7, summary="ssss")
    assert window.summary == "ssss"
    assert ids(window) == ["h2"]
    assert window_tokens(window, CharacterCounter()) == 15


def test_an_empty_summary_is_no_summary() -> None:
    window = policy().window([human("h1", "x")], budget=100, summary="")
    assert window.summary is None
    assert window.tokens == 3 + 4


# --- refusals --------------------------------------------------------------------------------


def test_a_newest_message_over_the_budget_is_refused() -> None:
    history = [human("h1", "old"), human("h2", "x" * 10)]  # the newest costs 13
    with pytest.raises(MessageTooLarge) as raised:
        policy().window(history, budget=13 + REPLY_PRIMING - 1)
    assert raised.value.tokens == 13
    assert raised.value.budget == 15
    assert ids(policy().window(history, budget=13 + REPLY_PRIMING)) == ["h2"]


def test_a_system_prompt_that_leaves_no_room_is_a_context_overflow() -> None:
    history = [human("h1", "hi")]  # 5 tokens
    system = "x" * 20  # 23 tokens
    with pytest.raises(ContextOverflow) as raised:
        policy().window(history, budget=30, system=system)
    assert raised.value.needed == 3 + 23 + 5
    assert raised.value.budget == 30
    window = policy().window(history, budget=31, system=system)
    assert window.tokens == 31
    assert window_tokens(window, CharacterCounter(), system) == 31


def test_a_history_without_a_human_message_gives_an_empty_window() -> None:
    window = policy().window([ai("a1", "hello")], budget=100)
    assert window.messages == ()
    assert window.start == 1
    assert window.first_id is None
    empty = policy().window([], budget=100)
    assert empty.messages == ()
    assert empty.tokens == REPLY_PRIMING


# --- tool calls: never an orphan -------------------------------------------------------------


def test_orphaned_tool_results_are_left_out_and_counted() -> None:
    history = [human("h1", "q"), result("t0", "nope", "zzz"), ai("a1", "ans")]
    window = policy().window(history, budget=100)
    assert ids(window) == ["h1", "a1"]
    assert window.omitted == 1
    assert window.tokens == 3 + 4 + 6


def test_a_tool_call_without_its_result_is_left_out_and_counted() -> None:
    history = [
        human("h1", "q"),
        calling("a1", "c1", "c2"),
        result("t1", "c1", "r"),
        ai("a2", "done"),
    ]
    window = policy().window(history, budget=1000)
    assert ids(window) == ["h1", "a2"]
    assert window.omitted == 2  # the call and its one answered result


def test_orphans_in_an_older_turn_are_counted_when_that_turn_is_shown() -> None:
    history = [
        human("h1", "q"),
        result("t0", "ghost", "stale"),
        ai("a1", "ok"),
        human("h2", "next"),
    ]
    window = policy().window(history, budget=1000)
    assert ids(window) == ["h1", "a1", "h2"]
    assert window.omitted == 1


def test_parallel_tool_calls_are_kept_together_with_their_results() -> None:
    # h1 4 + call step 27 + results 5 + 5 + "done" 7: 48, and 3 of priming
    history = [
        human("h1", "q"),
        calling("a1", "c1", "c2"),
        result("t2", "c2", "r2"),
        result("t1", "c1", "r1"),
        ai("a2", "done"),
    ]
    whole = policy().window(history, budget=51)
    assert ids(whole) == ["h1", "a1", "t2", "t1", "a2"]
    assert whole.tokens == 51
    # one token less: the whole tool step goes, never one of its results alone
    cut = policy().window(history, budget=50)
    assert ids(cut) == ["h1", "a2"]
    assert cut.omitted == 3
    assert cut.tokens == 3 + 4 + 7


def test_a_late_tool_result_is_placed_right_after_its_call() -> None:
    history = [
        human("h1", "q"),
        calling("a1", "c1"),
        ai("a2", "meanwhile"),
        result("t1", "c1", "r1"),
    ]
    window = policy().window(history, budget=1000)
    assert ids(window) == ["h1", "a1", "t1", "a2"]


def test_an_oversized_newest_turn_keeps_the_human_message_and_its_newest_steps() -> None:
    history = [
        human("h0", "old"),
        ai("a0", "old answer"),
        human("h1", "q"),  # 4
        ai("s1", "first"),  # 8
        ai("s2", "second"),  # 9
        ai("s3", "third"),  # 8
    ]
    window = policy().window(history, budget=3 + 4 + 8 + 9)
    assert ids(window) == ["h1", "s2", "s3"]
    assert window.start == 2
    assert window.omitted == 1
    assert window.tokens == 24
    # a newest turn cut short takes no older turn with it, even if one would fit
    assert "h0" not in ids(window)


def test_steps_of_groups_results_with_their_calls() -> None:
    messages = [
        calling("a1", "c1", "c2"),
        result("t1", "c1", "r1"),
        result("tx", "ghost", "orphan"),
        result("t2", "c2", "r2"),
        result("t2b", "c2", "duplicate"),
        ai("a2", "done"),
    ]
    steps, left_out = steps_of(messages)
    assert [[m.id for m in step] for step in steps] == [["a1", "t1", "t2"], ["a2"]]
    assert left_out == 2


def test_a_tool_call_without_an_id_cannot_be_answered() -> None:
    message = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}], id="a1")
    steps, left_out = steps_of([message, ai("a2", "ok")])
    assert [[m.id for m in step] for step in steps] == [["a2"]]
    assert left_out == 1
