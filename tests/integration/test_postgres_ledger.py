"""``PostgresLedger`` on the real server: each message stored once, checkpoints hold refs, the
graph still sees the whole ``add_messages`` list — from the cache, from another replica's
cold cache, after a replaced message, a legacy checkpoint, a failed write and deletion."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import sqlalchemy
from alembic import command
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg_pool import AsyncConnectionPool

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.adapters import ledger_codec as codec
from threadkeeper.adapters import migrations
from threadkeeper.adapters.atomic import AtomicSaver
from threadkeeper.adapters.postgres import _pool, sqlalchemy_url
from threadkeeper.adapters.postgres.ledger import (
    REFS,
    TABLE,
    LedgerCorrupt,
    PostgresLedger,
    refs_of,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(url: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    opened = _pool(url, min_size=1, max_size=4)
    await opened.open(wait=True)
    yield opened
    await opened.close()


class Replica:
    """One service process: its own ledger (and cache) over the shared database."""

    def __init__(self, pool: AsyncConnectionPool[Any], answers: list[str]) -> None:
        self.ledger = PostgresLedger(AsyncPostgresSaver(pool), pool)
        self.atomic = AtomicSaver(self.ledger)
        self.model = ScriptedChatModel(script=[AIMessage(a) for a in answers])
        self.agent = create_agent(self.model, checkpointer=self.atomic)

    async def turn(self, thread_id: str, text: str) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        with self.atomic.staging(thread_id) as staging:
            await self.agent.ainvoke(
                {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]},
                config,
                durability="exit",
            )
            await self.atomic.commit(staging)
        await self.ledger.aprune([thread_id], strategy="keep_latest")

    async def messages(self, thread_id: str) -> list[BaseMessage]:
        state = await self.agent.aget_state({"configurable": {"thread_id": thread_id}})
        return list(state.values.get("messages", []))


def _rows(url: str, thread_id: str) -> list[tuple[int, bytes]]:
    with psycopg.connect(url) as conn:
        return [
            (int(seq), bytes(body))
            for seq, body in conn.execute(
                f"SELECT seq, body FROM {TABLE} WHERE thread_id = %s ORDER BY seq", (thread_id,)
            ).fetchall()
        ]


def _stored_refs(url: str, thread_id: str) -> list[int]:
    """The refs in the thread's one messages blob, decoded with the saver's serializer."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'messages'",
            (thread_id,),
        ).fetchone()
    assert row is not None
    decoded = JsonPlusSerializer().loads_typed((row[0], bytes(row[1])))
    refs = refs_of(decoded)
    assert refs is not None, decoded
    return refs


async def test_each_message_is_stored_once_and_the_checkpoint_holds_refs(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    replica = Replica(pool, [f"answer {i}" for i in range(5)])
    for i in range(5):
        await replica.turn("t", f"question {i}")
        rows = _rows(url, "t")
        assert len(rows) == 2 * (i + 1)  # this turn added its two messages, nothing rewritten
    messages = await replica.messages("t")
    assert [m.content for m in messages] == [
        text for i in range(5) for text in (f"question {i}", f"answer {i}")
    ]
    assert _stored_refs(url, "t") == [seq for seq, _ in _rows(url, "t")]
    with psycopg.connect(url) as conn:
        blob = conn.execute(
            "SELECT octet_length(blob) FROM checkpoint_blobs WHERE thread_id = 't' "
            "AND channel = 'messages'"
        ).fetchone()
    assert blob is not None
    assert blob[0] < 100  # ten small integers, not ten messages


async def test_a_replica_with_a_cold_cache_and_interleaved_writers_see_the_same_thread(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    a = Replica(pool, ["from a 1", "from a 2"])
    b = Replica(pool, ["from b 1"])
    await a.turn("t", "q1")
    await b.turn("t", "q2")  # b has never seen the thread: resolves a's rows from the table
    await a.turn("t", "q3")  # a's cache predates b's turn
    expected = ["q1", "from a 1", "q2", "from b 1", "q3", "from a 2"]
    assert [m.content for m in await a.messages("t")] == expected
    assert [m.content for m in await b.messages("t")] == expected
    fresh = Replica(pool, [])
    assert [m.content for m in await fresh.messages("t")] == expected
    assert len(_rows(url, "t")) == 6  # a did not store b's messages again


async def test_a_replaced_message_gets_a_new_row_and_the_old_one_is_collected(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    replica = Replica(pool, ["first answer"])
    await replica.turn("t", "question")
    before = await replica.messages("t")
    answer = before[1]
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    # add_messages replaces a message that keeps its id
    await replica.agent.aupdate_state(
        config, {"messages": [AIMessage("corrected answer", id=answer.id)]}
    )
    await replica.ledger.aprune(["t"], strategy="keep_latest")
    after = await replica.messages("t")
    assert [m.content for m in after] == ["question", "corrected answer"]
    assert [m.id for m in after] == [m.id for m in before]
    rows = _rows(url, "t")
    assert len(rows) == 2, rows  # the first answer's row is gone
    assert _stored_refs(url, "t") == [seq for seq, _ in rows]
    assert [m.content for m in await Replica(pool, []).messages("t")] == [
        "question",
        "corrected answer",
    ]


async def test_a_checkpoint_written_before_the_ledger_is_read_and_converted(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    legacy = AtomicSaver(AsyncPostgresSaver(pool))
    old = create_agent(ScriptedChatModel(script=[AIMessage("old answer")]), checkpointer=legacy)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    await old.ainvoke({"messages": [HumanMessage("old question")]}, config)
    assert _rows(url, "t") == []
    replica = Replica(pool, ["new answer"])
    assert [m.content for m in await replica.messages("t")] == ["old question", "old answer"]
    await replica.turn("t", "new question")
    assert len(_rows(url, "t")) == 4
    assert [m.content for m in await Replica(pool, []).messages("t")] == [
        "old question",
        "old answer",
        "new question",
        "new answer",
    ]


async def test_rows_stored_for_a_checkpoint_that_failed_are_collected_by_the_next_prune(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    replica = Replica(pool, ["a1", "lost answer", "a2"])
    await replica.turn("t", "q1")
    real_aput = replica.ledger.base.aput

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the server went away")

    replica.ledger.base.aput = failing  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await replica.turn("t", "lost question")
    assert len(_rows(url, "t")) == 4  # q1, a1 + the failed turn's two orphans
    replica.ledger.base.aput = real_aput  # type: ignore[method-assign]
    await replica.turn("t", "q2")
    assert [m.content for m in await replica.messages("t")] == ["q1", "a1", "q2", "a2"]
    assert len(_rows(url, "t")) == 4  # the orphans are gone


async def test_deleting_a_thread_deletes_its_rows_and_only_its_rows(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    replica = Replica(pool, ["a", "b"])
    await replica.turn("t1", "q")
    await replica.turn("t2", "q")
    await replica.atomic.adelete_thread("t1")
    assert _rows(url, "t1") == []
    assert len(_rows(url, "t2")) == 2
    assert await replica.messages("t1") == []


async def test_a_ref_to_a_missing_row_is_an_error_not_a_shorter_history(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    replica = Replica(pool, ["a"])
    await replica.turn("t", "q")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {TABLE} WHERE seq = (SELECT min(seq) FROM {TABLE})")
    with pytest.raises(LedgerCorrupt, match="missing"):
        await Replica(pool, []).messages("t")


async def test_a_channel_that_is_not_a_message_list_is_stored_as_it_is(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    ledger = PostgresLedger(AsyncPostgresSaver(pool), pool)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint: Any = {
        "v": 1,
        "id": str(uuid.uuid4()),
        "ts": "2026-11-30T00:00:00+00:00",
        "channel_values": {"messages": ["plain", "strings"]},
        "channel_versions": {"messages": "1"},
        "versions_seen": {},
        "updated_channels": ["messages"],
    }
    await ledger.aput(config, checkpoint, {}, {"messages": "1"})
    found = await ledger.aget_tuple({"configurable": {"thread_id": "t"}})
    assert found is not None
    assert found.checkpoint["channel_values"]["messages"] == ["plain", "strings"]
    assert _rows(url, "t") == []
    assert REFS not in str(found.checkpoint)


async def test_a_read_racing_a_deletion_sees_no_thread_not_a_corrupt_one(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    """Replica B reads the checkpoint, replica A deletes the thread before B reads the rows:
    B reads again and finds no thread (404), instead of reporting a corrupt one."""
    a = Replica(pool, ["answer"])
    await a.turn("t", "question")
    b = Replica(pool, [])
    real = b.ledger.base.aget_tuple
    calls = 0

    async def checkpoint_then_deletion(config: RunnableConfig) -> Any:
        nonlocal calls
        calls += 1
        found = await real(config)
        if calls == 1:
            await a.atomic.adelete_thread("t")  # lands between B's two reads
        return found

    b.ledger.base.aget_tuple = checkpoint_then_deletion  # type: ignore[method-assign]
    assert await b.messages("t") == []
    assert calls == 2


async def test_a_small_cache_still_gives_the_whole_history_and_stores_nothing_twice(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    """The cache bounds memory; a message evicted from it is stored again on the next write
    and its old row collected by the prune, so the thread keeps one row per message."""
    replica = Replica(pool, [f"answer {i}" for i in range(4)])
    replica.ledger = PostgresLedger(AsyncPostgresSaver(pool), pool, cache_messages=3)
    replica.atomic = AtomicSaver(replica.ledger)
    replica.agent = create_agent(replica.model, checkpointer=replica.atomic)
    for i in range(4):
        await replica.turn("t", f"question {i}")
    assert len(replica.ledger._messages) <= 3
    assert [m.content for m in await Replica(pool, []).messages("t")] == [
        text for i in range(4) for text in (f"question {i}", f"answer {i}")
    ]
    rows = _rows(url, "t")
    assert len(rows) == 8
    assert sorted(_stored_refs(url, "t")) == [seq for seq, _ in rows]  # refs: message order


async def test_the_hot_lists_stay_within_the_message_cache_bound(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    replica = Replica(pool, [f"a{i}" for i in range(6)])
    replica.ledger = PostgresLedger(AsyncPostgresSaver(pool), pool, cache_messages=5)
    replica.atomic = AtomicSaver(replica.ledger)
    replica.agent = create_agent(replica.model, checkpointer=replica.atomic)
    for thread in ("t1", "t2", "t3"):
        await replica.turn(thread, "q1")
        await replica.turn(thread, "q2")
    assert replica.ledger._hot_messages <= 5
    assert (
        sum(len(h.messages) for h in replica.ledger._hot.values()) == replica.ledger._hot_messages
    )
    for thread in ("t1", "t2", "t3"):  # whatever was evicted, the threads read back whole
        assert len(await Replica(pool, []).messages(thread)) == 4


def _alembic(url: str, step: str, revision: str) -> None:
    """``alembic upgrade|downgrade <revision>`` on the schema of ``url``."""
    engine = sqlalchemy.create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn:
            getattr(command, step)(migrations.config(conn), revision)
    finally:
        engine.dispose()


def _types(url: str, thread_id: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [
            str(r[0])
            for r in conn.execute(
                f"SELECT type FROM {TABLE} WHERE thread_id = %s ORDER BY seq", (thread_id,)
            )
        ]


async def test_rows_of_the_serializers_form_still_read_and_0007_converts_them(
    pool: AsyncConnectionPool[Any], url: str
) -> None:
    """Rows as the ledger wrote them before its compact form (``type = 'msgpack'``: what 0007's
    downgrade writes back) read as the same messages; 0007 rewrites them compact, in place."""
    replica = Replica(pool, ["first answer " * 20, "second answer"])
    await replica.turn("t", "first question " * 20)
    await replica.turn("t", "second question")
    written = await Replica(pool, []).messages("t")
    assert set(_types(url, "t")) <= set(codec.FORMATS)
    compact = _rows(url, "t")
    refs = _stored_refs(url, "t")

    _alembic(url, "downgrade", "0005")
    assert _types(url, "t") == ["msgpack"] * 4
    legacy = _rows(url, "t")
    assert [seq for seq, _ in legacy] == [seq for seq, _ in compact]
    assert sum(len(b) for _, b in legacy) > sum(len(b) for _, b in compact) + 4 * 100
    old = await Replica(pool, []).messages("t")  # a replica of this code, rows of the old form
    assert old == written
    assert [m.model_dump() for m in old] == [m.model_dump() for m in written]

    await Replica(pool, ["third answer"]).turn("t", "third question")  # on old rows: appends
    assert _types(url, "t")[:4] == ["msgpack"] * 4
    assert set(_types(url, "t")[4:]) <= set(codec.FORMATS)

    with psycopg.connect(url, autocommit=True) as conn:  # a row that does not decode at all
        conn.execute(f"INSERT INTO {TABLE} (thread_id, type, body) VALUES ('u', 'msgpack', 'x')")
    _alembic(url, "upgrade", "head")
    assert _rows(url, "u") == [(_rows(url, "u")[0][0], b"x")], "left as it was"
    assert set(_types(url, "t")) <= set(codec.FORMATS)
    assert [seq for seq, _ in _rows(url, "t")][:4] == [seq for seq, _ in compact]
    assert _stored_refs(url, "t")[:4] == refs
    after = await Replica(pool, []).messages("t")
    assert after[:4] == written
    assert [m.model_dump() for m in after[:4]] == [m.model_dump() for m in written]
    assert [m.content for m in after[4:]] == ["third question", "third answer"]
