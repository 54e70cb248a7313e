"""The project's Redis Stack answers with RediSearch and RedisJSON, and LangGraph's Redis saver
(with a TTL, refreshed on read) works on it. In CI a missing server fails the run."""

from __future__ import annotations

import os
import uuid

import pytest
import redis.asyncio as aioredis
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from tests.support.scripted_model import ScriptedChatModel

pytestmark = pytest.mark.integration

REDIS_STACK = os.environ.get("THREADKEEPER_TEST_REDIS", "redis://127.0.0.1:6380/0")


async def test_redis_stack_has_search_and_json() -> None:
    client = aioredis.from_url(REDIS_STACK)
    try:
        modules = {m[b"name"].decode().lower() for m in await client.module_list()}
        version = (await client.info("server"))["redis_version"]
    finally:
        await client.aclose()
    assert {"search", "rejson"} <= modules
    assert int(version.split(".")[0]) >= 8


async def test_the_redis_saver_keeps_a_thread_with_a_ttl() -> None:
    thread = f"smoke-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    async with AsyncRedisSaver.from_conn_string(
        REDIS_STACK, ttl={"default_ttl": 5, "refresh_on_read": True}
    ) as saver:
        await saver.asetup()
        agent = create_agent(ScriptedChatModel(default="hello"), checkpointer=saver)
        await agent.ainvoke({"messages": [HumanMessage("hi")]}, config)
        state = await agent.aget_state(config)
        assert [m.content for m in state.values["messages"]] == ["hi", "hello"]
        client = aioredis.from_url(REDIS_STACK)
        try:
            keys = [k async for k in client.scan_iter(match=f"*{thread}*")]
            ttls = [await client.ttl(k) for k in keys]
        finally:
            await client.aclose()
        assert keys
        assert all(0 < ttl <= 5 * 60 for ttl in ttls), ttls
        await saver.adelete_thread(thread)
