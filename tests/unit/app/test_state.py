"""``app.state.merge_messages`` is LangGraph's ``add_messages``: the same result for any
sequence of merges — a list merged again (a conditional edge's fresh read), lists changed in
place between merges, replacements, removals, messages without ids, dicts and chunks — and
the index it keeps from one merge to the next is what makes a late turn's merge cheap."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.messages.utils import convert_to_messages
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from threadkeeper.app import state
from threadkeeper.app.agent import AgentState
from threadkeeper.app.state import merge_messages

KINDS = ("human", "ai", "tool", "dict", "chunk", "no-id", "remove", "remove-all")


def _message(kind: str, key: int) -> Any:
    """A fresh object for (kind, key): the two sides of a comparison build their own."""
    mid = f"m{key}"
    if kind == "human":
        return HumanMessage(f"question {key}", id=mid)
    if kind == "ai":
        return AIMessage(f"answer {key}", id=mid)
    if kind == "tool":
        return ToolMessage(f"result {key}", tool_call_id=f"c{key}", id=mid)
    if kind == "dict":
        return {"role": "user", "content": f"dict {key}", "id": mid}
    if kind == "chunk":
        return AIMessageChunk(f"chunk {key}", id=mid)
    if kind == "no-id":
        return HumanMessage(f"no id {key}")
    if kind == "remove":
        return RemoveMessage(id=mid)
    return RemoveMessage(id=REMOVE_ALL_MESSAGES)


MESSAGE = st.tuples(st.sampled_from(KINDS), st.integers(0, 12))
OPERATION = st.one_of(
    st.tuples(st.just("merge"), st.lists(MESSAGE, max_size=4)),
    st.tuples(st.just("merge-again"), st.lists(MESSAGE, max_size=3)),
    st.tuples(st.just("append"), MESSAGE),
    st.tuples(st.just("replace"), st.integers(0, 30), MESSAGE),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("read-back"), st.booleans()),
)


def _replay(reducer: Any, start: list[tuple[str, int]], operations: list[Any]) -> list[Any]:
    """What ``reducer`` makes of the operations: each merge's result or its error."""
    counter = itertools.count()
    real = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=next(counter))  # type: ignore[assignment]
    try:
        current: list[Any] = convert_to_messages(
            [_message(k, i) for k, i in start if k not in ("remove", "remove-all")]
        )
        previous = current
        seen: list[Any] = []
        for operation in operations:
            name = operation[0]
            try:
                if name in ("merge", "merge-again"):
                    left = previous if name == "merge-again" else current
                    result = reducer(left, [_message(k, i) for k, i in operation[1]])
                    previous, current = current, result
                    seen.append([(type(m).__name__, m.id, m.content) for m in result])
                elif name == "append" and operation[1][0] not in ("remove", "remove-all"):
                    current.append(convert_to_messages([_message(*operation[1])])[0])
                elif name == "replace" and current:
                    kind, key = operation[2]
                    if kind not in ("remove", "remove-all"):
                        message = convert_to_messages([_message(kind, key)])[0]
                        current[operation[1] % len(current)] = message
                elif name == "delete" and current:
                    del current[operation[1] % len(current)]
                elif name == "read-back":  # the checkpoint read back: a new list, the same
                    # messages (the serializer's memo) or equal copies (a fresh process)
                    current = [m.model_copy() for m in current] if operation[1] else [*current]
            except ValueError as error:
                seen.append(("error", str(error)))
        return seen
    finally:
        uuid.uuid4 = real  # type: ignore[assignment]


@settings(max_examples=3 * settings().max_examples, deadline=None)
@given(st.lists(MESSAGE, max_size=12), st.lists(OPERATION, max_size=10))
def test_merge_messages_is_add_messages(
    start: list[tuple[str, int]], operations: list[Any]
) -> None:
    state._INDEXES.clear()
    state._BY_FIRST.clear()
    assert _replay(merge_messages, start, operations) == _replay(add_messages, start, operations)


def _long_history() -> list[BaseMessage]:
    return [
        HumanMessage(f"q{i}", id=f"h{i}") if i % 2 == 0 else AIMessage(f"a{i}", id=f"a{i}")
        for i in range(400)
    ]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One item per id index ``app.state`` builds over a list (its ``enumerate`` calls)."""
    calls: list[int] = []
    enumerate_ = enumerate

    def counted(*args: Any) -> Any:
        calls.append(1)
        return enumerate_(*args)

    monkeypatch.setattr(state, "enumerate", counted, raising=False)
    return calls


def test_a_merge_onto_the_list_it_returned_reuses_its_index(built: list[int]) -> None:
    history = _long_history()
    first = merge_messages(history, [HumanMessage("new", id="new")])
    built.clear()
    second = merge_messages(first, [AIMessage("reply", id="reply")])
    again = merge_messages(first, [AIMessage("reply", id="reply")])  # a fresh read's
    assert not built, "no index was built over the history"
    assert (
        second == again == [*history, HumanMessage("new", id="new"), AIMessage("reply", id="reply")]
    )
    first.append(AIMessage("changed in place", id="x"))
    merge_messages(first, [AIMessage("later", id="later")])
    assert built, "a list changed since its merge is indexed afresh"


def test_the_agent_state_merges_with_it() -> None:
    hints = AgentState.__annotations__["messages"]
    assert "merge_messages" in str(hints)


def test_a_runs_first_merge_onto_the_checkpoint_read_back_reuses_the_index(
    built: list[int],
) -> None:
    """The next run's first merge is onto a new list of the same messages (the checkpoint
    read back): the index of the thread's last merge serves it."""
    history = _long_history()
    last = merge_messages(history, [HumanMessage("new", id="new")])
    built.clear()
    read_back = [*last]
    merged = merge_messages(read_back, [AIMessage("reply", id="reply")])
    assert not built, "no index was built over the history"
    assert merged == [*last, AIMessage("reply", id="reply")]
    shorter = [*last][:-1]  # not the list the index was made for
    merge_messages(shorter, [AIMessage("other", id="other")])
    assert built, "a list other than the merged one is indexed afresh"
