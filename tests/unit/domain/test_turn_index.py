"""``TurnWindowPolicy``'s turn index (issue 12): a policy that keeps each thread's index between
calls chooses exactly the window the plain pass back over the history chose, call after call,
as a thread grows, as a rolling summary moves the first candidate, and when a message of the
indexed part is replaced or given new content.

The reference is the window algorithm as it was before the index (``reference_window``, kept
here verbatim but for the ``first`` argument, applied by slicing as the trim hook did)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from tests.unit.domain.conversations import Conversation, budgets, conversations
from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.history import (
    TurnWindowPolicy,
    Window,
    _last_human_index,
    _whole_turn,
    steps_of,
)
from threadkeeper.domain.tokens import REPLY_PRIMING, TiktokenCounter, TokenCounter

COUNTER = TiktokenCounter("o200k_base")

PROPERTY = settings(
    max_examples=settings().max_examples,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def reference_window(
    counter: TokenCounter,
    whole: Sequence[BaseMessage],
    *,
    budget: int,
    system: str = "",
    summary: str | None = None,
    first: int = 0,
) -> Window:
    """The window as chosen before the turn index: one pass back over ``whole[first:]``."""
    history = whole[first:]
    count = counter.count
    fixed = REPLY_PRIMING + counter.count_system(system)
    newest = _last_human_index(history)
    if newest is None:
        if fixed > budget:
            raise ContextOverflow(fixed, budget)
        return Window((), None, fixed, budget, len(whole), counter=counter.name)
    human = history[newest]
    human_tokens = count(human)
    if human_tokens + REPLY_PRIMING > budget:
        raise MessageTooLarge(human_tokens, budget)
    if fixed + human_tokens > budget:
        raise ContextOverflow(fixed + human_tokens, budget)
    used = fixed + human_tokens
    steps, omitted = steps_of(history[newest + 1 :])
    tail: list[BaseMessage] = []
    whole_turn = True
    for index in range(len(steps) - 1, -1, -1):
        cost = sum(count(m) for m in steps[index])
        if used + cost > budget:
            omitted += sum(len(step) for step in steps[: index + 1])
            whole_turn = False
            break
        used += cost
        tail[:0] = steps[index]
    if summary:
        summary_tokens = counter.count_system(summary)
        if used + summary_tokens <= budget:
            used += summary_tokens
        else:
            summary = None
    else:
        summary = None
    if not whole_turn:
        return Window((human, *tail), summary, used, budget, newest + first, omitted, counter.name)
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
        summary,
        used,
        budget,
        start + first,
        omitted,
        counter.name,
    )


def outcome(call: object) -> Window | str:
    try:
        return call()  # type: ignore[operator, no-any-return]
    except (MessageTooLarge, ContextOverflow) as exc:
        return type(exc).__name__


def same(got: Window | str, want: Window | str) -> None:
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    assert [m.id for m in got.messages] == [m.id for m in want.messages]
    assert all(a is b for a, b in zip(got.messages, want.messages, strict=True))
    assert (got.summary, got.tokens, got.start, got.omitted) == (
        want.summary,
        want.tokens,
        want.start,
        want.omitted,
    )


@PROPERTY
@given(
    conversations(),
    budgets,
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 10**6)), min_size=1, max_size=12),
    st.data(),
)
def test_a_kept_index_chooses_what_one_pass_back_chose(
    conv: Conversation, budget: int, growth: list[tuple[int, int]], data: st.DataObject
) -> None:
    """One policy, one thread: the history grows by a few messages per call (a run's new
    messages; the list a new object each time, its messages the same objects), each call is
    made twice (the summary hook's budget, then trim's with a ``first``), and now and then a
    message already indexed is replaced by a copy with other content or given new content in
    place (longer or shorter), or the history restarts shorter. Every window equals the
    reference's."""
    policy = TurnWindowPolicy(COUNTER)
    full = [m.model_copy() for m in conv.history]  # objects of this example's own
    shown = 1
    for step, (grow, seed) in enumerate(growth):
        shown = min(len(full), shown + grow)
        history = list(full[:shown])
        edit = data.draw(
            st.sampled_from(["none", "none", "none", "copy", "assign", "shrink", "shorter"])
        )
        if edit == "copy" and shown > 1:  # a message replaced by another object
            at = seed % (shown - 1)
            old = history[at]
            history[at] = full[at] = old.model_copy(update={"content": f"{old.text} ({step})"})
        elif edit == "assign" and shown > 1:  # the same object given new content
            history[seed % (shown - 1)].content += f" ({step})"
        elif edit == "shrink" and shown > 1:  # ... and a cheaper one
            history[seed % (shown - 1)].content = "ok"
        elif edit == "shorter":
            shown = max(1, shown - grow)
            history = history[:shown]
        first = data.draw(st.integers(0, max(0, len(history) - 1)))
        for kwargs in (
            {"budget": budget, "system": conv.system},
            {"budget": budget, "system": conv.system, "summary": conv.summary, "first": first},
        ):
            got = outcome(lambda kw=kwargs, h=history: policy.window(h, **kw))
            want = outcome(lambda kw=kwargs, h=history: reference_window(COUNTER, h, **kw))
            same(got, want)


def test_a_late_turn_extends_the_index_instead_of_passing_over_the_history() -> None:
    """The second call on a grown history counts only its new messages."""
    counted: list[BaseMessage] = []

    class Tally(TiktokenCounter):
        def count(self, message: BaseMessage) -> int:
            counted.append(message)
            return super().count(message)

    policy = TurnWindowPolicy(Tally("o200k_base"))
    history: list[BaseMessage] = []
    for turn in range(50):
        history += [
            HumanMessage(f"question {turn}", id=f"h{turn}"),
            AIMessage(f"answer {turn}", id=f"a{turn}"),
        ]
    history.append(HumanMessage("the newest", id="h-new"))
    policy.window(history, budget=100_000)
    counted.clear()
    grown = [*history, AIMessage("an answer", id="a-new"), HumanMessage("next", id="h-next")]
    window = policy.window(grown, budget=100_000)
    assert len(window.messages) == len(grown)
    assert {m.id for m in counted} == {"h-new", "a-new", "h-next"}


def test_a_turn_made_cheaper_in_place_next_to_the_window_is_taken() -> None:
    """The turn just older than the window did not fit when indexed; its answer is then
    given a short text in place: the next window takes it, as a pass back would."""
    policy = TurnWindowPolicy(COUNTER)
    history: list[BaseMessage] = []
    for turn in range(10):
        answer = "a long answer " * 40 if turn == 6 else f"answer {turn}"
        history += [HumanMessage(f"q {turn}", id=f"h{turn}"), AIMessage(answer, id=f"a{turn}")]
    history.append(HumanMessage("the newest", id="h-new"))
    cheap = [*history[:13], AIMessage("ok", id="a6"), *history[14:]]
    budget = reference_window(COUNTER, cheap[12:], budget=10**6).tokens  # turns 6 (cheap) - 9
    before = policy.window(history, budget=budget)
    assert before.messages[0].id == "h7"
    history[13].content = "ok"  # turn 6's answer, the same object
    after = policy.window(history, budget=budget)
    same(after, reference_window(COUNTER, history, budget=budget))
    assert after.messages[0].id == "h6"
