"""Stored bytes never run code: every decode of stored bytes — the SQL profiles' checkpoint
serializer, the message ledger's rows, the Redis serializer's JSON and msgpack — reads only the
types threadkeeper stores (``adapters.serde.STORED_TYPES``) and refuses anything else with
``StoredDataRefused``, naming it: never importing, constructing or calling what it names, and
never handing back a value with the foreign part dropped (LangGraph's strict mode alone answers
with the raw payload, or ``None``).

Each payload names a tripwire (``tests.support.tripwire``) that records any call, in the forms
the serializers write: msgpack extension types 0–5 and LangChain constructor envelopes.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
import uuid
from collections import deque
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import ormsgpack
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command, Interrupt, Send

from tests.support import tripwire
from tests.support.tripwire import (
    FOREIGN_ENVELOPES,
    FOREIGN_EXT,
    FOREIGN_EXTS,
    FOREIGN_NAME,
    Kept,
    TripwireRecord,
    packed,
    raw,
)
from threadkeeper.adapters import ledger_codec as codec
from threadkeeper.adapters.redis_mysql.serde import MemoRedisSerializer
from threadkeeper.adapters.serde import MemoSerializer, MessageMemo, checkpoint_serializer
from threadkeeper.domain.errors import StoredDataRefused


@pytest.fixture(autouse=True)
def _no_calls() -> Iterator[None]:
    tripwire.reset()
    yield
    assert tripwire.CALLS == [], "a tripwire named by stored bytes was called"


def _refused(serde: Any, blob: tuple[str, bytes], name: str) -> None:
    with pytest.raises(StoredDataRefused) as refused:
        serde.loads_typed(blob)
    assert refused.value.refused == name
    assert name in str(refused.value)


def _message_with(value: Any) -> Kept:
    """An ``AIMessage`` as ``JsonPlusSerializer`` writes it, ``value`` in its metadata."""
    message = AIMessage(
        "Your policy covers the EU.", id="a1", additional_kwargs={"x": "placeholder"}
    )
    ext = raw(JsonPlusSerializer().dumps_typed(message)[1])
    module, name, fields, method = raw(ext.data)
    fields["additional_kwargs"]["x"] = value
    return Kept(ext.code, packed([module, name, fields, method]))


def _checkpoint_with(value: Any) -> tuple[str, bytes]:
    """A checkpoint's msgpack with ``value`` among its channel values."""
    return "msgpack", packed(
        {"v": 4, "channel_values": {"messages": [_message_with("fine")], "planted": value}}
    )


# -- the SQL profiles' checkpoint serializer -----------------------------------------------------


@pytest.mark.parametrize("form", list(FOREIGN_EXTS))
def test_every_extension_form_naming_a_foreign_type_is_refused(form: str) -> None:
    ext, name = FOREIGN_EXTS[form]
    _refused(checkpoint_serializer(), _checkpoint_with(ext), name)


def test_os_getenv_is_refused_and_not_called() -> None:
    """The issue's own kind of payload: a function of the standard library (its call would
    hand back the environment variable's value in place of the stored one)."""
    ext = ormsgpack.Ext(0, packed(["os", "getenv", "HOME"]))
    _refused(checkpoint_serializer(), _checkpoint_with(ext), "os.getenv")


def test_a_foreign_type_inside_a_message_is_refused_and_the_memo_does_not_keep_it() -> None:
    serde = checkpoint_serializer()
    blob = "msgpack", packed({"messages": [_message_with(FOREIGN_EXT)]})
    for _ in range(2):  # the second read finds nothing remembered: refused again
        _refused(serde, blob, FOREIGN_NAME)
    assert len(serde.memo) == 0


def test_a_foreign_type_at_the_top_of_the_blob_is_refused() -> None:
    _refused(checkpoint_serializer(), ("msgpack", packed(FOREIGN_EXT)), FOREIGN_NAME)


def test_an_extension_type_threadkeeper_never_writes_is_refused() -> None:
    """A numpy array (code 6) or an unknown code: LangGraph decodes the one and hands back
    ``None`` for the other; threadkeeper stores neither."""
    for code in (6, 42):
        blob = _checkpoint_with(ormsgpack.Ext(code, b"\x90"))
        _refused(checkpoint_serializer(), blob, f"msgpack extension type {code}")


def test_the_pickle_and_json_formats_are_refused() -> None:
    """``pickle`` runs code by design; ``json`` (LangChain constructor dicts) is a format
    LangGraph has not written since its msgpack serializer, nor has threadkeeper ever."""

    class Planted:
        def __reduce__(self) -> Any:
            return tripwire.tripwire, ("planted",)

    envelope = {"lc": 2, "type": "constructor", "id": [*tripwire.MODULE.split("."), "tripwire"]}
    for blob in (("pickle", pickle.dumps(Planted())), ("json", json.dumps(envelope).encode())):
        _refused(checkpoint_serializer(), blob, f"the {blob[0]!r} format")


def test_a_memo_must_stand_before_the_strict_hook() -> None:
    """A memo handed to ``MemoSerializer`` decodes for it: one over LangGraph's permissive hook
    would let every foreign type through."""
    with pytest.raises(TypeError):
        MemoSerializer(MessageMemo(JsonPlusSerializer()._unpack_ext_hook))


# -- the message ledger ---------------------------------------------------------------------------


def _ledger_body(value: Any) -> bytes:
    compact = codec.pack(AIMessage("Covered in the EU.", id="a1"))
    assert compact is not None
    code, fields = raw(compact)
    fields[codec.FIELDS.index("additional_kwargs")] = {"x": value}
    return packed([code, fields])


@pytest.mark.parametrize("memo", ["empty", "holding a message"])
@pytest.mark.parametrize("row_type", ["tk1", "tk1z", "msgpack"])
def test_a_ledger_row_naming_a_foreign_type_is_refused(row_type: str, memo: str) -> None:
    """Before the fix the codec took ``serde._unpack_ext_hook or LangGraph's strict hook``: an
    empty memo is falsy, so a row read before any message silently lost the foreign value
    (LangGraph's strict hook hands back the raw payload), and one read after ran it."""
    serde = checkpoint_serializer()
    if memo != "empty":
        serde.loads_typed(serde.dumps_typed([AIMessage("An answer read before. " * 3, id="r")]))
        assert len(serde.memo) == 1
    if row_type == "msgpack":
        body = packed(_message_with(FOREIGN_EXT))
    else:
        body = _ledger_body(FOREIGN_EXT)
        if row_type == "tk1z":
            body = codec._compress(body)
    with pytest.raises(StoredDataRefused) as refused:
        codec.decode(row_type, body, serde)
    assert refused.value.refused == FOREIGN_NAME


def test_a_ledger_row_is_refused_whatever_serializer_the_ledger_was_given() -> None:
    """The codec reads every row threadkeeper's way, even for a saver built with LangGraph's
    default serializer."""
    with pytest.raises(StoredDataRefused):
        codec.decode("tk1", _ledger_body(FOREIGN_EXT), JsonPlusSerializer())
    with pytest.raises(StoredDataRefused):
        codec.decode("msgpack", packed(_message_with(FOREIGN_EXT)), JsonPlusSerializer())


# -- the Redis serializer -------------------------------------------------------------------------


def _redis_blob(value: Any) -> tuple[str, bytes]:
    """A checkpoint's channel values as the Redis serializer writes them (JSON), ``value`` in
    a message's metadata."""
    message = AIMessage("Covered.", id="a1", additional_kwargs={"x": "placeholder"}).to_json()
    envelope = json.loads(json.dumps(message, default=str))
    envelope["kwargs"]["additional_kwargs"]["x"] = value
    return "json", orjson.dumps({"messages": [envelope]})


@pytest.mark.parametrize("form", list(FOREIGN_ENVELOPES))
def test_a_redis_envelope_naming_a_foreign_type_is_refused(form: str) -> None:
    envelope, name = FOREIGN_ENVELOPES[form]
    serde = MemoRedisSerializer()
    _refused(serde, ("json", orjson.dumps({"messages": [], "planted": envelope})), name)
    _refused(serde, _redis_blob(envelope), name)  # inside a message
    _refused(serde, _redis_blob(envelope), name)  # and again: the memo kept nothing


def test_the_redis_serializers_msgpack_and_pickle_are_refused() -> None:
    serde = MemoRedisSerializer()
    _refused(serde, _checkpoint_with(FOREIGN_EXT), FOREIGN_NAME)

    class Planted:
        def __reduce__(self) -> Any:
            return tripwire.tripwire, ("planted",)

    _refused(serde, ("pickle", pickle.dumps(Planted())), "the 'pickle' format")


# -- what threadkeeper stores still reads ---------------------------------------------------------


def _messages() -> list[BaseMessage]:
    return [
        HumanMessage("Is my car covered abroad?", id="h1"),
        HumanMessageChunk(content="Is my", id="h2"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "search", "args": {"q": "abroad"}, "id": "c1"}],
            response_metadata={"threadkeeper": {"at": "2026-12-01T10:00:00+00:00"}},
            usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        ),
        AIMessageChunk(content="Yes", id="a2"),
        ToolMessage("EU only", tool_call_id="c1", id="t1", artifact={"doc": 1}),
        ToolMessageChunk(content="EU", tool_call_id="c1", id="t2"),
        SystemMessage("Be brief.", id="s1"),
        SystemMessageChunk(content="Be", id="s2"),
        ChatMessage(content="hi", role="critic", id="c1"),
        ChatMessageChunk(content="hi", role="critic", id="c2"),
        FunctionMessage(content="42", name="f", id="f1"),
        FunctionMessageChunk(content="4", name="f", id="f2"),
        AIMessage("Yes, in the EU.", id="a3", additional_kwargs={"citations": ["x#1"]}),
    ]


def _values() -> dict[str, Any]:
    """What LangGraph and threadkeeper put in a checkpoint, and values LangGraph's safe types
    cover."""
    return {
        "messages": _messages(),
        "remove": [RemoveMessage(id="h1")],
        "summary": {"text": "The user asked about cover abroad.", "turns": 3},
        "sends": [Send("tools", {"tool_call": {"name": "search", "id": "c1", "args": {}}})],
        "interrupts": [Interrupt(value="approve?", id="i1")],
        "command": Command(goto="agent", update={"x": 1}),
        "at": datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
        "naive": datetime(2026, 12, 1, 10, 0),
        "day": date(2026, 12, 1),
        "clock": time(10, 0, tzinfo=timezone(timedelta(hours=2))),
        "span": timedelta(days=1, seconds=3),
        "zone": ZoneInfo("Europe/Berlin"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "amount": Decimal("12.50"),
        "tags": {"a", "b"},
        "frozen": frozenset({1, 2}),
        "queue": deque([1, 2]),
        "path": Path("/tmp/x"),
        "pattern": re.compile("a+", re.I),
        "ip": IPv4Address("10.0.0.1"),
    }


def test_every_type_threadkeeper_stores_reads_back_through_the_sql_serializer() -> None:
    serde = checkpoint_serializer()
    values = _values()
    back = serde.loads_typed(serde.dumps_typed(values))
    assert back == values
    assert [type(m) for m in back["messages"]] == [type(m) for m in values["messages"]]


def test_every_message_reads_back_through_the_ledger() -> None:
    serde = checkpoint_serializer()
    for message in _messages():
        back = codec.decode(*codec.encode(message, serde), serde)
        assert type(back) is type(message)
        assert back == message


def test_every_type_threadkeeper_stores_reads_back_through_the_redis_serializer() -> None:
    serde = MemoRedisSerializer()
    values = {
        "messages": _messages(),
        "summary": {"text": "The user asked about cover abroad.", "turns": 3},
        "sends": [Send("tools", {"x": 1})],
        "interrupts": [Interrupt(value="approve?", id="i1")],
        "tags": {"a", "b"},
    }
    blob = serde.dumps_typed(values)
    assert blob[0] == "json"
    back = serde.loads_typed(blob)
    assert back == values
    assert [type(m) for m in back["messages"]] == [type(m) for m in values["messages"]]
    with_bytes = {"messages": _messages(), "raw": b"\x00\x01"}  # the msgpack fallback
    blob = serde.dumps_typed(with_bytes)
    assert blob[0] == "msgpack"
    assert serde.loads_typed(blob) == with_bytes


def test_the_allowlist_is_what_threadkeeper_stores() -> None:
    """Pinned: a type added to the allowlist (here or by a LangGraph upgrade widening its safe
    set) shows up here, to be looked at."""
    from threadkeeper.adapters.serde import STORED_TYPES

    messages = {
        (f"langchain_core.messages.{module}", name)
        for module, names in {
            "base": ("BaseMessage", "BaseMessageChunk"),
            "human": ("HumanMessage", "HumanMessageChunk"),
            "ai": ("AIMessage", "AIMessageChunk"),
            "system": ("SystemMessage", "SystemMessageChunk"),
            "chat": ("ChatMessage", "ChatMessageChunk"),
            "tool": ("ToolMessage", "ToolMessageChunk"),
            "function": ("FunctionMessage", "FunctionMessageChunk"),
            "modifier": ("RemoveMessage",),
        }.items()
        for name in names
    }
    langgraph = {
        ("langgraph.types", name)
        for name in (
            "Send",
            "TimeoutPolicy",
            "Interrupt",
            "Command",
            "StateSnapshot",
            "PregelTask",
            "Overwrite",
        )
    } | {("langgraph.store.base", "Item"), ("langgraph.store.base", "GetOp")}
    values = {
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("uuid", "UUID"),
        ("decimal", "Decimal"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("collections", "deque"),
        *(
            ("ipaddress", f"IPv{v}{kind}")
            for v in (4, 6)
            for kind in ("Address", "Interface", "Network")
        ),
        *(
            (module, name)
            for module in ("pathlib", "pathlib._local")
            for name in ("Path", "PosixPath", "WindowsPath")
        ),
        ("zoneinfo", "ZoneInfo"),
        ("re", "compile"),
        ("langchain_core.documents.base", "Document"),
    }
    assert set(STORED_TYPES) == messages | langgraph | values


def test_a_refusal_met_reading_a_thread_is_logged_with_the_thread_and_the_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from threadkeeper.adapters.serde import reading
    from threadkeeper.domain.threads import log_name

    key = "acme:user-1:claims"
    blob = "msgpack", packed({"messages": [_message_with(FOREIGN_EXT)], "secret": "Jane Doe"})
    with (
        caplog.at_level(logging.ERROR),
        pytest.raises(StoredDataRefused) as refused,
        reading(key),
    ):
        checkpoint_serializer().loads_typed(blob)
    assert refused.value.thread == log_name(key)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("threadkeeper")]
    assert len(lines) == 1
    assert FOREIGN_NAME in lines[0]
    assert log_name(key) in lines[0]
    for private in (key, "Jane Doe", "planted", "Your policy"):
        assert private not in lines[0]


def test_a_tripwire_record_is_a_dataclass_the_redis_library_would_construct() -> None:
    """The Redis library revives any dataclass an envelope names (``cls(**kwargs)``): the
    payload above is one, so its refusal is not a mere failure to import."""
    envelope, _ = FOREIGN_ENVELOPES["lc 2, a dataclass"]
    JsonPlusRedisSerializer().loads_typed(("json", orjson.dumps(envelope)))
    assert tripwire.CALLS == [("TripwireRecord", "planted")]
    assert isinstance(TripwireRecord("x"), TripwireRecord)
    tripwire.reset()


def test_a_refused_name_reaches_the_log_cut_and_on_one_line() -> None:
    """Whoever wrote the bytes chose the name: it cannot forge a log line or flood one."""
    ext = ormsgpack.Ext(0, packed(["os\nERROR forged line", "x" * 500, "planted"]))
    with pytest.raises(StoredDataRefused) as refused:
        checkpoint_serializer().loads_typed(_checkpoint_with(ext))
    assert "\n" not in refused.value.refused
    assert refused.value.refused.startswith("os\\nERROR forged line.xxx")
    assert len(refused.value.refused) <= 201
