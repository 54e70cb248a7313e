"""Stored bytes never run code, on the redis-mysql profile's saver (``HealingRedisSaver`` on
the client the profile connects with): a checkpoint document or a pending write edited in
Redis to name a foreign type (``tests.support.tripwire``) makes the read raise
``StoredDataRefused`` — never a checkpoint with the value dropped or left as a raw dict — the
tripwire is never called, and one log line names the type and the thread's pseudonym."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.support import tripwire
from tests.support.redis_stack import PrivateRedis, private_redis
from tests.support.tripwire import FOREIGN_ENVELOPES, FOREIGN_EXT, FOREIGN_NAME, packed
from threadkeeper.adapters.redis_mysql import HealingRedisSaver
from threadkeeper.adapters.redis_mysql.backend import redis_client
from threadkeeper.domain.errors import StoredDataRefused
from threadkeeper.domain.threads import log_name

pytestmark = pytest.mark.integration

KEY = "acme:user-1:claims"
CONFIG: Any = {"configurable": {"thread_id": KEY, "checkpoint_ns": ""}}


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateRedis]:
    with private_redis() as running:
        yield running


@pytest.fixture
async def saver(server: PrivateRedis) -> AsyncIterator[HealingRedisSaver]:
    redis = redis_client(server.url)
    try:
        await redis.flushall()
        saver = HealingRedisSaver(redis_client=redis, ttl={"default_ttl": 60})
        await saver.asetup()
        yield saver
    finally:
        await redis.aclose()


@pytest.fixture(autouse=True)
def _no_calls() -> Iterator[None]:
    tripwire.reset()
    yield
    assert tripwire.CALLS == [], "a tripwire named by stored bytes was called"


async def _stored(saver: HealingRedisSaver) -> Any:
    """A thread of two messages stored; the config of its checkpoint."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "messages": [
            HumanMessage("Is my car covered abroad?", id="h1"),
            AIMessage("Yes, in the EU.", id="a1", additional_kwargs={"citations": ["x#1"]}),
        ]
    }
    checkpoint["channel_versions"] = {"messages": "1"}
    return await saver.aput(CONFIG, checkpoint, {}, {"messages": "1"})


async def _refused(
    saver: HealingRedisSaver, config: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(StoredDataRefused) as refused:
        await saver.aget_tuple(config)
    assert refused.value.refused == name
    assert refused.value.thread == log_name(KEY)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("threadkeeper")]
    assert len(lines) == 1, lines
    assert name in lines[0]
    assert log_name(KEY) in lines[0]
    for private in (KEY, "planted", "covered abroad"):
        assert private not in lines[0]


@pytest.mark.parametrize("form", list(FOREIGN_ENVELOPES))
async def test_a_checkpoint_document_naming_a_foreign_type_is_refused(
    saver: HealingRedisSaver, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    envelope, name = FOREIGN_ENVELOPES[form]
    config = await _stored(saver)
    assert await saver.aget_tuple(config) is not None  # read (and remembered) as stored
    redis = saver._redis
    key = await redis.get(saver._make_redis_checkpoint_latest_key(KEY, ""))
    assert key is not None
    path = "$.checkpoint.channel_values.messages[1].kwargs.additional_kwargs.planted"
    assert await redis.execute_command("JSON.SET", key, path, orjson.dumps(envelope))
    await _refused(saver, config, name, caplog)
    caplog.clear()
    await _refused(saver, CONFIG, name, caplog)  # the newest, through its pointer


@pytest.mark.parametrize("form", ["msgpack", "json"])
async def test_a_pending_write_naming_a_foreign_type_is_refused(
    saver: HealingRedisSaver, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = await _stored(saver)
    await saver.aput_writes(config, [("messages", [AIMessage("Also CH.", id="a2")])], "task-1")
    redis = saver._redis
    keys = [k async for k in redis.scan_iter(match="checkpoint_write:*")]
    assert len(keys) == 1, keys
    if form == "msgpack":
        type_, blob, name = "msgpack", packed([FOREIGN_EXT]), FOREIGN_NAME
    else:
        envelope, name = FOREIGN_ENVELOPES["lc 2, a dataclass"]
        type_, blob = "json", orjson.dumps([envelope])
    await redis.execute_command("JSON.SET", keys[0], "$.type", orjson.dumps(type_))
    await redis.execute_command(
        "JSON.SET", keys[0], "$.blob", orjson.dumps(base64.b64encode(blob).decode())
    )
    await _refused(saver, config, name, caplog)
