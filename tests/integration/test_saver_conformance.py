"""LangGraph's checkpoint conformance suite against the saver as threadkeeper configures it:
``AtomicSaver`` over ``PostgresLedger(AsyncPostgresSaver)`` (one shared pool), over
``AsyncSqliteSaver``, and over the redis-mysql profile's ``HealingRedisSaver`` (TTL refreshed
on read, on a private Redis Stack).
Outside a run's staging the wrapper must behave exactly like the saver it wraps."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from tests.support.redis_stack import private_redis
from threadkeeper.adapters.atomic import AtomicSaver
from threadkeeper.adapters.postgres import _pool
from threadkeeper.adapters.postgres.ledger import PostgresLedger
from threadkeeper.adapters.redis_mysql import HealingRedisSaver
from threadkeeper.adapters.redis_mysql.backend import redis_client

pytestmark = pytest.mark.integration


async def test_atomic_saver_over_postgres_conforms(url: str) -> None:
    @checkpointer_test(name="AtomicSaver(PostgresLedger(AsyncPostgresSaver))")
    async def saver() -> AsyncGenerator[BaseCheckpointSaver, None]:
        pool = _pool(url)
        await pool.open(wait=True)
        try:
            yield AtomicSaver(PostgresLedger(AsyncPostgresSaver(pool), pool))
        finally:
            await pool.close()

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base(), report.to_dict()


async def test_atomic_saver_over_sqlite_conforms(tmp_path: Path) -> None:
    @checkpointer_test(name="AtomicSaver(AsyncSqliteSaver)")
    async def saver() -> AsyncGenerator[BaseCheckpointSaver, None]:
        async with aiosqlite.connect(tmp_path / "conformance.sqlite3") as conn:
            base = AsyncSqliteSaver(conn)
            await base.setup()
            yield AtomicSaver(base)

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base(), report.to_dict()


# langgraph-checkpoint-redis 0.5.2 itself fails these "list" cases (checked: the bare
# AsyncRedisSaver fails exactly the same ones). threadkeeper never lists by namespace, by
# ``before`` or by custom metadata keys on this profile (the archive answers those questions),
# so they are pinned here: a version that fixes or breaks more shows up as a failure.
REDIS_SAVER_KNOWN_LIST_GAPS = {
    "test_list_by_namespace",
    "test_list_metadata_custom_keys",
    "test_list_before",
    "test_list_limit_plus_before",
    "test_list_multiple_namespaces",
}


@pytest.mark.parametrize("client", ["orjson", "plain"])
async def test_atomic_saver_over_redis_conforms(client: str) -> None:
    """On the client the profile connects with (``redis_client``: RedisJSON through orjson,
    checkpoints written with their channel values as the serializer's bytes) and on a plain
    ``redis.asyncio.Redis`` (``from_conn_string``: the library's document path)."""
    with private_redis() as server:

        @checkpointer_test(name=f"AtomicSaver(HealingRedisSaver), {client} client")
        async def saver() -> AsyncGenerator[BaseCheckpointSaver, None]:
            ttl = {"default_ttl": 60, "refresh_on_read": True}
            if client == "plain":
                async with HealingRedisSaver.from_conn_string(server.url, ttl=ttl) as base:
                    await base.asetup()
                    yield AtomicSaver(base)
                return
            redis = redis_client(server.url)
            try:
                base = HealingRedisSaver(redis_client=redis, ttl=ttl)
                await base.asetup()
                yield AtomicSaver(base)
            finally:
                await redis.aclose()

        report = await validate(saver)
        report.print_report()
    results = report.results
    for capability in ("put", "put_writes", "get_tuple", "delete_thread"):
        assert results[capability].passed, (capability, results[capability].failures)
    failed = {f.split(":")[0] for f in results["list"].failures}
    assert failed == REDIS_SAVER_KNOWN_LIST_GAPS, results["list"].failures


async def test_the_redis_saver_reads_and_writes_messages_through_its_memo() -> None:
    """``HealingRedisSaver`` revives a checkpoint's messages once (``MemoRedisSerializer``):
    a later read hands out the same messages, equal to what LangGraph's own saver reads from the
    same document, and writing them back stores the document LangGraph's saver writes."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    from threadkeeper.adapters.redis_mysql.serde import MemoRedisSerializer

    history = [
        HumanMessage("Is my car covered abroad?", id="h1", response_metadata={"at": "t1"}),
        AIMessage("Yes, in the EU.", id="a1", additional_kwargs={"citations": ["x#1"]}),
    ]
    with private_redis() as server:
        async with (
            HealingRedisSaver.from_conn_string(server.url) as saver,
            AsyncRedisSaver.from_conn_string(server.url) as plain,
        ):
            await saver.asetup()
            assert isinstance(saver.serde, MemoRedisSerializer)
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": history}
            checkpoint["channel_versions"] = {"messages": "1"}
            config: Any = {"configurable": {"thread_id": "memo", "checkpoint_ns": ""}}
            await saver.aput(config, checkpoint, {}, {"messages": "1"})
            first, second = await saver.aget_tuple(config), await saver.aget_tuple(config)
            theirs = await plain.aget_tuple(config)
            assert first is not None
            assert second is not None
            assert theirs is not None
            messages = second.checkpoint["channel_values"]["messages"]
            assert messages == theirs.checkpoint["channel_values"]["messages"] == history
            assert all(
                a is b
                for a, b in zip(
                    messages, first.checkpoint["channel_values"]["messages"], strict=True
                )
            )

            again = {**checkpoint, "id": "1f000000-0000-6000-8000-000000000001"}
            again["channel_values"] = {"messages": messages}
            ours = await saver.aput(config, again, {}, {"messages": "2"})
            assert saver.serde.memo.reused == len(history)
            fresh = {**again, "id": "1f000000-0000-6000-8000-000000000002"}
            fresh["channel_values"] = {"messages": list(history)}
            langgraphs = await plain.aput(
                {"configurable": {"thread_id": "plain", "checkpoint_ns": ""}},
                fresh,
                {},
                {"messages": "2"},
            )
            stored = [
                await saver._redis.json().get(
                    saver._make_redis_checkpoint_key(
                        c["configurable"]["thread_id"],
                        "__empty__",
                        c["configurable"]["checkpoint_id"],
                    ),
                    "$.checkpoint.channel_values",
                )
                for c in (ours, langgraphs)
            ]
            assert stored[0] == stored[1]


@asynccontextmanager
async def written_with_a_ttl(
    thread: str,
) -> AsyncIterator[tuple[HealingRedisSaver, Any, Any, list[str]]]:
    """A saver (TTL 1 minute, refreshed on read) on a private Redis Stack, one checkpoint of
    ``thread`` with one write, and the thread's keys that exist — each left with 5 s to live."""
    from langgraph.checkpoint.base import empty_checkpoint

    with private_redis() as server:
        async with HealingRedisSaver.from_conn_string(
            server.url, ttl={"default_ttl": 1, "refresh_on_read": True}
        ) as saver:
            await saver.asetup()
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            saved = await saver.aput(config, empty_checkpoint(), {"step": 1}, {})
            await saver.aput_writes(saved, [("messages", "x")], "task-1")
            keys = await saver.thread_keys(thread)
            existing = [k for k in keys if await saver._redis.exists(k)]
            assert len(existing) >= 3, keys  # checkpoint, pointer, write (and its registry)
            for key in existing:
                await saver._redis.expire(key, 5)
            yield saver, config, saved, existing


async def test_a_redis_read_refreshes_the_ttl_of_what_it_read() -> None:
    """``HealingRedisSaver`` reads a checkpoint's document once (its own ``aget_tuple``) and
    keeps the library's TTL refresh on read: the checkpoint, its latest pointer and its writes
    get the whole TTL again, for a read of the newest checkpoint and for one by id — their
    ``EXPIRE`` commands in one pipeline, not a round trip each."""
    async with written_with_a_ttl("ttl") as (saver, config, saved, existing):
        redis = saver._redis
        one_by_one: list[str] = []
        expire = redis.expire

        async def counted(key: str, seconds: int) -> Any:
            one_by_one.append(key)
            return await expire(key, seconds)

        for read in (config, saved):
            for key in existing:
                await redis.expire(key, 5)
            redis.expire = counted  # the library's refresh: an EXPIRE round trip per key
            try:
                found = await saver.aget_tuple(read)
            finally:
                redis.expire = expire
            assert one_by_one == [], "the EXPIREs go in one pipeline"
            assert found is not None
            assert found.metadata["step"] == 1
            assert [w[1:] for w in found.pending_writes] == [("messages", "x")]
            ttls = {k: await redis.ttl(k) for k in existing}
            pointer = [k for k in existing if "checkpoint_latest" in k]
            refreshed = {k: t for k, t in ttls.items() if t > 50}
            if read is config:
                assert set(refreshed) == set(existing), ttls
            else:  # by id: the pointer is not what was read
                assert set(existing) - set(refreshed) <= set(pointer), ttls


async def test_a_refresh_whose_pipeline_fails_expires_each_key_on_its_own() -> None:
    """Best effort, as the library's refresh is: if the pipelined ``EXPIRE`` commands fail (a
    dropped connection), each key is refreshed on its own, and nothing is raised."""
    async with written_with_a_ttl("ttl-fails") as (saver, _, _, existing):
        redis = saver._redis
        pipeline = redis.pipeline

        def dropping(*args: Any, **kwargs: Any) -> Any:
            made = pipeline(*args, **kwargs)

            async def execute(raise_on_error: bool = True) -> Any:
                await made.reset()
                raise ConnectionError("the connection dropped")

            made.execute = execute
            return made

        redis.pipeline = dropping
        try:
            await saver._expire_all(existing, 60)
        finally:
            redis.pipeline = pipeline
        ttls = {k: await redis.ttl(k) for k in existing}
        assert all(t > 50 for t in ttls.values()), ttls


async def test_the_profiles_redis_client_speaks_redisjson_through_orjson() -> None:
    """The redis-mysql client (``redis_client``) encodes and decodes RedisJSON with orjson, on
    the client and on its pipelines (the saver's reads, redisvl's writes), and stores the same
    JSON value as redis-py's default encoder."""
    from redis.asyncio import Redis

    from threadkeeper.adapters.redis_mysql.backend import redis_client
    from threadkeeper.adapters.redis_mysql.client import DECODER, ENCODER

    value = {"content": "请问 بیمه — naïve", "n": [1, 2.5, None, True], "nested": {"k": "v"}}
    with private_redis() as server:
        ours, plain = redis_client(server.url), Redis.from_url(server.url)
        try:
            pipeline = ours.pipeline(transaction=False)
            assert pipeline.json().__encoder__ is ENCODER
            assert ours.json().__decoder__ is DECODER
            pipeline.json().set("ours", "$", value)
            await pipeline.execute()
            await plain.json().set("plain", "$", value)
            read = ours.pipeline(transaction=False)
            read.json().get("ours")
            read.json().get("plain")
            assert await read.execute() == [value, value]
            assert await plain.json().get("ours") == value
        finally:
            await ours.aclose()
            await plain.aclose()


async def test_commands_past_the_pools_connections_wait_for_one_then_answer_at_capacity() -> None:
    """More commands in flight than the client's connections wait for one (redis-py's default
    pool raised ``MaxConnectionsError`` at once: runs failed at concurrency 40); a wait that
    ends with every connection still in use is ``AtCapacity`` (503 ``at-capacity``), not a
    Redis out of reach."""
    import asyncio

    from threadkeeper.adapters.redis_mysql.backend import redis_client
    from threadkeeper.domain.errors import AtCapacity

    with private_redis() as server:
        waiting_client = redis_client(server.url, max_connections=2, wait_seconds=30)
        brief = redis_client(server.url, max_connections=1, wait_seconds=0.2)
        try:
            pool = waiting_client.connection_pool
            held = [await pool.get_connection() for _ in range(2)]  # every connection in use
            waiting = asyncio.create_task(waiting_client.set("k", "v"))
            await asyncio.sleep(0.2)
            assert not waiting.done(), "the command waits for a connection"
            await pool.release(held.pop())
            assert await asyncio.wait_for(waiting, 30) is True
            assert await waiting_client.get("k") == b"v"
            await pool.release(held.pop())

            only = await brief.connection_pool.get_connection()
            with pytest.raises(AtCapacity, match="all 1 Redis connections"):
                await brief.get("k")
            await brief.connection_pool.release(only)
            assert await brief.get("k") == b"v", "served again once a connection is free"
        finally:
            await waiting_client.aclose()
            await brief.aclose()
