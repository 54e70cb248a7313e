"""Storage per thread is cheap enough for an operator endpoint: the statement that weighs a
thread reads every table on an index led by the thread's key (``EXPLAIN`` on each server:
no table is scanned), and Redis keys are found through the saver's indexes — exactly the
thread's keys, as a scan of the whole keyspace (done here only to check) finds them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis
from threadkeeper.adapters.embedded import open_embedded
from threadkeeper.adapters.postgres.backend import PostgresBackend, open_postgres
from threadkeeper.adapters.redis_mysql.backend import RedisMysqlBackend, open_redis_mysql
from threadkeeper.adapters.weigh import weigh_statement
from threadkeeper.conformance.backend import Turn, give_feedback, new_ref, store_round, tool_calls

pytestmark = pytest.mark.integration
THREADS = 3


async def fill(backend: Any) -> str:
    """A few threads of a few rounds; one thread's key."""
    refs = [new_ref() for _ in range(THREADS)]
    for ref in refs:
        for index in range(2):
            turn = Turn.make(index)
            await give_feedback(
                backend, await store_round(backend, ref, turn, tools=tool_calls(turn))
            )
    return refs[0].key


def scans(plan: Any) -> list[str]:
    """The relations a PostgreSQL JSON plan reads with a sequential scan."""
    found: list[str] = []
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan":
            found.append(str(plan.get("Relation Name")))
        for value in plan.values():
            found.extend(scans(value))
    elif isinstance(plan, list):
        for item in plan:
            found.extend(scans(item))
    return found


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


@pytest.fixture
async def postgres(postgres_url: str) -> AsyncIterator[PostgresBackend]:
    async with open_postgres(postgres_url) as backend:
        yield backend


async def test_postgres_weighs_a_thread_on_indexes_only(postgres: PostgresBackend) -> None:
    key = await fill(postgres)
    async with postgres.engine.connect() as conn:
        tables = await postgres.weigher.tables(conn)
        assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes", "tk_run_records"} <= {
            t.name for t in tables
        }
        statement = weigh_statement("postgresql", tables)
        # small tables are cheaper to scan: forbid the scan to see whether an index serves
        await conn.execute(text("SET enable_seqscan = off"))
        plan = (
            await conn.execute(text(f"EXPLAIN (FORMAT JSON) {statement}"), {"key": key})
        ).scalar_one()
        await conn.execute(text("RESET enable_seqscan"))
    plan = json.loads(plan) if isinstance(plan, str) else plan
    assert scans(plan) == [], plan
    usage = await postgres.storage_usage(key)
    assert usage.checkpoints > 0
    assert usage.messages > 0


@pytest.fixture
def mysql_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
async def redis_mysql(
    redis_server: PrivateRedis, mysql_url: str
) -> AsyncIterator[RedisMysqlBackend]:
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    await client.aclose()
    async with open_redis_mysql(redis_server.url, mysql_url) as backend:
        yield backend


async def test_mysql_weighs_a_thread_on_indexes_only(redis_mysql: RedisMysqlBackend) -> None:
    key = await fill(redis_mysql)
    async with redis_mysql.engine.connect() as conn:
        tables = await redis_mysql.weigher.tables(conn)
        statement = weigh_statement(conn.dialect.name, tables)
        rows = (await conn.execute(text(f"EXPLAIN {statement}"), {"key": key})).mappings().all()
    assert len(rows) >= len(tables)
    for row in rows:
        if row["table"] is None:  # the UNION's own result
            continue
        assert row["possible_keys"], row
        assert row["type"] != "ALL", row


async def test_redis_keys_are_found_through_the_indexes_exactly(
    redis_mysql: RedisMysqlBackend,
) -> None:
    key = await fill(redis_mysql)
    found = set(await redis_mysql.saver.thread_keys(key))
    scanned = {
        name.decode()
        async for name in redis_mysql.redis.scan_iter(match=f"*{key}*", count=1000)
        if not name.decode().startswith("threadkeeper")  # locks, rate windows
    }
    registry = {k for k in found if k.startswith("write_keys_zset:")}
    assert found - registry == scanned - registry  # a registry set exists once it has writes
    assert registry >= scanned - found
    keys, size = await redis_mysql.saver.thread_bytes(key)
    assert keys == len(scanned)
    assert size > 0
    await redis_mysql.retention.delete_thread(key)
    assert await redis_mysql.saver.thread_keys(key) == []
    assert await redis_mysql.saver.thread_bytes(key) == (0, 0)


async def test_sqlite_weighs_a_thread_on_indexes_only(tmp_path: Path) -> None:
    async with open_embedded(tmp_path / "data") as backend:
        key = await fill(backend)
        async with backend.runs.connect() as conn:
            tables = await backend.weigher.tables(conn)
            assert {"checkpoints", "writes", "tk_run_records"} <= {t.name for t in tables}
            statement = weigh_statement("sqlite", tables)
            plan = [
                str(r[-1])
                for r in await conn.execute(text(f"EXPLAIN QUERY PLAN {statement}"), {"key": key})
            ]
    searched = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert searched, plan
    assert all(step.startswith("SEARCH") for step in searched), plan
