"""``domain.compact``: a window as ranges of the thread's order plus explicit ids, a text as a
delta of an earlier version — both decode to exactly what was encoded."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.compact import (
    Segment,
    decode_segments,
    decode_text,
    decode_window,
    delta_size,
    encode_segments,
    encode_text,
    encode_window,
    in_order,
    order_since,
    text_digest,
    thread_order,
)
from threadkeeper.domain.runs import ModelCall, RunRecord

ids = st.text(alphabet="abcdefgh-123", min_size=1, max_size=6)


@given(st.lists(ids, max_size=40), st.lists(ids, max_size=40))
@settings(max_examples=400)
def test_segments_round_trip_for_any_items_and_order(items: list[str], order: list[str]) -> None:
    assert decode_segments(encode_segments(items, order), order) == items


@st.composite
def thread_and_window(draw: st.DrawFn) -> tuple[list[str], list[str], str]:
    """A thread's order, a run's human message in it, and a window as trimming makes them:
    a contiguous part of the order ending near the human message, with gaps (an omitted
    message, a summary's cut), and extra ids (tool calls and results, truncated results)
    interleaved — or anything at all."""
    order = [f"m{i}" for i in range(draw(st.integers(1, 60)))]
    anchor_at = draw(st.integers(0, len(order) - 1))
    start = draw(st.integers(0, anchor_at))
    window = order[start : anchor_at + 1]
    for _ in range(draw(st.integers(0, 3))):  # gaps
        if window:
            del window[draw(st.integers(0, len(window) - 1))]
    for _ in range(draw(st.integers(0, 4))):  # tool steps, truncated ids, strangers
        window.insert(draw(st.integers(0, len(window))), draw(ids))
    if draw(st.booleans()):
        window = draw(st.lists(st.sampled_from([*order, "x", "y"]), max_size=20))
    return order, window, order[anchor_at]


@given(thread_and_window())
@settings(max_examples=400)
def test_a_window_round_trips_in_its_order(case: tuple[list[str], list[str], str]) -> None:
    order, window, anchor = case
    assert decode_window(encode_window(window, order, anchor), order, anchor) == window


@given(thread_and_window(), st.integers(0, 30), st.integers(0, 30))
@settings(max_examples=300)
def test_a_window_decodes_in_a_later_or_compacted_order(
    case: tuple[list[str], list[str], str], dropped: int, grown: int
) -> None:
    """What replay finds later: the checkpoints' order grown at its end, or the archive's,
    of which a compacted state's order was the newest part — the same positions around the
    anchor."""
    order, window, anchor = case
    at = order.index(anchor)
    state = order[min(dropped, at) :]  # compaction kept the newest
    encoded = encode_window([i for i in window if i in state or i not in order], state, anchor)
    later = [*order, *(f"new{i}" for i in range(grown))]
    expected = [i for i in window if i in state or i not in order]
    assert decode_window(encoded, later, anchor) == expected


@st.composite
def history_and_windows(draw: st.DrawFn) -> tuple[list[BaseMessage], list[BaseMessage], str]:
    """A thread as the agent leaves it (questions, answers, tool calls and results, an empty
    answer), its newest question, and a run's windows' messages: mostly a newest part of the
    history with gaps, and sometimes messages the history does not have (a truncated tool
    result under a new id) or older ones."""
    history: list[BaseMessage] = []
    for turn in range(draw(st.integers(1, 25))):
        history.append(HumanMessage(f"q{turn}", id=f"h{turn}"))
        for step in range(draw(st.integers(0, 2))):
            call = f"c{turn}-{step}"
            history.append(
                AIMessage(
                    "", id=f"t{turn}-{step}", tool_calls=[{"name": "f", "args": {}, "id": call}]
                )
            )
            history.append(ToolMessage("r", id=f"r{turn}-{step}", tool_call_id=call))
        history.append(AIMessage(draw(st.sampled_from(["a", "", " "])), id=f"a{turn}"))
    humans = [i for i, m in enumerate(history) if isinstance(m, HumanMessage)]
    anchor_at = draw(st.sampled_from(humans))
    start = draw(st.integers(0, anchor_at))
    window = history[start : anchor_at + draw(st.integers(1, 4))]
    for _ in range(draw(st.integers(0, 3))):  # gaps
        if window:
            del window[draw(st.integers(0, len(window) - 1))]
    for _ in range(draw(st.integers(0, 2))):  # strangers and old messages
        stranger = draw(
            st.sampled_from([ToolMessage("cut", id="new-id", tool_call_id="c"), *history])
        )
        window.insert(draw(st.integers(0, len(window))), stranger)
    return history, window, str(history[anchor_at].id)


@given(history_and_windows())
@settings(max_examples=400)
def test_a_window_encodes_the_same_over_the_order_since_its_oldest_message(
    case: tuple[list[BaseMessage], list[BaseMessage], str],
) -> None:
    history, window, anchor = case
    ids = [str(m.id) for m in window]
    since = order_since(history, {str(m.id) for m in window if in_order(m)}, anchor)
    whole = thread_order(history)
    assert whole[len(whole) - len(since) :] == since  # the end of the order
    assert encode_window(ids, since, anchor) == encode_window(ids, whole, anchor)
    assert decode_window(encode_window(ids, since, anchor), whole, anchor) == ids


def test_the_order_since_reads_back_only_to_the_oldest_wanted_message() -> None:
    history: list[BaseMessage] = []
    for turn in range(100):
        history += [HumanMessage("q", id=f"h{turn}"), AIMessage("a", id=f"a{turn}")]
    assert order_since(history, {"h97", "a98"}, "h99") == ["h97", "a97", "h98", "a98", "h99", "a99"]
    assert order_since(history, {"not there"}, "h99") == thread_order(history)  # whole order


def test_a_plain_window_is_one_range_whatever_its_length() -> None:
    order = [f"m{i}" for i in range(400)]
    window = order[380:]
    assert encode_window(window, order, "m399") == ((-19, 1),)
    with_tools = [*order[390:], "call-1", "result-1"]
    assert encode_window(with_tools, order, "m399") == ((-9, 1), "call-1", "result-1")


def test_without_the_anchor_every_id_is_explicit() -> None:
    assert encode_window(["a", "b"], ["a", "b"], "h") == ("a", "b")
    assert decode_window(("a", "b"), [], "h") == ["a", "b"]
    with pytest.raises(ValueError, match="anchor"):
        decode_window(((0, 1),), ["a"], "h")
    with pytest.raises(ValueError, match="outside"):
        decode_window(((-3, 1),), ["a", "h"], "h")


def test_thread_order_is_human_messages_and_answers() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("q", id="h1"),
        AIMessage("", id="call", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),
        ToolMessage("r", tool_call_id="c1", id="t1"),
        AIMessage("answer", id="a1"),
        AIMessage(" ", id="blank"),
        HumanMessage("q2", id="h2"),
    ]
    assert thread_order(messages) == ["h1", "a1", "h2"]


lines = st.text(alphabet="ab \u0628\u0644\u0647\u662f-", max_size=12)


@given(st.lists(lines, max_size=30), st.lists(lines, max_size=30))
@settings(max_examples=400)
def test_a_text_round_trips_against_any_base(new: list[str], base: list[str]) -> None:
    text, older = "\n".join(new), "\n".join(base)
    assert decode_text(encode_text(text, older), older) == text


def test_a_rolling_summary_version_costs_the_lines_it_adds() -> None:
    head = ["Summary of the earlier conversation:", "- User: first", "- Assistant: first"]
    older = [*head, *(f"- User: question {i} with some words" for i in range(40))]
    newer = [*head, *older[5:], "- User: new question", "- Assistant: new answer"]
    segments = encode_text("\n".join(newer), "\n".join(older))
    assert segments == ((0, 3), (5, 43), "- User: new question", "- Assistant: new answer")
    assert delta_size(segments) < len("\n".join(newer).encode()) / 10


def test_text_digest_is_content_addressed() -> None:
    assert text_digest("a") == text_digest("a") != text_digest("b")
    assert len(text_digest("")) == 32


def test_model_call_ids_from_a_window_or_listed() -> None:
    listed = ModelCall(("h1", "a1"), None, 10, 100, "c")
    compact = ModelCall((), None, 10, 100, "c", window=((-1, 1), "t1"))
    assert listed.ids([], "h") == ["h1", "a1"]
    assert compact.ids(["a0", "h1", "a1"], "a1") == ["h1", "a1", "t1"]


def test_records_written_before_compact_windows_still_decode() -> None:
    """The shape records had: every id listed, every field written out."""
    old = (
        b'{"run_id":"r","thread_key":"t:u:x","tenant_id":"t","user_id":"u","thread_id":"x",'
        b'"human_message_id":"h","status":"answered","created_at":"2026-03-01T12:00:00Z",'
        b'"response":{},"system_prompt":"p","prompt_version":"v","chunk_ids":[],'
        b'"memory_keys":[],"model_calls":[{"message_ids":["h0","a0","h"],"summary":"s",'
        b'"tokens":1,"budget":2,"counter":"c"}],"checkpoint_id":null,"content_digest":"",'
        b'"message_id_given":false}'
    )
    record = msgspec.json.decode(old, type=RunRecord)
    assert record.model_calls[0].window is None
    assert record.model_calls[0].ids([], "h") == ["h0", "a0", "h"]
    segments: tuple[Segment, ...] = ((-2, 1),)
    assert msgspec.json.decode(msgspec.json.encode(segments), type=tuple[Segment, ...]) == (
        (-2, 1),
    )
