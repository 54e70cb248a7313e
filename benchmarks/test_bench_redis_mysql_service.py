"""Stored bytes of a thread written by the service itself, on the redis-mysql profile.

The counterpart of ``test_bench_postgres_service``: the real app (``create_app``, JSON-mode
runs through Litestar's test client, builtin model, the profile's default hooks
``truncate_tool_results,compact``) on a private Redis Stack (``tests.support.redis_stack``,
flushed before each arm) and a fresh migrated MariaDB database, one thread per arm, feedback
on every tenth run. Weighed:

Weighed as ``GET /v1/threads/{thread_id}/storage`` weighs it (the backend's
``storage_usage``, ``table_weights`` and ``saver.thread_bytes``; ``threadkeeper.adapters.weigh``):

* MySQL — **every row keyed by the thread in every table of the database** (each table with a
  ``thread_key`` column; memory is keyed by user and is left out, so is the run claim, the
  thread's lock row): Σ ``LENGTH`` (bytes) of every column + 28 bytes per row, by kind:
  ``archive`` (``chat_messages``, ``chat_summaries``), ``audit`` (``tool_invocations``),
  ``run_records`` (``tk_run_records`` and ``tk_run_texts``), ``feedback`` (``tk_feedback``).
  ``storage_ratio`` = all of it ÷ ``transcript_bytes`` (UTF-8 bytes of the messages
  ``GET /messages`` serves); ``records_ratio`` = run records (with their texts);
  ``uncompressed_ratio`` = as ``storage_ratio`` with the run records (stored deflated)
  counted inflated.
* Redis — Σ ``MEMORY USAGE key SAMPLES 0`` over the thread's keys, found through the saver's
  indexes (``redis_bytes``, and how many keys): bounded by the token budget whatever the
  thread's length (``test_bench_redis_storage``), so not in the ratio (the endpoint counts it
  under ``checkpoints``: ``endpoint_bytes``).

Arms: ~950- and ~300-byte human messages. Reduced: 50 turns; full: 200. Gates (asserted, at
every size, 950-byte arm): exactly two Redis keys, and ``storage_ratio ≤ 2.0`` (1.96× at 50
turns since run records are stored deflated; 2.37× before — docs/storage-redis-mysql.md). The
margin is thin: the archive alone is 1.40× (ids, times and citations per row).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from litestar.testing import AsyncTestClient

from benchmarks.conftest import BenchSize, chat_text
from tests.api.conftest import TENANT, USER, Servers, headers_for, settings_for
from tests.support.mysql import fresh_database, query
from tests.support.redis_stack import PrivateRedis, private_redis
from threadkeeper.adapters.redis_mysql.backend import open_redis_mysql
from threadkeeper.adapters.sql import unpack_record
from threadkeeper.adapters.weigh import TableWeight
from threadkeeper.app.application import create_app
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.threads import ThreadRef

TURNS = {"reduced": 50, "full": 200}
STORAGE_TARGET = 2.0
FEEDBACK_EVERY = 10


@pytest.fixture(scope="module")
def redis_server() -> Iterator[PrivateRedis]:
    with private_redis() as server:
        yield server


async def weigh_thread(
    redis_url: str, mysql_url: str, key: str
) -> tuple[StorageUsage, dict[str, TableWeight], tuple[int, int]]:
    """What ``GET /v1/threads/{thread_id}/storage`` answers for the thread, (rows, bytes) of
    every MySQL table keyed by thread, and (keys, bytes) of the thread in Redis: the
    backend's own weighing (``adapters.weigh``, ``HealingRedisSaver.thread_bytes``)."""
    async with open_redis_mysql(redis_url, mysql_url) as backend:
        return (
            await backend.storage_usage(key),
            await backend.table_weights(key),
            await backend.saver.thread_bytes(key),
        )


async def _conversation(servers: Servers, thread: str, turns: int, message_bytes: int) -> int:
    """Run the conversation through the app; the transcript's UTF-8 bytes as served."""
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as data:
        app = create_app(settings_for("redis-mysql", Path(data), servers))
        async with AsyncTestClient(app, timeout=120) as client:
            client.headers.update(headers_for("redis-mysql"))
            for turn in range(turns):
                text = chat_text(rng, message_bytes).encode()[:message_bytes]
                response = await client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": text.decode("utf-8", errors="ignore")}},
                    headers={"Accept": "application/json"},
                )
                assert response.status_code == 200, response.text
                if turn % FEEDBACK_EVERY == FEEDBACK_EVERY - 1:
                    run_id = response.json()["run_id"]
                    noted = await client.post(
                        f"/v1/threads/{thread}/runs/{run_id}/feedback",
                        json={"score": 1, "comment": "clear, thank you"},
                    )
                    assert noted.status_code == 204, noted.text
            served, before = 0, None
            while True:
                params: dict[str, Any] = {"limit": 100, **({"before": before} if before else {})}
                page = (await client.get(f"/v1/threads/{thread}/messages", params=params)).json()
                served += sum(len(m["content"].encode()) for m in page["messages"])
                before = page.get("next_before")
                if not before:
                    return served


@pytest.mark.parametrize("message_bytes", [950, 300])
def test_redis_mysql_service_storage(  # type: ignore[no-untyped-def]
    benchmark, size: BenchSize, message_bytes: int, redis_server: PrivateRedis
) -> None:
    turns = TURNS[size.name]
    thread = f"weighed-{message_bytes}"
    key = ThreadRef(TENANT, USER, thread).key
    benchmark.group = f"redis-mysql service storage, {turns} turns"
    flushing = redis.Redis.from_url(redis_server.url)
    try:
        flushing.flushall()
    finally:
        flushing.close()
    with fresh_database() as url:
        servers = Servers(redis_url=redis_server.url, mysql_url=url)
        transcript: list[int] = []
        benchmark.pedantic(
            lambda: transcript.append(
                asyncio.run(_conversation(servers, thread, turns, message_bytes))
            ),
            rounds=1,
            iterations=1,
        )
        usage, weights, (keys, in_redis) = asyncio.run(weigh_thread(redis_server.url, url, key))
        extra = sum(
            len(unpack_record(bytes(blob))) - len(blob)
            for (blob,) in query(
                url, "SELECT record FROM tk_run_records WHERE thread_key = %s", (key,)
            )
        )
    served = transcript[0]
    kinds = usage.by_kind()
    kinds["checkpoints"] -= in_redis  # the MySQL figures: Redis is bounded, not in the ratio
    stored = sum(kinds.values())
    records = usage.run_records  # the records and the texts they name
    rows = {table: weight.rows for table, weight in weights.items()}
    ratio = stored / served
    benchmark.extra_info.update(
        role="measurement",
        turns=turns,
        message_bytes=message_bytes,
        transcript_bytes=served,
        bytes_per_thread=stored,
        storage_ratio=round(ratio, 2),
        uncompressed_ratio=round((stored + extra) / served, 2),
        records_ratio=round(records / served, 2),
        bytes_by_kind=kinds,
        ratio_by_kind={kind: round(weight / served, 3) for kind, weight in kinds.items()},
        bytes_by_table={table: weight.bytes for table, weight in weights.items()},
        rows=rows,
        redis_keys=keys,
        redis_bytes=in_redis,
        endpoint_bytes=usage.by_kind(),
    )
    assert usage.checkpoints >= in_redis > 0
    assert rows["chat_messages"] >= 2 * turns  # human + answer per round
    assert rows["tk_run_records"] == turns
    assert rows["tk_feedback"] == turns // FEEDBACK_EVERY
    if message_bytes == 950:
        assert keys == 2, "one checkpoint and its latest pointer"
        assert ratio <= STORAGE_TARGET, benchmark.extra_info
