"""The embedded profile's message ledger (``adapters.embedded.ledger``) through its real round
store: each message stored once in ``tk_checkpoint_messages``, the checkpoint holding refs (so
it does not grow with the thread), the history read back whole by a fresh process, replaced
messages' rows deleted in the round, a failed round leaving rows and cache as they were, a
checkpoint written before the ledger read and converted, deletion."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from threadkeeper.adapters.embedded import EmbeddedBackend, open_embedded
from threadkeeper.adapters.embedded import backend as embedded_backend
from threadkeeper.adapters.embedded.backend import DATABASE
from threadkeeper.adapters.ledger import CHANNEL, TABLE, refs_of
from threadkeeper.conformance.backend import (
    Turn,
    expected,
    new_ref,
    record_of,
    round_of,
    stage,
    store_round,
    thread_config,
    transcript_of,
)


def _db(backend: EmbeddedBackend) -> sqlite3.Connection:
    return sqlite3.connect(backend.data_dir / DATABASE)


def _rows(backend: EmbeddedBackend, key: str) -> list[int]:
    with _db(backend) as db:
        found = db.execute(
            f"SELECT seq FROM {TABLE} WHERE thread_id = ? ORDER BY seq", (key,)
        ).fetchall()
    return [int(r[0]) for r in found]


def _checkpoint(backend: EmbeddedBackend, key: str) -> tuple[bytes, Any]:
    """The thread's one root checkpoint: its blob and its value for the messages channel."""
    with _db(backend) as db:
        found = db.execute(
            "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
            (key,),
        ).fetchall()
    assert len(found) == 1, found
    type_, blob = found[0]
    decoded = backend.sqlite.serde.loads_typed((type_, blob))
    return bytes(blob), decoded["channel_values"].get(CHANNEL)


async def test_each_message_is_stored_once_and_the_checkpoint_holds_refs(
    backend: EmbeddedBackend,
) -> None:
    ref = new_ref()
    turns = [Turn.make(i) for i in range(6)]
    sizes = []
    for i, turn in enumerate(turns):
        await store_round(backend, ref, turn)
        assert len(_rows(backend, ref.key)) == 2 * (i + 1)  # this turn's two, none rewritten
        blob, value = _checkpoint(backend, ref.key)
        assert refs_of(value) == _rows(backend, ref.key)
        sizes.append(len(blob))
    assert await transcript_of(backend, ref) == expected(*turns)
    # twelve small integers, not twelve messages: the blob does not grow with the history
    # (each turn's two messages are ~600 bytes; the refs add a few)
    assert sizes[-1] - sizes[1] < 100, sizes


async def test_a_fresh_process_reads_the_history_from_the_rows(tmp_path: Path) -> None:
    ref = new_ref()
    turns = [Turn.make(i) for i in range(3)]
    async with open_embedded(tmp_path / "data") as first:
        for turn in turns[:2]:
            await store_round(first, ref, turn)
    async with open_embedded(tmp_path / "data") as second:  # an empty cache
        # a listing resolves refs from the rows too (the saver's alist holds the connection's
        # guard while it iterates: the rows are read after it, not inside it)
        listed = await asyncio.wait_for(_listed(second, ref), timeout=60)
        assert [len(item.checkpoint["channel_values"][CHANNEL]) for item in listed] == [4]
        assert await transcript_of(second, ref) == expected(*turns[:2])
        await store_round(second, ref, turns[2])
        assert await transcript_of(second, ref) == expected(*turns)
        assert len(_rows(second, ref.key)) == 6  # the first process's rows were not stored again


async def _listed(backend: EmbeddedBackend, ref: Any) -> list[Any]:
    return [item async for item in backend.saver.alist(thread_config(ref))]


async def _round(backend: EmbeddedBackend, ref: Any, turn: Turn, *stages: dict[str, Any]) -> None:
    """One round whose staging is ``stages`` (``stage``'s keyword arguments), then ``turn``."""
    async with backend.lock.hold(
        ref.key, "run-x", tenant_id=ref.tenant_id, user_id=ref.user_id
    ) as claim:
        with backend.round(ref.key, claim) as work:
            for extra in stages:
                await stage(backend, ref, None, **extra)
            await stage(backend, ref, turn)
            await work.store(record_of(ref, turn, "run-x"), round_of(ref, turn, "run-x"))


async def test_a_replaced_message_gets_a_new_row_and_the_round_deletes_the_old_one(
    backend: EmbeddedBackend,
) -> None:
    ref = new_ref()
    first, second, third = (Turn.make(i) for i in range(3))
    await store_round(backend, ref, first)
    await store_round(backend, ref, second)
    before = _rows(backend, ref.key)
    edited = HumanMessage("edited", id=first.human.id)
    await _round(
        backend, ref, third, {"messages": [edited, first.ai, *second.messages]}
    )  # one round, two checkpoints: the edit, then the turn
    rows = _rows(backend, ref.key)
    assert before[0] not in rows  # the replaced message's row is gone
    refs = refs_of(_checkpoint(backend, ref.key)[1])
    assert refs is not None
    assert sorted(refs) == rows  # and nothing else is left over
    assert len(rows) == 6
    state = await backend.saver.aget_tuple(thread_config(ref))
    assert state is not None
    assert [m.content for m in state.checkpoint["channel_values"][CHANNEL]][:1] == ["edited"]


async def test_a_round_that_fails_leaves_the_rows_and_the_thread_as_they_were(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = new_ref()
    first, failed, third = (Turn.make(i) for i in range(3))
    await store_round(backend, ref, first)
    before = _rows(backend, ref.key)

    async def refuse(*_: Any, **__: Any) -> None:
        raise RuntimeError("the disk is full")  # after the round inserted its message rows

    with monkeypatch.context() as patched:
        patched.setattr(embedded_backend, "insert_record", refuse)
        with pytest.raises(RuntimeError, match="disk is full"):
            await store_round(backend, ref, failed)
    assert _rows(backend, ref.key) == before
    assert await transcript_of(backend, ref) == expected(first)
    await store_round(backend, ref, third)  # the cache did not keep the rolled-back seqs
    assert await transcript_of(backend, ref) == expected(first, third)
    assert refs_of(_checkpoint(backend, ref.key)[1]) == _rows(backend, ref.key)


async def test_a_checkpoint_written_before_the_ledger_is_read_and_converted(
    backend: EmbeddedBackend,
) -> None:
    ref = new_ref()
    old, new = Turn.make(0), Turn.make(1)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {CHANNEL: old.messages}  # the list in the blob, as before
    checkpoint["channel_versions"] = {CHANNEL: 1}
    metadata: Any = {"source": "loop", "step": 0, "parents": {}}
    await backend.sqlite.aput(thread_config(ref), checkpoint, metadata, {CHANNEL: 1})
    assert isinstance(_checkpoint(backend, ref.key)[1], list)
    assert await transcript_of(backend, ref) == expected(old)
    await store_round(backend, ref, new)
    assert await transcript_of(backend, ref) == expected(old, new)
    assert refs_of(_checkpoint(backend, ref.key)[1]) == _rows(backend, ref.key)
    assert len(_rows(backend, ref.key)) == 4


async def test_deleting_a_thread_deletes_its_rows_and_only_its_rows(
    backend: EmbeddedBackend,
) -> None:
    gone, kept = new_ref(), new_ref()
    turn = Turn.make(1)
    await store_round(backend, gone, Turn.make(0))
    await store_round(backend, kept, turn)
    await backend.saver.adelete_thread(gone.key)
    assert _rows(backend, gone.key) == []
    assert await transcript_of(backend, gone) is None
    assert len(_rows(backend, kept.key)) == 2
    assert await transcript_of(backend, kept) == expected(turn)
