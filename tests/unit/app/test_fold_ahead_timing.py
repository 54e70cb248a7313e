"""When a fold is asked for ahead of need (issue 27), on pure thread states — no worker, no
model: the round that records the ``summary`` follow-up must come early enough that a worker
has the time of two runs to make the fold (it starts while the next run runs, and takes as long
as a run: a model call), whatever share of the budget the system message takes, and the fold it
plans must cover what the run it is for has to fold.

Before this, the trigger and the fold were shares of the *whole* budget: with a system message
(prompt, memory, documents) taking half of it the fold was asked for one run before need — the
reduced follow-up benchmark's runs folded themselves in 12–15 of 18 folds — and past about 60 %
the fold planned ahead overflowed and was never made."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.app.runs.fold import SummaryJob
from threadkeeper.domain.summary import (
    AHEAD_RUNS,
    InMemorySummariesAhead,
    fold_room,
    index_of,
    messages_to_fold,
    newest_turn_tokens,
)
from threadkeeper.domain.tokens import CharacterCounter
from threadkeeper.hooks import HookSettings

BUDGET = 1500
SUMMARY_SHARE = 0.25


def job(system: str) -> SummaryJob:
    hooks = HookSettings(
        budget=BUDGET,
        counter=CharacterCounter(),
        summary_after_turns=1,
        summary_share=SUMMARY_SHARE,
        system_prompt=system,
    )
    return SummaryJob(agent=None, settings=hooks, summaries=InMemorySummariesAhead())


def turn(index: int, asked: int, answered: int) -> list[BaseMessage]:
    return [
        HumanMessage(("q" * asked)[:asked], id=f"h{index}"),
        AIMessage(("a" * answered)[:answered], id=f"a{index}"),
    ]


def must_fold(job: SummaryJob, history: list[BaseMessage], asked: int) -> int | None:
    """Where the window of the next run (its message of ``asked`` tokens added) starts when
    that run must fold (as the ``summarize`` hook decides), else ``None``."""
    hooks = job.settings
    grown = [*history, HumanMessage("q" * asked, id="next")]
    window = hooks.policy.window(
        grown, budget=hooks.budget - hooks.summary_tokens, system=hooks.system_prompt
    )
    if messages_to_fold(grown, window.start, None, after_turns=hooks.summary_after_turns):
        return window.start
    return None


def campaign(system_tokens: int, asked: int, answered: int) -> tuple[int, int, Any]:
    """(the first state whose round asks for a fold ahead, the first state whose next run
    must fold, the fold planned on the state that asked): states counted in turns."""
    folding = job("s" * system_tokens)
    history: list[BaseMessage] = []
    wanted_at = plan = None
    for index in range(1, 200):
        history = [*history, *turn(index, asked, answered)]
        if wanted_at is None and folding.wanted({"messages": history}):
            wanted_at, plan = index, folding.plan({"messages": history})
        need = must_fold(folding, history, asked)
        if need is not None:
            return wanted_at or index, index, (plan, need, history)
    raise AssertionError("the thread never had to fold")


@pytest.mark.parametrize(
    ("system_tokens", "asked", "answered"),
    [
        (50, 60, 40),  # a small system prompt
        (550, 60, 40),  # the follow-up benchmark: prompt and memory take ~half the budget
        (700, 60, 40),  # past 60 %: the old fold ahead overflowed and was never made
        (300, 20, 150),  # long answers
    ],
)
def test_a_fold_is_asked_for_two_runs_before_a_run_would_have_to_fold(
    system_tokens: int, asked: int, answered: int
) -> None:
    wanted_at, need_at, (plan, _, _) = campaign(system_tokens, asked, answered)
    assert need_at - wanted_at >= AHEAD_RUNS - 1, (
        f"asked for after turn {wanted_at}, needed by the run after turn {need_at}: "
        f"the worker has {need_at - wanted_at} run(s) to make it"
    )
    assert plan is not None
    assert plan.through is not None, "the fold planned folds something"


@settings(max_examples=200, deadline=None)
@given(
    system_tokens=st.integers(min_value=0, max_value=700),
    asked=st.integers(min_value=5, max_value=80),
    answered=st.integers(min_value=5, max_value=120),
)
def test_the_fold_asked_for_is_early_and_covers_the_run_it_is_for(
    system_tokens: int, asked: int, answered: int
) -> None:
    room = BUDGET - int(BUDGET * SUMMARY_SHARE) - system_tokens
    if room < 5 * (asked + answered):  # a window of fewer than five turns: no time to fold
        return
    wanted_at, need_at, (plan, need, history) = campaign(system_tokens, asked, answered)
    assert need_at - wanted_at >= AHEAD_RUNS - 1
    assert plan is not None
    assert plan.through is not None
    # the worker read the state that asked; the run that must fold takes the fold when it
    # covers everything before that run's window
    covered = index_of(history, plan.through)
    assert covered is not None
    assert covered >= need - 1, (covered, need)


def test_fold_room_never_frees_the_newest_turn_and_leaves_more_than_it_asks() -> None:
    for budget, fixed, newest in [(1125, 550, 100), (1125, 1000, 100), (8000, 600, 300)]:
        want, leave = fold_room(budget, fixed, newest)
        assert fixed + newest <= leave <= want <= budget
        if budget - fixed >= (AHEAD_RUNS + 3) * newest:
            assert want - leave >= 2 * newest, "a fold frees two turns beyond the trigger"


def test_newest_turn_tokens_counts_the_newest_answered_turn() -> None:
    counter = CharacterCounter()
    history = [*turn(1, 10, 20), *turn(2, 30, 40)]
    newest = sum(counter.count(message) for message in history[2:])
    assert newest_turn_tokens(history, counter) == newest
    # a run's own message, not answered yet: the turn before it
    assert newest_turn_tokens([*history, HumanMessage("q" * 5, id="n")], counter) == newest
    assert newest_turn_tokens([], counter) == 0


def test_a_fold_made_on_an_earlier_summary_is_taken_when_it_reaches_further() -> None:
    """A run may take an earlier fold made ahead (or fold itself) while a later one is being
    made on the summary before it. That later fold covers the thread from its start through
    its message, so it may still take the state summary's place when it reaches further; it
    was dropped (base versions had to be equal) and the run after folded itself."""
    from threadkeeper.domain.summary import AheadSummary, Summary, ahead_reach

    history = [m for index in range(1, 7) for m in turn(index, 10, 10)]
    state = Summary("v1", 1, "a2")  # the state's summary: folded through turn 2
    later = AheadSummary(base_version=0, through_id="a4", text="through turn 4")
    assert ahead_reach(later, state, history) == index_of(history, "a4")
    assert ahead_reach(later, None, history) == index_of(history, "a4")
    short = AheadSummary(base_version=0, through_id="a2", text="through turn 2")
    assert ahead_reach(short, state, history) is None, "reaches no further than the state's"
    newer_base = AheadSummary(base_version=2, through_id="a5", text="on a summary not here")
    assert ahead_reach(newer_base, state, history) is None
    gone = AheadSummary(base_version=1, through_id="a9", text="a message no longer here")
    assert ahead_reach(gone, state, history) is None
    assert ahead_reach(None, state, history) is None
