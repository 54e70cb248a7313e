"""``adapters.ledger_codec``: a ledger row's message in its compact form reads back as the
very message ``JsonPlusSerializer``'s form reads back as — same class, fields, ids, content,
tool calls, metadata, usage, even the set of fields given — and is much smaller; what the
compact form cannot hold exactly is written in the serializer's form; rows of that form read
as before."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadkeeper.adapters import ledger_codec as codec
from threadkeeper.adapters.serde import checkpoint_serializer
from threadkeeper.domain.errors import StoredDataRefused

SERDE = checkpoint_serializer()
TEXT = "بیمه‌نامه شما تا پایان سال معتبر است. 保单有效期至年底。 Your policy is valid. 🙂"


class Custom(HumanMessage):
    """A subclass: not one of the codec's classes."""


def messages() -> list[BaseMessage]:
    run_id = str(uuid.uuid4())
    stamp = {"at": datetime.now(UTC).isoformat(), "run_id": run_id}
    return [
        HumanMessage(TEXT, id=str(uuid.uuid4()), response_metadata={"threadkeeper": stamp}),
        HumanMessage(TEXT),  # no id
        HumanMessage([{"type": "text", "text": TEXT}, {"type": "image_url", "image_url": "x"}]),
        AIMessage(
            TEXT,
            id=f"lc_run--{uuid.uuid4()}-0",
            additional_kwargs={"threadkeeper": {"status": "answered", "citations": ["kb#1"]}},
            response_metadata={
                "model_name": "builtin",
                "finish_reason": "stop",
                "threadkeeper": {"status": "answered", "citations": [], "at": stamp["at"]},
            },
            usage_metadata={
                "input_tokens": 1234,
                "output_tokens": 56,
                "total_tokens": 1290,
                "input_token_details": {"cache_read": 1000},
            },
        ),
        AIMessage(
            "",
            id=str(uuid.uuid4()),
            tool_calls=[
                {"name": "search", "args": {"query": TEXT, "k": 3}, "id": "call_1"},
                {"name": "lookup", "args": {}, "id": "call_2"},
            ],
            invalid_tool_calls=[
                {"name": "x", "args": "{not json", "id": "call_3", "error": "bad", "type": "x"}
            ],
            additional_kwargs={"refusal": None, "nested": {"a": [1, 2.5, True, None]}},
        ),
        AIMessage("", name="agent", example=True),
        ToolMessage(TEXT, tool_call_id="call_1", id=str(uuid.uuid4()), name="search"),
        ToolMessage("boom", tool_call_id="call_2", status="error", artifact={"raw": [1, 2]}),
        SystemMessage("You are the assistant."),
        ChatMessage(content="hi", role="critic"),
        AIMessageChunk(content="partial", id="c1", chunk_position="last"),
        HumanMessage(TEXT, additional_kwargs={"when": datetime(2026, 12, 1, tzinfo=UTC)}),
        HumanMessage("", id="empty"),
    ]


def _same(a: BaseMessage, b: BaseMessage, *, fields_set: bool = True) -> None:
    assert type(a) is type(b)
    assert a == b
    assert a.__dict__ == b.__dict__
    if fields_set:  # a decoded message was given every field, as the serializer gives them
        assert a.model_fields_set == b.model_fields_set
    assert a.model_dump() == b.model_dump()
    assert repr(a) == repr(b)


@pytest.mark.parametrize("message", messages(), ids=lambda m: f"{type(m).__name__}")
def test_a_message_reads_back_as_the_serializer_would_read_it(message: BaseMessage) -> None:
    legacy = SERDE.loads_typed(SERDE.dumps_typed(message))
    type_, body = codec.encode(message, SERDE)
    assert type_ in codec.FORMATS
    back = codec.decode(type_, body, SERDE)
    _same(back, legacy)
    _same(back, message, fields_set=False)


def test_the_compact_form_is_much_smaller() -> None:
    sizes: list[tuple[int, int]] = []
    for message in messages()[:5]:
        _, legacy = SERDE.dumps_typed(message)
        raw = codec.pack(message)
        assert raw is not None
        sizes.append((len(raw), len(legacy)))
        assert len(raw) < len(legacy)
    ai_compact, ai_legacy = sizes[3]
    assert ai_legacy - ai_compact > 150, sizes  # names of every field, defaults included


def test_what_the_compact_form_cannot_hold_is_written_as_the_serializer_writes_it() -> None:
    """Written in the serializer's form, which LangGraph reads back as the subclass; the ledger
    refuses to: a subclass is a type threadkeeper does not store (``serde.STORED_TYPES``)."""
    message = Custom(content=TEXT, id="custom")
    for verify in (False, True):
        type_, body = codec.encode(message, SERDE, verify=verify)
        assert (type_, body) == SERDE.dumps_typed(message)
        allowing = JsonPlusSerializer(allowed_msgpack_modules=[Custom])
        assert type(allowing.loads_typed((type_, body))) is Custom
        with pytest.raises(StoredDataRefused, match=f"{__name__}.Custom"):
            codec.decode(type_, body, SERDE)


@pytest.mark.parametrize("message", messages(), ids=lambda m: f"{type(m).__name__}")
def test_verifying_changes_nothing_for_a_message_it_holds(message: BaseMessage) -> None:
    assert codec.encode(message, SERDE, verify=True) == codec.encode(message, SERDE)


def test_rows_of_the_serializers_form_read_as_before() -> None:
    for message in messages():
        type_, body = SERDE.dumps_typed(message)
        assert type_ == "msgpack"
        _same(codec.decode(type_, body, SERDE), SERDE.loads_typed((type_, body)))


def test_compression_is_used_only_where_it_is_shorter() -> None:
    short = HumanMessage("ok", id="1")
    assert codec.encode(short, SERDE)[0] == codec.COMPACT
    long = HumanMessage(TEXT * 20, id="2")
    type_, body = codec.encode(long, SERDE)
    assert type_ == codec.COMPRESSED
    raw = codec.pack(long)
    assert raw is not None
    assert len(body) < len(raw)


def test_the_stored_tables_are_append_only() -> None:
    """A row names its class and fields by position: these prefixes must never change."""
    head: dict[str, Any] = {
        "classes": [c.__name__ for c in codec.CLASSES[:6]],
        "fields": list(codec.FIELDS[:9]),
    }
    assert head == {
        "classes": [
            "HumanMessage",
            "AIMessage",
            "ToolMessage",
            "SystemMessage",
            "ChatMessage",
            "FunctionMessage",
        ],
        "fields": [
            "content",
            "id",
            "additional_kwargs",
            "response_metadata",
            "name",
            "type",
            "tool_calls",
            "invalid_tool_calls",
            "usage_metadata",
        ],
    }
