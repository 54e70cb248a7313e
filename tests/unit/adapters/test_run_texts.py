"""``adapters.sql``: run records stored compact (``StoredRecord``: texts by digest in
``tk_run_texts``, summary versions as deltas), records of the earlier shape still read, and a
memory reset leaves no version of a prompt that held the memory (SQLite; the same code runs
on PostgreSQL and MySQL in the integration suites)."""

from __future__ import annotations

import msgspec
from sqlalchemy import insert, select, update

from threadkeeper.adapters.embedded import EmbeddedBackend
from threadkeeper.adapters.sql import (
    COMPRESSED_RECORD,
    MAX_DEPTH,
    pack_record,
    record_row,
    run_records,
    run_texts,
    unpack_record,
)
from threadkeeper.conformance.run_records import compact_record, record, summary_versions


async def texts_of(backend: EmbeddedBackend, key: str) -> list[tuple[str | None, int, str]]:
    async with backend.runs.connect() as conn:
        rows = await conn.execute(
            select(run_texts.c.base, run_texts.c.depth, run_texts.c.body).where(
                run_texts.c.thread_key == key
            )
        )
        return [(r[0], int(r[1]), str(r[2])) for r in rows.all()]


async def test_summary_versions_are_deltas_and_chains_stay_short(
    backend: EmbeddedBackend,
) -> None:
    key = "acme:u1:deltas"
    versions = summary_versions(80, cap=30)
    items = [
        compact_record(key, tenant="acme", user="u1", version=i, summary=text)
        for i, text in enumerate(versions)
    ]
    for item in items:
        await backend.runs.save(item)
    rows = await texts_of(backend, key)
    summaries = [r for r in rows if r[0] is not None or r[2].startswith("Summary")]
    assert len(summaries) == len(versions), "each version once"
    assert max(depth for _, depth, _ in rows) <= MAX_DEPTH
    whole = sum(len(v.encode()) for v in versions)
    stored = sum(len(body.encode()) for _, _, body in summaries)
    assert stored < whole / 5, (stored, whole)
    for item in (items[0], items[41], items[-1]):
        assert await backend.runs.get(key, item.run_id) == item
    async with backend.runs.connect() as conn:
        raw = (await conn.execute(select(run_records.c.record).limit(1))).scalar_one()
    assert unpack_record(bytes(raw)).startswith(b"[2,"), "the compact shape"


async def test_a_record_of_the_earlier_shape_reads_as_it_was(backend: EmbeddedBackend) -> None:
    old = msgspec.structs.replace(record("acme:u1:old"), system_prompt="a prompt")
    row = {
        **await _columns(backend, old),
        "record": msgspec.json.encode(old),  # what was stored before: the RunRecord as JSON
    }
    async with backend.runs.begin() as conn:
        await conn.execute(insert(run_records).values(**row))
    assert await backend.runs.get(old.thread_key, old.run_id) == old
    assert await backend.runs.by_human_message(old.thread_key, old.human_message_id) == old
    assert await texts_of(backend, old.thread_key) == []


async def _columns(backend: EmbeddedBackend, item: object) -> dict[str, object]:
    async with backend.runs.begin() as conn:
        row = await record_row(conn, item)  # type: ignore[arg-type]
        await conn.rollback()
    return {k: v for k, v in row.items() if k != "record"}


async def test_a_memory_reset_leaves_no_prompt_that_held_the_memory(
    backend: EmbeddedBackend,
) -> None:
    prompt = "You are the assistant.\n\n<memory>\nprofile.household: married\n</memory>"
    key = "acme:u1:reset"
    first, second = (
        msgspec.structs.replace(
            compact_record(key, tenant="acme", user="u1", version=i, summary="s"),
            system_prompt=prompt,
        )
        for i in range(2)
    )
    old = msgspec.structs.replace(record(key, tenant="acme", user="u1"), system_prompt=prompt)
    for item in (first, second):
        await backend.runs.save(item)
    columns = await _columns(backend, old)
    async with backend.runs.begin() as conn:
        await conn.execute(insert(run_records).values(**columns, record=msgspec.json.encode(old)))
    assert any("married" in body for _, _, body in await texts_of(backend, key))
    assert await backend.runs.forget_memory("acme", "u1") == 3, "both sharing one text, and one old"
    assert not any("married" in body for _, _, body in await texts_of(backend, key))
    for item in (first, second, old):
        stored = await backend.runs.get(key, item.run_id)
        assert stored is not None
        assert "married" not in stored.system_prompt
        assert stored.model_calls == item.model_calls
    async with backend.runs.connect() as conn:
        blobs = (await conn.execute(select(run_records.c.record))).scalars().all()
    assert not any(b"married" in unpack_record(bytes(blob)) for blob in blobs)


async def test_records_are_stored_compressed_and_uncompressed_ones_still_read(
    backend: EmbeddedBackend,
) -> None:
    key = "acme:u1:packed"
    item = compact_record(key, tenant="acme", user="u1", version=1, summary="a summary")
    await backend.runs.save(item)
    async with backend.runs.connect() as conn:
        blob = bytes((await conn.execute(select(run_records.c.record))).scalar_one())
    assert blob.startswith(COMPRESSED_RECORD)
    plain = unpack_record(blob)
    assert plain.startswith(b"[2,")
    assert len(blob) < len(plain)
    assert pack_record(plain) == blob
    async with backend.runs.begin() as conn:  # as written before records were compressed
        await conn.execute(update(run_records).values(record=plain))
    assert await backend.runs.get(key, item.run_id) == item
    assert unpack_record(b"[2]") == b"[2]"
    assert pack_record(b"[2]") == b"[2]", "kept as it is where compression would not pay"


async def test_a_records_texts_take_one_select_and_one_insert(backend: EmbeddedBackend) -> None:
    """The texts of a record (a summary per model call, the memory keys, the prompt) are
    looked up in one statement and written in one (issue 12: a statement per text and per
    delta base, up to seven per run), with the deltas and reads as before."""
    from sqlalchemy import event

    key = "acme:u1:statements"
    seen: list[str] = []
    engine = backend.runs.engine  # type: ignore[attr-defined]

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _seen(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if "tk_run_texts" in statement:
            seen.append(statement.split()[0].upper())

    versions = summary_versions(6, cap=30)
    items = [
        compact_record(key, tenant="acme", user="u1", version=i, summary=text)
        for i, text in enumerate(versions)
    ]
    for item in items:
        seen.clear()
        await backend.runs.save(item)
        assert seen == ["SELECT", "INSERT"], seen
    rows = await texts_of(backend, key)
    assert sum(1 for base, _, _ in rows if base is not None) >= len(versions) - 1, "deltas"
    for item in items:
        assert await backend.runs.get(key, item.run_id) == item
