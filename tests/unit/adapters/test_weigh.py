"""``adapters.weigh`` and ``adapters.written`` on SQLite: tables found by their key column,
rows weighed by thread, a round's statements counted by the table they write."""

from __future__ import annotations

import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from threadkeeper.adapters import written
from threadkeeper.adapters.ledger_codec import ZDICT as LEDGER_ZDICT
from threadkeeper.adapters.sql import COMPRESSED_RECORD, RECORD_ZDICT, pack_record, unpack_record
from threadkeeper.adapters.weigh import ROW_OVERHEAD, ThreadWeigher, inflated_length, keyed_tables


async def test_rows_are_weighed_by_thread_and_kind(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.sqlite3'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE checkpoints (thread_id TEXT, body BLOB)"))
            await conn.execute(text("CREATE TABLE tk_feedback (thread_key TEXT, comment TEXT)"))
            await conn.execute(text("CREATE TABLE tk_run_claims (thread_key TEXT, token TEXT)"))
            await conn.execute(text("CREATE TABLE other_keyed (thread_key TEXT, x TEXT)"))
            await conn.execute(text("CREATE TABLE tk_new_ledger (thread_id TEXT, b BLOB)"))
            await conn.execute(text("CREATE TABLE unkeyed (prefix TEXT)"))
            await conn.execute(
                text("INSERT INTO checkpoints VALUES ('t', x'00010203'), ('u', x'00')")
            )
            await conn.execute(text("INSERT INTO tk_feedback VALUES ('t', 'گل')"))
            await conn.execute(text("INSERT INTO tk_run_claims VALUES ('t', 'token')"))
            await conn.execute(text("INSERT INTO other_keyed VALUES ('t', 'ab')"))
            await conn.execute(text("INSERT INTO tk_new_ledger VALUES ('t', x'0102')"))
        async with engine.connect() as conn:
            names = {t.name: t.key for t in await keyed_tables(conn)}
            assert names == {
                "checkpoints": "thread_id",
                "tk_feedback": "thread_key",
                "tk_run_claims": "thread_key",
                "other_keyed": "thread_key",
                "tk_new_ledger": "thread_id",
            }
            weigher = ThreadWeigher()
            weights = await weigher.weights(conn, "t")
            assert weights["checkpoints"].rows == 1
            assert weights["checkpoints"].bytes == 1 + 4 + ROW_OVERHEAD
            assert weights["tk_feedback"].bytes == 1 + 4 + ROW_OVERHEAD  # UTF-8 bytes
            usage = await weigher.usage(conn, "t")
            assert usage.checkpoints == 1 + 4 + ROW_OVERHEAD
            assert usage.feedback == 1 + 4 + ROW_OVERHEAD
            assert usage.run_records == 1 + 2 + ROW_OVERHEAD  # an unknown thread_key table
            assert usage.messages == 1 + 2 + ROW_OVERHEAD  # threadkeeper's, keyed by thread_id
            assert usage.total == sum(
                (usage.checkpoints, usage.feedback, usage.run_records, usage.messages)
            )
            assert (await weigher.usage(conn, "nobody")).total == 0
    finally:
        await engine.dispose()


async def test_a_rounds_statements_are_counted_by_the_table_they_write(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.sqlite3'}")
    written.watch_engine(engine)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE tk_run_records (thread_key TEXT, record BLOB)"))
            await conn.execute(text("INSERT INTO tk_run_records VALUES ('before', x'00')"))
            with written.tally() as counts:
                await conn.execute(
                    text("INSERT INTO tk_run_records VALUES (:k, :r)"), {"k": "t", "r": b"abc"}
                )
                await conn.exec_driver_sql(
                    "INSERT OR REPLACE INTO tk_run_records VALUES (?, ?)",
                    [("t", b"de"), ("u", b"f")],
                )
                await conn.execute(text("SELECT * FROM tk_run_records"))
                await conn.execute(text("DELETE FROM tk_run_records WHERE thread_key = 'u'"))
        assert counts == {"run_records": (1 + 3) + (1 + 2) + (1 + 1)}
        assert not written.counting()
    finally:
        await engine.dispose()


def test_kinds_of_statements() -> None:
    assert written.kind_of('INSERT INTO "checkpoint_blobs" (a) VALUES (1)') == "checkpoints"
    assert written.kind_of("insert or ignore into writes VALUES (1)") == "checkpoints"
    assert written.kind_of("UPDATE chat_summaries SET x = 1") == "archive"
    assert written.kind_of("INSERT INTO tk_run_claims VALUES (1)") is None
    assert written.kind_of("SELECT 1") is None
    assert written.kind_of("INSERT INTO tk_new (a) VALUES (1)") is None
    assert written.kind_of("INSERT INTO tk_new (a) VALUES (1)", unknown="messages") == "messages"
    assert written.value_bytes(["ab", b"c", 5, None, {"k": "é"}]) == 2 + 1 + 8 + 0 + 2


@given(st.binary(max_size=300_000), st.sampled_from([LEDGER_ZDICT, RECORD_ZDICT]))
@settings(max_examples=60, deadline=None)
def test_an_inflated_length_is_the_length_of_the_inflated_bytes(raw: bytes, zdict: bytes) -> None:
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, zdict)
    body = deflate.compress(raw) + deflate.flush()
    assert inflated_length(body, zdict) == len(raw)


async def test_deflated_payloads_count_inflated_in_the_logical_figures(tmp_path: Path) -> None:
    """A ledger row stored ``tk1z`` and a record stored ``Z…`` count their stored length in
    the usage and their inflated length in its ``logical`` figures; rows stored as they are,
    and other threads' rows, change nothing."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.sqlite3'}")
    text_kept = b"the same dental claim, again and again " * 500
    squeezed = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, LEDGER_ZDICT)
    body = squeezed.compress(text_kept) + squeezed.flush()
    record = pack_record(b'{"record": "' + text_kept + b'"}')
    assert record.startswith(COMPRESSED_RECORD)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("CREATE TABLE tk_checkpoint_messages (thread_id TEXT, type TEXT, body BLOB)")
            )
            await conn.execute(text("CREATE TABLE tk_run_records (thread_key TEXT, record BLOB)"))
            insert_message = text("INSERT INTO tk_checkpoint_messages VALUES (:t, :type, :body)")
            await conn.execute(insert_message, {"t": "t", "type": "tk1z", "body": body})
            await conn.execute(insert_message, {"t": "t", "type": "tk1", "body": b"plain"})
            await conn.execute(insert_message, {"t": "u", "type": "tk1z", "body": body})
            insert_record = text("INSERT INTO tk_run_records VALUES (:t, :record)")
            await conn.execute(insert_record, {"t": "t", "record": record})
            await conn.execute(insert_record, {"t": "t", "record": b'{"short": 1}'})
            await conn.execute(insert_record, {"t": "t", "record": b"Znot deflate at all"})
        async with engine.connect() as conn:
            usage = await ThreadWeigher().usage(conn, "t")
        stored, logical = usage.by_kind(), usage.uncompressed.by_kind()
        assert logical["messages"] - stored["messages"] == len(text_kept) - len(body)
        growth = len(unpack_record(record)) - len(record) + len(COMPRESSED_RECORD)
        assert logical["run_records"] - stored["run_records"] == growth
        assert stored["messages"] < len(text_kept) // 10 < logical["messages"]
    finally:
        await engine.dispose()
