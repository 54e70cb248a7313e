"""Stored bytes of a thread written by the service itself, on the postgres profile.

``test_bench_postgres_storage`` measures storage layouts on a bare ``create_agent`` graph; the
service's graph carries more per turn: threadkeeper's middleware channels (``memory``,
``retrieved``, the summary), the builtin model's status and citations on each AI message, a
run record per run. This benchmark drives the real app (``create_app``, JSON-mode runs
through Litestar's test client, builtin model, the default hooks) on a fresh migrated schema,
one thread per arm, and weighs the thread in PostgreSQL the way the storage benchmark does:

* ``bytes`` — Σ over the thread's rows in ``checkpoints``, ``checkpoint_blobs``,
  ``checkpoint_writes`` and ``tk_checkpoint_messages`` of ``octet_length`` of every column
  (``jsonb`` as text), + 28 bytes per row; ``records_bytes`` — the same for its run records
  (``tk_run_records``, kept for replay and idempotent retries; reported apart, as DESIGN's
  target is on the thread's state).
* ``transcript_bytes`` — UTF-8 bytes of the messages ``GET /messages`` serves (all pages);
  ``storage_ratio`` = ``bytes / transcript_bytes`` (DESIGN's ≤ 2× target).

Arms: the human message at ~950 UTF-8 bytes (the size DESIGN's target is stated for) and at
~300 bytes (short chat, where per-message overhead weighs three times as much). Reduced: 20
turns; full: 100. The time is the whole conversation; no baseline (the comparison with what
users would otherwise pick is ``test_bench_postgres_storage``'s).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from benchmarks.conftest import BenchSize, chat_text
from tests.api.conftest import TENANT, USER, Servers, headers_for, settings_for
from tests.support.postgres import fresh_schema
from threadkeeper.adapters.postgres.ledger import TABLE as LEDGER
from threadkeeper.app.application import create_app
from threadkeeper.domain.threads import ThreadRef

TURNS = {"reduced": 20, "full": 100}
STATE_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", LEDGER)
ROW_OVERHEAD = 28
STORAGE_TARGET = 2.0


def _weigh(conn: psycopg.Connection[Any], table: str, column: str, key: str) -> tuple[int, int]:
    """(rows, bytes) of ``table``'s rows for ``key`` (octet_length of every column)."""
    columns = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s AND table_schema = current_schema()",
        (table,),
    ).fetchall()
    logical = " + ".join(
        f"coalesce(octet_length(t.{name}::text), 0)"
        if kind == "jsonb"
        else f"coalesce(octet_length(t.{name}), 0)"
        if kind in ("bytea", "text", "character varying")
        else f"coalesce(pg_column_size(t.{name}), 0)"
        for name, kind in columns
    )
    row = conn.execute(
        f"SELECT count(*), coalesce(sum({logical} + {ROW_OVERHEAD}), 0) "
        f"FROM {table} t WHERE {column} = %s",
        (key,),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def _conversation(url: str, thread: str, turns: int, message_bytes: int) -> int:
    """Run the conversation through the app; the transcript's UTF-8 bytes as served."""
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as data:
        app = create_app(settings_for("postgres", Path(data), Servers(postgres_url=url)))
        async with AsyncTestClient(app, timeout=120) as client:
            client.headers.update(headers_for("postgres"))
            for _ in range(turns):
                text = chat_text(rng, message_bytes).encode()[:message_bytes]
                response = await client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": text.decode("utf-8", errors="ignore")}},
                    headers={"Accept": "application/json"},
                )
                assert response.status_code == 200, response.text
            served, before = 0, None
            while True:
                params: dict[str, Any] = {"limit": 100, **({"before": before} if before else {})}
                page = (await client.get(f"/v1/threads/{thread}/messages", params=params)).json()
                served += sum(len(m["content"].encode()) for m in page["messages"])
                before = page.get("next_before")
                if not before:
                    return served


@pytest.mark.parametrize("message_bytes", [950, 300])
def test_postgres_service_storage(benchmark, size: BenchSize, message_bytes: int) -> None:  # type: ignore[no-untyped-def]
    turns = TURNS[size.name]
    thread = f"weighed-{message_bytes}"
    key = ThreadRef(TENANT, USER, thread).key
    benchmark.group = f"postgres service storage, {turns} turns"
    with fresh_schema() as url:
        transcript: list[int] = []
        benchmark.pedantic(
            lambda: transcript.append(
                asyncio.run(_conversation(url, thread, turns, message_bytes))
            ),
            rounds=1,
            iterations=1,
        )
        with psycopg.connect(url) as conn:
            rows: dict[str, int] = {}
            stored = 0
            for table in STATE_TABLES:
                rows[table], weight = _weigh(conn, table, "thread_id", key)
                stored += weight
            rows["tk_run_records"], records = _weigh(conn, "tk_run_records", "thread_key", key)
    ratio = stored / transcript[0]
    benchmark.extra_info.update(
        role="measurement",
        turns=turns,
        message_bytes=message_bytes,
        bytes_per_thread=stored,
        transcript_bytes=transcript[0],
        storage_ratio=round(ratio, 2),
        records_bytes=records,
        records_ratio=round(records / transcript[0], 2),
        rows=rows,
    )
    assert rows["checkpoints"] == 1  # pruned to the newest after every run
    assert rows[LEDGER] >= 2 * turns  # each message stored once
    if message_bytes == 950:
        assert ratio <= STORAGE_TARGET, benchmark.extra_info
