"""``SliceSums`` (issue 12): sums of a per-message value over runs of messages answered from
prefix sums of runs seen before — always the sum a pass over the messages gives, whatever
the order of queries, extensions, replacements and in-place content changes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.domain import tokens
from threadkeeper.domain.tokens import SliceSums


def value(message: BaseMessage) -> tuple[int, int]:
    text = str(message.content)
    calls = len(getattr(message, "tool_calls", []) or [])
    return len(text), text.count("a") + 10 * calls


def plain(messages: list[BaseMessage]) -> tuple[int, int]:
    values = [value(m) for m in messages]
    return sum(v[0] for v in values), sum(v[1] for v in values)


def _message(key: int) -> BaseMessage:
    if key % 3 == 0:
        return HumanMessage(f"question {key} " + "a" * (key % 7), id=f"h{key}")
    calls = [{"name": "f", "args": {"k": key}, "id": f"c{key}"}] if key % 5 == 0 else []
    return AIMessage(f"answer {key}", id=f"a{key}", tool_calls=calls)


OPERATION = st.one_of(
    st.tuples(st.just("query"), st.integers(0, 60), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("append"), st.integers(1, 5)),
    st.tuples(st.just("copy"), st.integers(0, 60)),
    st.tuples(st.just("assign"), st.integers(0, 60)),
    st.tuples(st.just("calls"), st.integers(0, 60)),
    st.tuples(st.just("fresh"), st.integers(0, 60), st.integers(0, 60)),
)


@settings(max_examples=3 * settings().max_examples, deadline=None)
@given(st.integers(0, 30), st.lists(OPERATION, max_size=25))
def test_a_sum_is_what_a_pass_over_the_messages_gives(size: int, operations: list[Any]) -> None:
    sums = SliceSums(value, 2)
    base = [_message(k) for k in range(size)]
    made = size
    for step, operation in enumerate(operations):
        name = operation[0]
        if name == "append":
            base += [_message(made + k) for k in range(operation[1])]
            made += operation[1]
            continue
        if not base:
            continue
        at = operation[1] % len(base)
        if name == "copy":  # another object, other content
            base[at] = base[at].model_copy(update={"content": f"{base[at].content} {step}a"})
        elif name == "assign":  # the same object given new content
            base[at].content = f"{base[at].content} ({step}) aa"
        elif name == "calls" and isinstance(base[at], AIMessage):
            base[at].tool_calls = [{"name": "g", "args": {}, "id": f"g{step}", "type": "tool_call"}]
        elif name in ("query", "fresh"):
            start, end = sorted((at, operation[2] % (len(base) + 1)))
            part = base[start:end]
            if name == "fresh":  # equal messages, other objects (a fresh read)
                part = [m.model_copy() for m in part]
            query = tuple(part) if name == "query" and operation[3] else part
            assert sums.total(query) == plain(part)


def test_a_late_window_is_summed_from_the_run_before() -> None:
    """The next window — the old one less its oldest turn, plus two messages — costs the
    values of the two new messages only."""
    seen: list[BaseMessage] = []

    def counted(message: BaseMessage) -> tuple[int, int]:
        seen.append(message)
        return value(message)

    sums = SliceSums(counted, 2)
    history = [_message(k) for k in range(300)]
    sums.total(history[100:299])
    seen.clear()
    assert sums.total(history[102:]) == plain(history[102:])
    assert seen == [history[299]]
    seen.clear()
    assert sums.total(tuple(history[150:250])) == plain(history[150:250])
    assert seen == []


def test_a_full_table_is_emptied(monkeypatch: Any) -> None:
    monkeypatch.setattr(tokens, "_SLICE_LIMIT", 10)
    sums = SliceSums(value, 2)
    history = [_message(k) for k in range(30)]
    for start in range(0, 30, 6):
        assert sums.total(history[start : start + 6]) == plain(history[start : start + 6])
    assert len(sums._where) <= 10
