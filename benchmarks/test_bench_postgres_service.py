"""Stored bytes of a thread written by the service itself, on the postgres profile.

``test_bench_postgres_storage`` measures storage layouts on a bare ``create_agent`` graph; the
service's graph carries more per turn: threadkeeper's middleware channels (``memory``,
``retrieved``, the summary), the builtin model's status and citations on each AI message, a
run record per run. This benchmark drives the real app (``create_app``, JSON-mode runs
through Litestar's test client, builtin model, the default hooks — the rolling summary from
turn 21) on a fresh migrated schema, one thread per arm, feedback on every tenth run, and
weighs it as ``GET /v1/threads/{thread_id}/storage`` does — the backend's
``storage_usage`` and ``table_weights`` (``threadkeeper.adapters.weigh``): **every row keyed by
the thread in every table of the schema** (each table with a ``thread_id`` or ``thread_key``
column; memory is keyed by user, not thread, and is left out; so is the run claim, the
thread's lock row):

* bytes of a table — Σ over the thread's rows of ``octet_length`` of every column (``jsonb``
  as text; ``pg_column_size`` for fixed-width types), + 28 bytes per row;
* ``bytes_by_kind`` — the endpoint's kinds: ``checkpoints`` (``checkpoints``,
  ``checkpoint_blobs``, ``checkpoint_writes``), ``messages`` (the ledger,
  ``tk_checkpoint_messages``), ``run_records`` (``tk_run_records`` and ``tk_run_texts``, the
  summaries, prompts and memory-key lists records name by digest), ``archive``
  (``chat_messages``, ``chat_summaries``: empty on this profile), ``audit``
  (``tool_invocations``), ``feedback`` (``tk_feedback``); ``bytes_by_table`` each table;
* ``transcript_bytes`` — UTF-8 bytes of the messages ``GET /messages`` serves (all pages);
  ``storage_ratio`` = all of it ÷ ``transcript_bytes`` (DESIGN's ≤ 2× target, now on
  everything kept per thread); ``state_ratio`` = checkpoints + messages only (the earlier
  figure); ``records_ratio`` = run records (with their texts); ``uncompressed_ratio`` = as
  ``storage_ratio`` with the bodies threadkeeper deflates (ledger rows, run records) counted
  inflated — the figure for text that does not compress at all.

Arms: the human message at ~950 UTF-8 bytes (the size DESIGN's target is stated for) and at
~300 bytes (short chat, where per-message overhead weighs three times as much). Reduced: 50
turns; full: 200. The time is the whole conversation; no baseline (the comparison with what
users would otherwise pick is ``test_bench_postgres_storage``'s). Gates (asserted, at every
size, 950-byte arm): ``records_ratio ≤ 1.3`` and ``storage_ratio ≤ 2.0`` (met since the
ledger stores each message's non-default fields, deflated, and run records are deflated:
docs/storage-postgres.md, "Measured: bytes by kind"). The 300-byte arm is measured, not gated.
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
from threadkeeper.adapters import ledger_codec as codec
from threadkeeper.adapters.postgres.backend import open_postgres
from threadkeeper.adapters.postgres.ledger import TABLE as LEDGER
from threadkeeper.adapters.sql import unpack_record
from threadkeeper.adapters.weigh import TableWeight
from threadkeeper.app.application import create_app
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.threads import ThreadRef

TURNS = {"reduced": 50, "full": 200}
STORAGE_TARGET = 2.0
RECORDS_TARGET = 1.3
FEEDBACK_EVERY = 10


async def _conversation(url: str, thread: str, turns: int, message_bytes: int) -> int:
    """Run the conversation through the app; the transcript's UTF-8 bytes as served."""
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as data:
        app = create_app(settings_for("postgres", Path(data), Servers(postgres_url=url)))
        async with AsyncTestClient(app, timeout=120) as client:
            client.headers.update(headers_for("postgres"))
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
                    assert noted.status_code in (200, 201, 204), noted.text
            served, before = 0, None
            while True:
                params: dict[str, Any] = {"limit": 100, **({"before": before} if before else {})}
                page = (await client.get(f"/v1/threads/{thread}/messages", params=params)).json()
                served += sum(len(m["content"].encode()) for m in page["messages"])
                before = page.get("next_before")
                if not before:
                    return served


async def weigh_thread(url: str, key: str) -> tuple[StorageUsage, dict[str, TableWeight]]:
    """What ``GET /v1/threads/{thread_id}/storage`` answers for the thread, and (rows, bytes)
    of every table keyed by thread: the backend's own weighing (``adapters.weigh``)."""
    async with open_postgres(url) as backend:
        return await backend.storage_usage(key), await backend.table_weights(key)


def inflated(conn: psycopg.Connection[Any], key: str) -> int:
    """Bytes the thread's compressed bodies (ledger rows ``tk1z``, run records ``Z…``) would
    add uncompressed: ``storage_ratio`` without threadkeeper's deflate (``uncompressed_ratio``;
    the synthetic text deflates ~2-3×, real chat less)."""
    extra = 0
    for (body,) in conn.execute(
        f"SELECT body FROM {LEDGER} WHERE thread_id = %s AND type = %s", (key, codec.COMPRESSED)
    ):
        extra += len(codec.inflate(bytes(body))) - len(body)
    for (blob,) in conn.execute("SELECT record FROM tk_run_records WHERE thread_key = %s", (key,)):
        extra += len(unpack_record(bytes(blob))) - len(blob)
    return extra


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
        usage, weights = asyncio.run(weigh_thread(url, key))
        with psycopg.connect(url) as conn:
            extra = inflated(conn, key)
    served = transcript[0]
    kinds = usage.by_kind()
    stored = usage.total
    state = usage.checkpoints + usage.messages
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
        state_ratio=round(state / served, 2),
        records_ratio=round(records / served, 2),
        bytes_by_kind=kinds,
        ratio_by_kind={kind: round(weight / served, 3) for kind, weight in kinds.items()},
        bytes_by_table={table: weight.bytes for table, weight in weights.items()},
        rows=rows,
    )
    assert rows["checkpoints"] == 1  # pruned to the newest after every run
    assert rows[LEDGER] >= 2 * turns  # each message stored once
    assert rows["tk_feedback"] == turns // FEEDBACK_EVERY
    assert rows["tk_run_records"] == turns
    if message_bytes == 950:
        if records / served > RECORDS_TARGET:  # not an AssertionError: never "expected"
            pytest.fail(f"records_ratio above {RECORDS_TARGET}: {benchmark.extra_info}")
        assert ratio <= STORAGE_TARGET, benchmark.extra_info
