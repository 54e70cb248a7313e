"""The redis-mysql saver writes the document LangGraph's Redis saver writes, byte for byte.

``HealingRedisSaver._dump_checkpoint`` keeps the channel values as the serializer's JSON bytes
and ``MemoRedisSerializer`` hands messages and scalars back without walking them (issue 12):
both are only cheaper ways to the same JSON, which is what these tests hold them to — against
``BaseRedisSaver._dump_checkpoint`` with LangGraph's own serializer, encoded by the client's
orjson encoder as ``JSON.SET`` sends it. No Redis is contacted (the clients never connect).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer
from langgraph.types import Send

from threadkeeper.adapters.redis_mysql.client import ENCODER, OrjsonRedis
from threadkeeper.adapters.redis_mysql.saver import HealingRedisSaver


@dataclasses.dataclass
class Running:
    summary: str
    ids: set[str]


class Label(str):
    """A ``str`` subclass: the serializer's shortcut takes exact types only."""


def _history() -> list[BaseMessage]:
    return [
        HumanMessage("Is my car covered abroad? 我的车在国外有保险吗？", id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "fetch_faq_document", "args": {"doc_id": "d7"}, "id": "c1"}],
        ),
        ToolMessage("Cover abroad: the EU and Switzerland.", tool_call_id="c1", id="t1"),
        AIMessage(
            "Yes, in the EU.",
            id="a2",
            additional_kwargs={"threadkeeper": {"status": "answered", "citations": ["x#1"]}},
        ),
    ]


def _checkpoint(values: dict[str, Any], versions: dict[str, Any] | None = None) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = versions if versions is not None else {"messages": 3}
    checkpoint["versions_seen"] = {"model": {"messages": 2}}
    return checkpoint


CHECKPOINTS = {
    "messages": lambda: _checkpoint({"messages": _history(), "summary": None}),
    "scalars and nesting": lambda: _checkpoint(
        {"messages": _history(), "n": 3, "ratio": 0.5, "ok": True, "deep": {"a": [1, "b", None]}}
    ),
    "no channel values": lambda: _checkpoint({}),
    "a dataclass holding a set": lambda: _checkpoint(
        {"messages": _history(), "running": Running("so far", {"h1", "a2"})}
    ),
    "a Send and a tuple": lambda: _checkpoint(
        {"branch:to:tools": [Send("tools", {"x": 1})], "pair": ("a", {1, 2})}
    ),
    "a str subclass": lambda: _checkpoint({"label": Label("kept as a str")}),
    "bytes (the msgpack fallback)": lambda: _checkpoint({"blob": b"\x00\xffraw", "n": 1}),
    "versions as numbers": lambda: _checkpoint({"messages": []}, {"messages": 7, "x": 1.5}),
}


def _savers() -> tuple[HealingRedisSaver, AsyncRedisSaver]:
    ours = HealingRedisSaver(redis_client=OrjsonRedis())
    theirs = AsyncRedisSaver(redis_client=OrjsonRedis())
    assert type(theirs.serde) is JsonPlusRedisSerializer
    return ours, theirs


@pytest.mark.parametrize("make", list(CHECKPOINTS.values()), ids=list(CHECKPOINTS))
def test_the_stored_document_is_langgraphs_byte_for_byte(make: Any) -> None:
    ours, theirs = _savers()
    checkpoint = make()
    expected = ENCODER.encode(AsyncRedisSaver._dump_checkpoint(theirs, checkpoint))
    assert ENCODER.encode(ours._dump_checkpoint(checkpoint)) == expected


def test_messages_read_back_are_written_as_the_same_bytes() -> None:
    """What a round does: messages revived by a read (handed out by the memo), one new."""
    ours, theirs = _savers()
    first = _checkpoint({"messages": _history()})
    document = orjson.loads(ENCODER.encode(ours._dump_checkpoint(first)))
    revived = ours.serde.loads_typed(("json", orjson.dumps(document["channel_values"])))
    new = AIMessage("A new answer.", id="a3")
    again = _checkpoint({"messages": [*revived["messages"], new]})
    reused = ours.serde.memo.reused
    written = ENCODER.encode(ours._dump_checkpoint(again))
    assert ours.serde.memo.reused == reused + len(_history())
    fresh = {**again, "channel_values": {"messages": [*_history(), new]}}
    assert written == ENCODER.encode(AsyncRedisSaver._dump_checkpoint(theirs, fresh))


def test_the_walk_hands_back_messages_and_scalars_untouched_and_walks_the_rest() -> None:
    serde, plain = HealingRedisSaver(redis_client=OrjsonRedis()).serde, JsonPlusRedisSerializer()
    message = _history()[0]
    for value in (message, "text", 3, 0.5, True, None):
        assert serde._preprocess_redis_json(value) is value
    for value in (Label("x"), {"s": {1, 2}}, [Send("n", 1)], (1, {"a"}), b"raw"):
        assert serde._preprocess_redis_json(value) == plain._preprocess_redis_json(value)


def test_a_client_encoding_with_the_standard_json_gets_the_librarys_document() -> None:
    """``from_conn_string`` (and any plain ``redis.asyncio.Redis``) encodes RedisJSON with
    ``json``, which cannot write an ``orjson.Fragment``: such a saver dumps as LangGraph does."""
    from redis.asyncio import Redis

    saver = HealingRedisSaver(redis_client=Redis())
    document = saver._dump_checkpoint(_checkpoint({"messages": _history()}))
    assert isinstance(document["channel_values"], dict)
    json.dumps(document)  # what redis-py would do with it
