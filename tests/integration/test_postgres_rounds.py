"""A round on the postgres profile prunes its thread in its own transaction: once
``RoundWork.store`` has committed, the thread is its newest checkpoint — with that
checkpoint's writes and blobs only — and the message rows it refers to, with no upkeep after
the commit (issue 12: LangGraph's ``aprune(keep_latest)`` after each commit was eleven more
statements on every run's path to its answer). A subgraph's checkpoints are still pruned by
``after_commit``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from threadkeeper.adapters.ledger import CHANNEL, TABLE, refs_of
from threadkeeper.adapters.postgres import PROFILE as POSTGRES
from threadkeeper.adapters.postgres.settings import PostgresSettings
from threadkeeper.adapters.profile import StorageBackend
from threadkeeper.adapters.serde import checkpoint_serializer
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

pytestmark = pytest.mark.integration


@pytest.fixture
async def backend(url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The postgres backend with its upkeep (``after_commit``) switched off."""
    async with POSTGRES.open(PostgresSettings(postgres_url=url)) as opened:

        async def none(thread_key: str) -> None:
            pass

        monkeypatch.setattr(opened, "after_commit", none)
        yield opened


_ROWS = {
    "checkpoints": "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint "
    "FROM checkpoints WHERE thread_id = %s",
    "writes": "SELECT DISTINCT checkpoint_ns, checkpoint_id FROM checkpoint_writes "
    "WHERE thread_id = %s",
    "blobs": "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
    "WHERE thread_id = %s",
    "rows": f"SELECT seq FROM {TABLE} WHERE thread_id = %s ORDER BY seq",
}
"""What a thread keeps, by table (the checkpoint tables' and the ledger's rows)."""


def _thread_rows(url: str, thread: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        found = {name: conn.execute(sql, (thread,)).fetchall() for name, sql in _ROWS.items()}
    found["rows"] = [int(seq) for (seq,) in found["rows"]]
    return found


def _assert_pruned(url: str, thread: str, head: str | None) -> None:
    """The thread is its head checkpoint, the head's writes and blobs, and the rows the
    head's message list refers to."""
    found = _thread_rows(url, thread)
    assert [(ns, cid) for ns, cid, _, _ in found["checkpoints"]] == [("", head)]
    _, _, parent, checkpoint = found["checkpoints"][0]
    assert parent is None, "the head's parent was pruned"
    assert all(cid == head for _, cid in found["writes"]), found["writes"]
    versions = checkpoint["channel_versions"]
    kept = {(channel, version) for _, channel, version, _, _ in found["blobs"]}
    assert kept <= {(channel, str(version)) for channel, version in versions.items()}, kept
    messages = next(
        (type_, bytes(blob))
        for _, channel, version, type_, blob in found["blobs"]
        if channel == CHANNEL and version == str(versions[CHANNEL])
    )
    refs = refs_of(checkpoint_serializer().loads_typed(messages))
    assert refs is not None
    assert found["rows"] == sorted(refs), "exactly the rows the head refers to"


async def test_a_stored_round_leaves_its_thread_pruned_with_no_upkeep(
    backend: Any, url: str
) -> None:
    ref = new_ref()
    turns = [Turn.make(i) for i in range(3)]
    for turn in turns:
        stored = await store_round(backend, ref, turn)
        _assert_pruned(url, ref.key, stored.head)
    assert await transcript_of(backend, ref) == expected(*turns)


async def test_a_round_replacing_a_message_deletes_the_old_row_in_its_transaction(
    backend: Any, url: str
) -> None:
    ref = new_ref()
    first = Turn.make(0)
    await store_round(backend, ref, first)
    rows_before = _thread_rows(url, ref.key)["rows"]
    assert len(rows_before) == 2
    changed = AIMessage("a corrected answer", id=first.ai.id)
    claim_id = str(uuid.uuid4())
    async with backend.lock.hold(ref.key, claim_id, tenant_id=ref.tenant_id) as claim:
        with backend.round(ref.key, claim) as work:
            nxt = Turn.make(1)
            await stage(backend, ref, nxt, messages=[first.human, changed])
            head = await work.store(record_of(ref, nxt, claim_id), round_of(ref, nxt, claim_id))
    _assert_pruned(url, ref.key, head)
    rows_after = _thread_rows(url, ref.key)["rows"]
    assert rows_before[0] in rows_after, "the human message's row is kept"
    assert rows_before[1] not in rows_after, "the replaced answer's row is deleted"
    assert not backend.saver.dirty(ref.key), "nothing is left for the upkeep to collect"


async def test_a_subgraphs_checkpoints_are_left_to_the_upkeep(url: str) -> None:
    """The round prunes the root namespace only; a subgraph's checkpoints go through
    LangGraph's ``aprune`` after the commit, as before."""

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"answer {len(state['messages'])}", id=str(uuid.uuid4()))]}

    child = StateGraph(MessagesState)
    child.add_node("answer", answer)
    child.add_edge(START, "answer")
    child.add_edge("answer", END)
    ref = new_ref()
    async with POSTGRES.open(PostgresSettings(postgres_url=url)) as opened:
        backend: StorageBackend = opened
        parent = StateGraph(MessagesState)
        parent.add_node("child", child.compile(checkpointer=True))
        parent.add_edge(START, "child")
        parent.add_edge("child", END)
        graph = parent.compile(checkpointer=backend.checkpointer)
        config: Any = thread_config(ref)
        for index in range(2):
            run_id = str(uuid.uuid4())
            async with backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id) as claim:
                with backend.round(ref.key, claim) as work:
                    human = HumanMessage(f"question {index}", id=str(uuid.uuid4()))
                    await graph.ainvoke({"messages": [human]}, config, durability="exit")
                    state = await graph.aget_state(config)
                    turn = Turn(human, state.values["messages"][-1], Turn.make(index).at)
                    await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
            namespaces = [ns for ns, _, _, _ in _thread_rows(url, ref.key)["checkpoints"]]
            assert namespaces.count("") == 1
            assert len(namespaces) - 1 <= 1, f"one checkpoint per subgraph namespace: {namespaces}"
        state = await graph.aget_state(config)
        assert [m.type for m in state.values["messages"]] == ["human", "ai"] * 2


async def test_a_round_whose_prune_fails_stores_nothing(backend: Any, url: str) -> None:
    """The prune is part of the round: when it fails, the round is not stored — the thread
    keeps its head, its rows and its transcript — and the next round prunes as usual."""
    ref = new_ref()
    first = await store_round(backend, ref, Turn.make(0))
    before = _thread_rows(url, ref.key)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION tk_refuse_deletes() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'delete refused by the test'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER tk_refuse_deletes BEFORE DELETE ON checkpoint_blobs "
            "FOR EACH ROW EXECUTE FUNCTION tk_refuse_deletes()"
        )
    with pytest.raises(psycopg.errors.RaiseException, match="delete refused"):
        await store_round(backend, ref, Turn.make(1))
    assert _thread_rows(url, ref.key) == before
    assert await backend.runs.get(ref.key, first.record.run_id) == first.record
    assert await transcript_of(backend, ref) == expected(first.turn)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER tk_refuse_deletes ON checkpoint_blobs")
    again = await store_round(backend, ref, Turn.make(2))
    _assert_pruned(url, ref.key, again.head)
    assert await transcript_of(backend, ref) == expected(first.turn, again.turn)
