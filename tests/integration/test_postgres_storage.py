"""The postgres profile keeps one checkpoint per thread (pruned by each round, in its transaction),
whose state still holds the whole history, each message stored once (``PostgresLedger``):
storage grows with the transcript, not with its square (docs/storage-postgres.md)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from tests.api.conftest import Servers, headers_for, run, settings_for
from threadkeeper.adapters import ledger_codec as codec
from threadkeeper.adapters.postgres.ledger import TABLE
from threadkeeper.adapters.serde import checkpoint_serializer
from threadkeeper.app.application import create_app

pytestmark = pytest.mark.integration
TURNS = 12


async def test_one_checkpoint_per_thread_and_the_whole_history(url: str, tmp_path: Path) -> None:
    app = create_app(settings_for("postgres", tmp_path, Servers(postgres_url=url)))
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(headers_for("postgres"))
        for turn in range(TURNS):
            await run(client, "long", f"Question {turn}: is dental treatment covered? " * 4)
        page = (await client.get("/v1/threads/long/messages", params={"limit": 100})).json()
    assert len(page["messages"]) == 2 * TURNS
    with psycopg.connect(url) as conn:
        checkpoints = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id LIKE '%:long'"
        ).fetchone()
        refs = conn.execute(
            "SELECT octet_length(blob) FROM checkpoint_blobs "
            "WHERE thread_id LIKE '%:long' AND channel = 'messages'"
        ).fetchall()
        ledger = conn.execute(
            f"SELECT count(*), coalesce(sum(octet_length(body)), 0) FROM {TABLE} "
            "WHERE thread_id LIKE '%:long'"
        ).fetchone()
        blobs = conn.execute(
            "SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs "
            "WHERE thread_id LIKE '%:long'"
        ).fetchone()
    assert checkpoints == (1,)
    # the checkpoint's message list is refs (a few bytes per message), each message one row
    assert len(refs) == 1
    assert refs[0][0] < 20 * TURNS, refs
    assert ledger is not None
    assert ledger[0] >= 2 * TURNS
    transcript = sum(len(m["content"].encode()) for m in page["messages"])
    assert blobs is not None
    assert blobs[0] + ledger[1] < 6 * transcript, (blobs[0], ledger[1], transcript)


async def test_the_service_writes_compact_ledger_rows_that_read_back_exactly(
    url: str, tmp_path: Path
) -> None:
    """Every message the service stores is a compact row (``ledger_codec``), smaller than the
    serializer's form by its field names and defaults, and reads back as the very message the
    serializer's form would (class, fields, ids, metadata, usage, the fields given)."""
    app = create_app(settings_for("postgres", tmp_path, Servers(postgres_url=url)))
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(headers_for("postgres"))
        for turn in range(4):
            await run(client, "compact", f"بیمه دندان‌پزشکی {turn} 牙科保险 is dental covered?")
    serde = checkpoint_serializer()
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"SELECT type, body FROM {TABLE} WHERE thread_id LIKE '%:compact' ORDER BY seq"
        ).fetchall()
    assert len(rows) >= 8
    for type_, body in rows:
        assert type_ in codec.FORMATS
        message = codec.decode(type_, bytes(body), serde)
        legacy_type, legacy = serde.dumps_typed(message)
        again = serde.loads_typed((legacy_type, legacy))
        assert type(again) is type(message)
        assert again == message
        assert again.model_fields_set == message.model_fields_set
        assert again.model_dump() == message.model_dump()
        raw = codec.pack(message)
        assert raw is not None
        assert len(raw) + 100 < len(legacy), (len(raw), len(legacy), message)
