"""A round is stored whole or not at all, against real server processes on every profile:

- the run record belongs to the round: when its write fails, nothing is stored and the run is
  answered with an error (issue 9: the checkpoint was committed first and the client got
  ``error`` for a stored round);
- a memory write that fails after the round was stored does not turn it into an error
  answer (issue 9: ``database is locked`` in the memory write gave 500 for stored rounds);
- a run that lost its lock cannot store its round: a Redis flush (redis-mysql) or the death
  of the lock session (postgres) lets a second run onto the thread, and the first one's
  commit is fenced out (issue 9: both were accepted and both stored).

Faults are injected in the real servers: a trigger that refuses an insert, a ``FLUSHALL``, a
``pg_terminate_backend`` of the replica's lock session.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from httpx_sse import aconnect_sse

from tests.api.conftest import PROFILES
from tests.support.followups import asettled_memory
from tests.support.load import send, transcript
from tests.support.mysql import query
from tests.support.servers import ProfileServer, profile_server, start_server, storage

DENTAL = "Is dental treatment covered by my health insurance?"
CLAIM = "How do I file a claim?"
HOUSEHOLD = "I am married and have two kids. Is dental treatment covered?"


@pytest.fixture(params=PROFILES)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProfileServer]:
    with profile_server(str(request.param), tmp_path) as running:
        yield running


def counted(metrics: str, outcome: str) -> bool:
    """Whether ``/metrics`` has a point of memory follow-up work ended with ``outcome``."""
    return any(
        line.startswith("threadkeeper_followups_total{")
        and 'kind="memory"' in line
        and f'outcome="{outcome}"' in line
        for line in metrics.splitlines()
    )


def quiet(output: str) -> str:
    """A server's output without its access log."""
    return "\n".join(line for line in output.splitlines() if "uvicorn.access" not in line)


def refuse_inserts(server: ProfileServer, table: str, *, on: bool = True) -> None:
    """A trigger that makes every insert into ``table`` fail (``on=False`` drops it)."""
    name = f"tk_refuse_{table}"
    if server.profile == "embedded":
        with sqlite3.connect(server.data_dir / "threadkeeper.sqlite3", timeout=30) as conn:
            if on:
                conn.execute(
                    f"CREATE TRIGGER {name} BEFORE INSERT ON {table} "
                    "BEGIN SELECT RAISE(ABORT, 'insert refused by the test'); END"
                )
            else:
                conn.execute(f"DROP TRIGGER {name}")
    elif server.profile == "postgres":
        assert server.servers.postgres_url is not None
        with psycopg.connect(server.servers.postgres_url, autocommit=True) as conn:
            if on:
                conn.execute(
                    f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'insert refused by the test'; END $$"
                )
                conn.execute(
                    f"CREATE TRIGGER {name} BEFORE INSERT ON {table} "
                    f"FOR EACH ROW EXECUTE FUNCTION {name}()"
                )
            else:
                conn.execute(f"DROP TRIGGER {name} ON {table}")
                conn.execute(f"DROP FUNCTION {name}()")
    else:
        assert server.servers.mysql_url is not None
        if on:
            query(
                server.servers.mysql_url,
                f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW "
                "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'insert refused by the test'",
            )
        else:
            query(server.servers.mysql_url, f"DROP TRIGGER {name}")


async def test_a_run_whose_record_cannot_be_written_stores_nothing(
    server: ProfileServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=60) as c:
        first = await send(c, "records", DENTAL)
        assert first.status_code == 200, first.text
        refuse_inserts(server, "tk_run_records")
        failed = await send(c, "records", CLAIM)
        assert failed.status_code >= 500, failed.text
        assert failed.headers["content-type"].startswith("application/problem+json")
        messages = await transcript(c, "records")
        assert [m["content"] for m in messages or [] if m["role"] == "human"] == [DENTAL], (
            "the refused round left nothing behind"
        )
        refuse_inserts(server, "tk_run_records", on=False)
        again = await send(c, "records", CLAIM)
        assert again.status_code == 200, again.text
        messages = await transcript(c, "records")
        assert [m["content"] for m in messages or [] if m["role"] == "human"] == [DENTAL, CLAIM]


async def test_a_memory_write_failing_after_the_commit_keeps_the_answer(
    server: ProfileServer,
) -> None:
    """The memory write is follow-up work: while the store refuses it the answer stands, the
    attempt is counted and retried (logged without content), and once the store takes writes
    again the fact lands — nothing is lost."""
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=60) as c:
        refuse_inserts(server, "store")  # the memory store's table, every profile
        try:
            answered = await send(c, "memory", HOUSEHOLD)
            assert answered.status_code == 200, answered.text
            messages = await transcript(c, "memory")
            assert messages is not None
            assert [m["content"] for m in messages] == [
                HOUSEHOLD,
                answered.json()["message"]["content"],
            ]
            deadline = asyncio.get_running_loop().time() + 60
            while not counted((await c.get("/metrics")).text, "retried"):
                assert asyncio.get_running_loop().time() < deadline, (
                    f"no failed attempt counted:\n{quiet(server.output())}"
                )
                await asyncio.sleep(0.1)
            pending = await c.get(f"/v1/users/{server.headers['X-User-Id']}/memory")
            assert pending.json()["pending"] is True, pending.text
        finally:
            refuse_inserts(server, "store", on=False)
        memory = await asettled_memory(c, server.headers["X-User-Id"])
        assert memory["facts"] or memory["profile"], f"the fact was lost: {memory}"
        metrics = (await c.get("/metrics")).text
        assert counted(metrics, "done"), "the retried work was not counted done"
    output = server.output()
    assert "follow-up memory of run" in output
    assert "retrying in" in output
    assert HOUSEHOLD not in output, "a failed attempt's log quoted the message"


SERVER_PROFILES = [p for p in PROFILES if not isinstance(p, str)]


@pytest.fixture(params=SERVER_PROFILES)
def replicas(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ProfileServer, ProfileServer]]:
    """Two replicas on one storage whose runs stream for a few seconds (40 ms per token)."""
    profile = str(request.param)
    slow = {"THREADKEEPER_MODEL_TOKEN_DELAY_MS": "40"}
    with (
        storage(profile) as (servers, redis_server),
        start_server(profile, tmp_path / "a", servers, redis_server, **slow) as one,
        start_server(profile, tmp_path / "b", servers, redis_server, **slow) as other,
    ):
        yield one, other


def lose_the_lock(server: ProfileServer) -> None:
    """What makes a lock store forget a held lock: a flush of Redis, or on PostgreSQL the
    death of the replicas' lock sessions (the server releases their advisory locks)."""
    if server.profile == "redis-mysql":
        assert server.redis is not None
        client = redis.Redis.from_url(server.redis.url)
        try:
            client.flushall()
        finally:
            client.close()
        return
    assert server.servers.postgres_url is not None
    with psycopg.connect(server.servers.postgres_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
        assert rows, "no lock session holds an advisory lock"
        for (pid,) in rows:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


async def stream_until_first_token(
    client: httpx.AsyncClient, thread: str, content: str, started: asyncio.Event
) -> list[tuple[str, dict[str, Any]]]:
    """An SSE run; ``started`` is set at its first token (it holds the thread by then)."""
    events: list[tuple[str, dict[str, Any]]] = []
    body = {"message": {"content": content}}
    async with aconnect_sse(client, "POST", f"/v1/threads/{thread}/runs", json=body) as source:
        async for event in source.aiter_sse():
            events.append((event.event, json.loads(event.data)))
            if event.event == "messages":
                started.set()
    started.set()
    return events


async def test_a_run_that_lost_its_lock_stores_nothing(
    replicas: tuple[ProfileServer, ProfileServer],
) -> None:
    one, other = replicas
    async with (
        httpx.AsyncClient(base_url=one.url, headers=one.headers, timeout=120) as first,
        httpx.AsyncClient(base_url=other.url, headers=other.headers, timeout=120) as second,
    ):
        assert (await send(first, "fenced", DENTAL)).status_code == 200
        started = asyncio.Event()
        stale = asyncio.create_task(
            stream_until_first_token(first, "fenced", "What does maternity cover include?", started)
        )
        await asyncio.wait_for(started.wait(), timeout=60)
        assert (await send(second, "fenced", "probe")).status_code == 409, "it holds the thread"
        lose_the_lock(one)
        newer = await send(second, "fenced", CLAIM)  # the thread looks free: a second run
        assert newer.status_code == 200, newer.text
        events = await stale
        assert events[-1][0] == "error", events[-3:]
        assert events[-1][1]["type"] == "urn:threadkeeper:problem:claim-lost"
        messages = await transcript(second, "fenced")
    humans = [m["content"] for m in messages or [] if m["role"] == "human"]
    assert humans == [DENTAL, CLAIM], "exactly one of the two overlapping runs was stored"
