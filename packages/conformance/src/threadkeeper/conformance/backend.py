"""``StorageBackend`` conformance: an opened storage profile, driven as the run service drives it.

A run holds its thread (``backend.lock.hold`` → the claim), opens the round
(``backend.round(key, claim)``), writes its checkpoints through ``backend.checkpointer`` (staged
until stored) and stores the round whole (``RoundWork.store(record, round)``). The suite checks:

- **a round is atomic**: stored whole — the head checkpoint, the run record naming it, the
  transcript — or, when it is left unstored, its claim was replaced or revoked, or its store
  fails, not at all: no checkpoint, no run record, no archive row of it remains;
- **the run record exists iff the round is stored**, and names the round's head checkpoint
  (replay reads the run's messages from it);
- **cold start** (backends whose transcript is an archive): a thread whose checkpoints are
  gone is seeded from the archive's messages and summary; a checkpoint behind the archive is
  detected and dropped;
- **thread deletion**: everything of the thread, counted; a run in flight is waited for;
- **user erasure**: every thread, memory item and feedback of the user in the tenant and
  nothing of anyone else's — and a run in flight, its claim revoked first, stores nothing;
- **retention**: idle threads by their newest round, ``would_delete`` counting what
  ``delete_threads`` deletes, a thread active again since it was listed kept (``idle_before``);
- **storage per thread** (``storage_usage``): every kind the profile keeps
  (``storage_kinds``) is > 0 once the thread has rounds, grows with them, is 0 for the others
  and for another thread, and is all 0 once the thread is deleted or its user erased; a
  stored round says what it wrote (``RoundWork.written``: > 0 for each kind a round writes).

Subclass ``BackendConformance`` and provide ``open_backend``: a fixture yielding an opened
backend on empty storage (a new one for each test). Every test writes its data through the
backend itself: rounds through ``round``, memory through ``store``, feedback through ``runs``.
A round's times (checkpoint ``ts``, run record ``created_at``, archived messages) are set
together, so each profile's notion of a thread's activity agrees.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, MessagesState, StateGraph

from threadkeeper.domain.errors import ClaimLost, UnknownThread
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.prompt import MEMORY_CLOSE, MEMORY_OPEN
from threadkeeper.domain.retention import ErasureReceipt, sweep
from threadkeeper.domain.runs import FORGOTTEN, Feedback, RunRecord, content_digest
from threadkeeper.domain.storage import KINDS
from threadkeeper.domain.summary import SUMMARY_HEADING, encode_summary
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.transcript import Round, ToolInvocation, to_transcript

if TYPE_CHECKING:
    from threadkeeper.adapters.profile import StorageBackend

DAY = timedelta(days=1)


def new_ref(tenant: str = "acme", user: str | None = None) -> ThreadRef:
    return ThreadRef(tenant, user or f"u{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}")


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Turn:
    """One round's two messages as the agent leaves them in state (stamped with their time,
    the answer with its status), in Persian, Chinese and English."""

    human: HumanMessage
    ai: AIMessage
    at: datetime

    @classmethod
    def make(cls, index: int, at: datetime | None = None) -> Turn:
        at = at or now()
        stamp = {"at": at.isoformat()}
        return cls(
            HumanMessage(
                f"پرسش {index}: آیا دندانپزشکی پوشش دارد؟ 问题 {index}: is dental covered?",
                id=f"h{index}-{uuid.uuid4().hex[:12]}",
                response_metadata={"threadkeeper": stamp},
            ),
            AIMessage(
                f"Answer {index}: dental cover pays 80%. پاسخ {index} — 回答 {index}",
                id=f"a{index}-{uuid.uuid4().hex[:12]}",
                response_metadata={"threadkeeper": {**stamp, "status": "answered"}},
            ),
            at,
        )

    @property
    def messages(self) -> list[BaseMessage]:
        return [self.human, self.ai]


def summary_state(text: str, through: str) -> dict[str, Any]:
    """A rolling summary as the ``summary`` state field holds it."""
    return {"text": f"{SUMMARY_HEADING}\n- User: {text}", "version": 1, "through_id": through}


def record_of(
    ref: ThreadRef, turn: Turn, run_id: str, *, system_prompt: str = "You answer."
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        thread_id=ref.thread_id,
        human_message_id=str(turn.human.id),
        status="answered",
        created_at=turn.at,
        response={
            "run_id": run_id,
            "thread_id": ref.thread_id,
            "status": "answered",
            "message": {"id": turn.ai.id, "role": "ai", "content": turn.ai.content},
        },
        system_prompt=system_prompt,
        prompt_version="conformance",
        content_digest=content_digest(str(turn.human.content)),
    )


def round_of(
    ref: ThreadRef, turn: Turn, run_id: str, summary: dict[str, Any] | None = None
) -> Round:
    human, ai = to_transcript(turn.messages)
    return Round(
        run_id=run_id,
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        thread_id=ref.thread_id,
        human=human,
        ai=ai,
        summary=encode_summary(summary),
    )


def thread_config(ref: ThreadRef) -> RunnableConfig:
    """The graph's config of a run on ``ref`` (the checkpoints' thread is its key)."""
    return {
        "configurable": {
            "thread_id": ref.key,
            "checkpoint_ns": "",
            "tenant_id": ref.tenant_id,
            "user_id": ref.user_id,
        }
    }


async def stage(
    backend: StorageBackend,
    ref: ThreadRef,
    turn: Turn | None,
    *,
    summary: dict[str, Any] | None = None,
    messages: Sequence[BaseMessage] | None = None,
    at: datetime | None = None,
) -> None:
    """Write a checkpoint through ``backend.checkpointer`` — inside a round it is staged — as
    a graph step does: the thread's messages so far (or ``messages``) plus ``turn``'s, at the
    turn's time."""
    checkpointer = backend.checkpointer
    config = thread_config(ref)
    current = await checkpointer.aget_tuple(config)
    values: dict[str, Any] = dict(current.checkpoint["channel_values"]) if current else {}
    versions: dict[str, Any] = dict(current.checkpoint["channel_versions"]) if current else {}
    if messages is None:
        messages = list(values.get("messages") or [])
    changed: dict[str, Any] = {"messages": [*messages, *(turn.messages if turn else [])]}
    if summary is not None:
        changed["summary"] = summary
    new_versions = {
        channel: checkpointer.get_next_version(versions.get(channel), None) for channel in changed
    }
    checkpoint = empty_checkpoint()
    checkpoint["ts"] = (turn.at if turn else (at or now())).isoformat()
    checkpoint["channel_values"] = {**values, **changed}  # every channel, as a graph step
    checkpoint["channel_versions"] = {**versions, **new_versions}
    parent: dict[str, Any] = dict(config["configurable"])
    if current is not None:
        parent["checkpoint_id"] = current.config["configurable"]["checkpoint_id"]
    metadata: Any = {
        "source": "loop",
        "step": (current.metadata.get("step", 0) + 1) if current else 0,
        "parents": {},
        "tenant_id": ref.tenant_id,
        "user_id": ref.user_id,
    }
    await checkpointer.aput({"configurable": parent}, checkpoint, metadata, new_versions)


@dataclass(frozen=True)
class Stored:
    """A round stored by ``store_round``: its record and the head checkpoint ``store`` said."""

    record: RunRecord
    head: str | None
    turn: Turn
    written: Mapping[str, int] = field(default_factory=dict)
    """The bytes the round wrote, by kind (``RoundWork.written``)."""


async def store_round(
    backend: StorageBackend,
    ref: ThreadRef,
    turn: Turn,
    *,
    run_id: str | None = None,
    summary: dict[str, Any] | None = None,
    system_prompt: str = "You answer.",
    tools: Sequence[ToolInvocation] = (),
) -> Stored:
    """One run on ``ref`` as the service runs it: hold, round, stage, store, release."""
    run_id = run_id or str(uuid.uuid4())
    async with backend.lock.hold(
        ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id
    ) as claim:
        with backend.round(ref.key, claim) as work:
            seed = await backend.transcript.seed(ref.key)
            if seed is not None:  # a cold start, stored with the round (``aupdate_state``)
                before = turn.at - timedelta(microseconds=1)
                await stage(
                    backend,
                    ref,
                    None,
                    messages=seed["messages"],
                    summary=seed.get("summary"),
                    at=before,
                )
            await stage(backend, ref, turn, summary=summary)
            record = record_of(ref, turn, run_id, system_prompt=system_prompt)
            head = await work.store(record, round_of(ref, turn, run_id, summary), tools)
    return Stored(msgspec.structs.replace(record, checkpoint_id=head), head, turn, work.written)


async def head_of(backend: StorageBackend, ref: ThreadRef) -> str | None:
    """The id of the thread's newest checkpoint in the profile's own saver."""
    found = await backend.saver.aget_tuple(
        {"configurable": {"thread_id": ref.key, "checkpoint_ns": ""}}
    )
    return None if found is None else str(found.config["configurable"]["checkpoint_id"])


async def transcript_of(
    backend: StorageBackend, ref: ThreadRef
) -> list[tuple[str, str, str]] | None:
    """(id, role, content) of the thread's whole transcript; ``None``: no such thread."""
    try:
        page = await backend.transcript.page(ref.key, limit=100)
    except UnknownThread:
        return None
    return [(m.id, m.role, m.content) for m in page.messages]


def expected(*turns: Turn) -> list[tuple[str, str, str]]:
    return [(str(m.id), m.role, m.content) for t in turns for m in to_transcript(t.messages)]


async def seed_memory(backend: StorageBackend, ref: ThreadRef, items: int) -> None:
    for index in range(items):
        kind = MemoryKind.FACTS if index % 2 else MemoryKind.PROFILE
        await backend.store.aput(
            memory_namespace(ref.tenant_id, ref.user_id, kind),
            f"key-{index}-{uuid.uuid4().hex[:4]}",
            {"value": "v", "source": {"thread_id": ref.thread_id, "message_id": "m"}},
        )


async def memory_items(backend: StorageBackend, tenant_id: str, user_id: str) -> int:
    total = 0
    for kind in MemoryKind:
        total += len(
            await backend.store.asearch(memory_namespace(tenant_id, user_id, kind), limit=100)
        )
    return total


async def give_feedback(backend: StorageBackend, stored: Stored) -> None:
    record = stored.record
    await backend.runs.add_feedback(
        Feedback(
            record.run_id,
            record.thread_key,
            record.tenant_id,
            record.user_id,
            1,
            "clear",
            stored.turn.at,
        )
    )


async def abandon_round(
    backend: StorageBackend, ref: ThreadRef, run_id: str, failure: BaseException
) -> None:
    """A run that stages a round and then fails (or is cancelled) before storing it."""
    async with backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id) as claim:
        with backend.round(ref.key, claim):
            await stage(backend, ref, Turn.make(1))
            raise failure


def tool_calls(turn: Turn) -> list[ToolInvocation]:
    """The audit rows of a round that called one tool."""
    return [
        ToolInvocation(
            "search_kb", f"call-{uuid.uuid4().hex[:8]}", "0" * 64, 12.5, "success", turn.at
        )
    ]


async def until(condition: Any, *, seconds: float = 10.0) -> None:
    """Wait until the async predicate ``condition()`` holds."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.05)


class BackendConformance:
    """Subclass and provide ``open_backend`` (a fixture yielding an opened ``StorageBackend`` on
    empty storage)."""

    @pytest.fixture
    def backend(self, open_backend: StorageBackend) -> StorageBackend:
        return open_backend

    async def assert_nothing_of(self, backend: StorageBackend, ref: ThreadRef, run_id: str) -> None:
        """Nothing of the thread is stored: no checkpoint, no run record, no transcript."""
        assert await head_of(backend, ref) is None, "a checkpoint was stored"
        assert await backend.runs.get(ref.key, run_id) is None, "a run record was stored"
        assert await transcript_of(backend, ref) is None, "the transcript holds the round"
        assert await backend.transcript.seed(ref.key) is None, "the archive holds the round"

    # --- a round is atomic ------------------------------------------------------------------

    async def test_a_stored_round_is_stored_whole(self, backend: StorageBackend) -> None:
        ref = new_ref()
        turn = Turn.make(0)
        stored = await store_round(backend, ref, turn)
        assert stored.head is not None
        assert await head_of(backend, ref) == stored.head
        record = await backend.runs.get(ref.key, stored.record.run_id)
        assert record == stored.record
        assert record is not None
        assert record.checkpoint_id == stored.head, "the record names the round's head"
        found = await backend.runs.by_human_message(ref.key, str(turn.human.id))
        assert found == record
        assert await transcript_of(backend, ref) == expected(turn)
        assert await backend.transcript.seed(ref.key) is None, "the checkpoints are current"

    async def test_rounds_follow_one_another(self, backend: StorageBackend) -> None:
        ref = new_ref()
        turns = [Turn.make(i) for i in range(3)]
        heads = [(await store_round(backend, ref, turn)).head for turn in turns]
        assert len(set(heads)) == 3
        assert await head_of(backend, ref) == heads[-1]
        assert await transcript_of(backend, ref) == expected(*turns)

    async def test_nothing_is_visible_before_the_round_is_stored(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        turn = Turn.make(0)
        run_id = str(uuid.uuid4())
        async with backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id) as claim:
            with backend.round(ref.key, claim) as work:
                await stage(backend, ref, turn)
                staged = await backend.checkpointer.aget_tuple(thread_config(ref))
                assert staged is not None, "the run reads what it staged"
                await self.assert_nothing_of(backend, ref, run_id)
                await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
        assert await transcript_of(backend, ref) == expected(turn)

    async def test_a_round_left_unstored_stores_nothing(self, backend: StorageBackend) -> None:
        """A run that fails (or is cancelled) inside its round leaves the thread as it was."""
        ref = new_ref()
        first = await store_round(backend, ref, Turn.make(0))
        run_id = str(uuid.uuid4())
        with pytest.raises(RuntimeError, match="the model failed"):
            await abandon_round(backend, ref, run_id, RuntimeError("the model failed"))
        assert await head_of(backend, ref) == first.head
        assert await backend.runs.get(ref.key, run_id) is None
        assert await transcript_of(backend, ref) == expected(first.turn)
        fresh, other_run = new_ref(), str(uuid.uuid4())
        with pytest.raises(asyncio.CancelledError):
            await abandon_round(backend, fresh, other_run, asyncio.CancelledError())
        await self.assert_nothing_of(backend, fresh, other_run)

    async def test_a_round_whose_claim_was_replaced_stores_nothing(
        self, backend: StorageBackend
    ) -> None:
        """The run lost its lock (a flushed lock store, a dead session) and another run
        claimed the thread: the first run's round is refused whole."""
        ref = new_ref()
        first = await store_round(backend, ref, Turn.make(0))
        turn, run_id = Turn.make(1), str(uuid.uuid4())
        async with backend.lock.hold(
            ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id
        ) as claim:
            with backend.round(ref.key, claim) as work:
                await stage(backend, ref, turn)
                await backend.fences.claim(ref.key, ref.tenant_id, ref.user_id, "another-run")
                with pytest.raises(ClaimLost):
                    await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
        assert await head_of(backend, ref) == first.head
        assert await backend.runs.get(ref.key, run_id) is None
        assert await transcript_of(backend, ref) == expected(first.turn)

    async def test_a_round_whose_claim_was_revoked_stores_nothing(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        turn, run_id = Turn.make(0), str(uuid.uuid4())
        async with backend.lock.hold(
            ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id
        ) as claim:
            with backend.round(ref.key, claim) as work:
                await stage(backend, ref, turn)
                assert await backend.fences.revoke_user(ref.tenant_id, ref.user_id) == [ref.key]
                with pytest.raises(ClaimLost):
                    await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
        await self.assert_nothing_of(backend, ref, run_id)

    async def test_a_round_the_store_refuses_stores_nothing(self, backend: StorageBackend) -> None:
        """A store that fails part-way (here: the run record's key is taken, as by a run that
        stored the same ``run_id`` meanwhile) leaves nothing of the round: no checkpoint of
        it, the earlier record untouched, no archive row."""
        ref = new_ref()
        first = await store_round(backend, ref, Turn.make(0))
        turn, run_id = Turn.make(1), first.record.run_id
        async with backend.lock.hold(
            ref.key, "retry", tenant_id=ref.tenant_id, user_id=ref.user_id
        ) as claim:
            with backend.round(ref.key, claim) as work:
                await stage(backend, ref, turn)
                with pytest.raises(Exception):  # noqa: B017, PT011 (the profile's own error)
                    await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
        assert await head_of(backend, ref) == first.head
        assert await backend.runs.get(ref.key, run_id) == first.record
        assert await backend.runs.by_human_message(ref.key, str(turn.human.id)) is None
        assert await transcript_of(backend, ref) == expected(first.turn)
        assert await backend.transcript.seed(ref.key) is None
        nxt = await store_round(backend, ref, Turn.make(2))  # the thread goes on
        assert await transcript_of(backend, ref) == expected(first.turn, nxt.turn)

    async def test_a_graph_run_inside_a_round_is_stored_whole(
        self, backend: StorageBackend
    ) -> None:
        """A LangGraph graph compiled with ``backend.checkpointer``, run inside the round as
        the agent is (``durability="exit"``): its checkpoints and writes are the round."""
        ref = new_ref()
        answers = iter(Turn.make(i).ai for i in range(3))
        fail = False

        def answer(state: MessagesState) -> dict[str, Any]:
            if fail:
                raise RuntimeError("the model failed")
            return {"messages": [next(answers)]}

        builder = StateGraph(MessagesState)
        builder.add_node("answer", answer)
        builder.add_edge(START, "answer")
        builder.add_edge("answer", END)
        graph = builder.compile(checkpointer=backend.checkpointer)
        config: Any = thread_config(ref)

        async def run(index: int) -> tuple[RunRecord, str | None]:
            human = Turn.make(index).human
            run_id = str(uuid.uuid4())
            async with backend.lock.hold(ref.key, run_id, tenant_id=ref.tenant_id) as claim:
                with backend.round(ref.key, claim) as work:
                    await graph.ainvoke({"messages": [human]}, config, durability="exit")
                    state = await graph.aget_state(config)
                    ai = state.values["messages"][-1]
                    turn = Turn(human, ai, now())
                    head = await work.store(
                        record_of(ref, turn, run_id), round_of(ref, turn, run_id)
                    )
            return record_of(ref, turn, run_id), head

        first, head = await run(0)
        assert head is not None
        assert await head_of(backend, ref) == head
        stored = await backend.runs.get(ref.key, first.run_id)
        assert stored is not None
        assert stored.checkpoint_id == head
        _, head = await run(1)
        state = await graph.aget_state(config)
        assert [m.type for m in state.values["messages"]] == ["human", "ai"] * 2
        assert await head_of(backend, ref) == head
        fail = True
        with pytest.raises(RuntimeError, match="the model failed"):
            await run(2)
        assert await head_of(backend, ref) == head, "a failed graph run stores nothing"
        assert len(await transcript_of(backend, ref) or []) == 4

    async def test_a_round_reads_the_threads_checkpoint_from_the_store_once(
        self, backend: StorageBackend, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The seed's look at the thread (is the checkpoint behind the archive?) and the graph's
        own read are one read of the store: the thread is the round's until it is stored, so
        what the store holds for it cannot change in between. (Issue 12: on redis-mysql each
        run read and decoded the whole Redis checkpoint twice, the dearest step of a turn.)"""
        ref = new_ref()
        await store_round(backend, ref, Turn.make(0))
        reads: list[Any] = []
        read = backend.saver.aget_tuple

        async def counted(config: Any) -> Any:
            reads.append(config)
            return await read(config)

        monkeypatch.setattr(backend.saver, "aget_tuple", counted)
        builder = StateGraph(MessagesState)
        builder.add_node("answer", lambda state: {"messages": [Turn.make(1).ai]})
        builder.add_edge(START, "answer")
        builder.add_edge("answer", END)
        graph = builder.compile(checkpointer=backend.checkpointer)
        config: Any = thread_config(ref)
        async with backend.lock.hold(ref.key, "r1", tenant_id=ref.tenant_id) as claim:
            with backend.round(ref.key, claim) as work:
                assert await backend.transcript.seed(ref.key) is None
                await graph.ainvoke({"messages": [Turn.make(1).human]}, config, durability="exit")
                state = await graph.aget_state(config)
                assert [m.type for m in state.values["messages"]] == ["human", "ai"] * 2
                assert len(reads) == 1, reads
                turn = Turn(Turn.make(1).human, state.values["messages"][-1], now())
                assert await work.store(record_of(ref, turn, "r1"), round_of(ref, turn, "r1"))
        monkeypatch.undo()
        assert len(await transcript_of(backend, ref) or []) == 4

    # --- the run record belongs to the round --------------------------------------------------

    async def test_each_record_names_its_rounds_checkpoint_and_replay_finds_its_messages(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        stored = [await store_round(backend, ref, Turn.make(i)) for i in range(2)]
        for item in stored:
            record = await backend.runs.get(ref.key, item.record.run_id)
            assert record is not None
            assert record.checkpoint_id == item.head
            ids = [str(item.turn.human.id), str(item.turn.ai.id)]
            found = await backend.transcript.replay_messages(ref.key, record.checkpoint_id, ids)
            assert [found[i].content for i in ids] == [m.content for m in item.turn.messages]

    # --- cold start ---------------------------------------------------------------------------

    @pytest.fixture
    def archived(self, backend: StorageBackend) -> StorageBackend:
        if backend.transcript.keeps_history_in_checkpoints:
            pytest.skip("the checkpoints are the transcript: there is no archive to start from")
        return backend

    async def test_a_thread_without_checkpoints_starts_from_the_archive(
        self, archived: StorageBackend
    ) -> None:
        backend, ref = archived, new_ref()
        first = await store_round(backend, ref, Turn.make(0))
        summary = summary_state("asked whether dental is covered", str(first.turn.ai.id))
        second = await store_round(backend, ref, Turn.make(1), summary=summary)
        await backend.saver.adelete_thread(ref.key)  # a TTL, a flush, a restart
        assert await head_of(backend, ref) is None
        assert await transcript_of(backend, ref) == expected(first.turn, second.turn)

        seed = await backend.transcript.seed(ref.key)
        assert seed is not None
        assert [(m.id, m.type, m.content) for m in seed["messages"]] == [
            (m.id, m.type, m.content) for m in [*first.turn.messages, *second.turn.messages]
        ]
        assert seed["summary"] == summary
        ids = [str(first.turn.human.id), str(first.turn.ai.id)]
        found = await backend.transcript.replay_messages(ref.key, first.record.checkpoint_id, ids)
        assert [found[i].content for i in ids] == [m.content for m in first.turn.messages]

        third = await store_round(backend, ref, Turn.make(2))  # seeded inside the round
        assert await backend.transcript.seed(ref.key) is None
        state = await backend.saver.aget_tuple(thread_config(ref))
        assert state is not None
        assert [m.id for m in state.checkpoint["channel_values"]["messages"]] == [
            m.id for m in [*first.turn.messages, *second.turn.messages, *third.turn.messages]
        ]
        assert await transcript_of(backend, ref) == expected(first.turn, second.turn, third.turn)

    async def test_a_checkpoint_behind_the_archive_is_dropped_and_the_thread_seeded(
        self, archived: StorageBackend
    ) -> None:
        """A round archived while its checkpoints could not be written (the cache did not
        answer): the thread's checkpoint lacks the newest answer. ``seed`` notices, drops the
        checkpoint and seeds the thread from the archive."""
        backend, ref = archived, new_ref()
        first = await store_round(backend, ref, Turn.make(0))
        second = await store_round(backend, ref, Turn.make(1))
        await backend.saver.adelete_thread(ref.key)
        await stage(backend, ref, first.turn, messages=[])  # the cache as after round one
        assert await head_of(backend, ref) is not None

        seed = await backend.transcript.seed(ref.key)
        assert seed is not None, "a checkpoint behind the archive went unnoticed"
        assert [m.id for m in seed["messages"]] == [
            m.id for m in [*first.turn.messages, *second.turn.messages]
        ]
        assert await head_of(backend, ref) is None, "the stale checkpoint is dropped"

    async def test_seed_is_nothing_while_the_checkpoints_are_current(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        assert await backend.transcript.seed(ref.key) is None, "an unknown thread"
        await store_round(backend, ref, Turn.make(0))
        await store_round(backend, ref, Turn.make(1))
        assert await backend.transcript.seed(ref.key) is None

    # --- deleting a thread ------------------------------------------------------------------

    async def test_deleting_a_thread_deletes_everything_of_it(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        kept = ThreadRef(ref.tenant_id, ref.user_id, "t-kept")
        rounds = [await store_round(backend, ref, Turn.make(i)) for i in range(2)]
        await give_feedback(backend, rounds[0])
        other = await store_round(backend, kept, Turn.make(0))
        await give_feedback(backend, other)

        receipt = await backend.retention.delete_thread(ref.key)
        assert receipt == ErasureReceipt(threads=1, messages=4, memory_items=0, feedback=1)
        for item in rounds:
            await self.assert_nothing_of(backend, ref, item.record.run_id)
        assert await backend.runs.feedback_count(ref.key) == 0
        assert await backend.retention.user_thread_keys(ref.tenant_id, ref.user_id) == {kept.key}
        assert await transcript_of(backend, kept) == expected(other.turn)
        assert await backend.runs.feedback_count(kept.key) == 1
        assert await backend.retention.delete_thread(ref.key) == ErasureReceipt()

    async def test_a_deleted_thread_starts_again_empty(self, backend: StorageBackend) -> None:
        ref = new_ref()
        await store_round(backend, ref, Turn.make(0))
        await backend.retention.delete_thread(ref.key)
        again = await store_round(backend, ref, Turn.make(1))
        assert await transcript_of(backend, ref) == expected(again.turn)
        assert await head_of(backend, ref) == again.head

    async def test_a_deletion_waits_for_the_run_in_flight_then_deletes_its_round(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        turn, run_id = Turn.make(0), str(uuid.uuid4())
        async with backend.lock.hold(
            ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id
        ) as claim:
            with backend.round(ref.key, claim) as work:
                await stage(backend, ref, turn)
                deletion = asyncio.create_task(backend.retention.delete_thread(ref.key))
                await asyncio.sleep(0.5)
                assert not deletion.done(), "the deletion did not wait for the run"
                await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
        receipt = await asyncio.wait_for(deletion, timeout=30)
        assert receipt == ErasureReceipt(threads=1, messages=2)
        await self.assert_nothing_of(backend, ref, run_id)

    # --- erasing a user ---------------------------------------------------------------------

    async def test_erasing_a_user_deletes_all_of_theirs_and_nothing_else(
        self, backend: StorageBackend
    ) -> None:
        user = f"u{uuid.uuid4().hex[:8]}"
        mine = [new_ref("acme", user), new_ref("acme", user)]
        elsewhere, neighbour = new_ref("globex", user), new_ref("acme")
        stored: dict[str, list[Stored]] = {}
        for index, ref in enumerate([*mine, elsewhere, neighbour]):
            stored[ref.key] = [await store_round(backend, ref, Turn.make(0))]
            if index == 0:
                stored[ref.key].append(await store_round(backend, ref, Turn.make(1)))
            await give_feedback(backend, stored[ref.key][0])
        await seed_memory(backend, mine[0], 3)
        await seed_memory(backend, elsewhere, 2)
        await seed_memory(backend, neighbour, 1)
        keys = await backend.retention.user_thread_keys("acme", user)
        assert keys == {ref.key for ref in mine}

        left = await backend.retention.remaining("acme", user, sorted(keys))
        assert left, "the verification names the stores it checks"
        assert all(count > 0 for store, count in left.items() if store != "sqlite-wal"), left
        receipt = await backend.retention.erase_user("acme", user)
        assert receipt.counts() == ErasureReceipt(threads=2, messages=6, memory_items=3, feedback=2)
        assert set(receipt.remaining) >= set(left), receipt.remaining
        assert all(count == 0 for count in receipt.remaining.values()), receipt.remaining
        for ref in mine:
            for item in stored[ref.key]:
                await self.assert_nothing_of(backend, ref, item.record.run_id)
        assert await memory_items(backend, "acme", user) == 0
        assert await backend.runs.user_feedback("acme", user) == []
        assert await backend.retention.user_thread_keys("acme", user) == set()
        for ref, items in ((elsewhere, 2), (neighbour, 1)):
            assert await transcript_of(backend, ref) == expected(stored[ref.key][0].turn)
            assert await memory_items(backend, ref.tenant_id, ref.user_id) == items
            assert await backend.runs.feedback_count(ref.key) == 1
        assert (await backend.retention.erase_user("acme", user)).counts() == ErasureReceipt()

    async def test_erasure_revokes_a_run_in_flight_which_then_stores_nothing(
        self, backend: StorageBackend
    ) -> None:
        """The user's claims are revoked first: a run in flight on a thread nothing names yet
        is refused when it stores, and its thread deleted once the run let go of it."""
        user = f"u{uuid.uuid4().hex[:8]}"
        stored_ref, flying = new_ref("acme", user), new_ref("acme", user)
        await store_round(backend, stored_ref, Turn.make(0))
        turn, run_id = Turn.make(1), str(uuid.uuid4())
        async with backend.lock.hold(flying.key, run_id, tenant_id="acme", user_id=user) as claim:
            with backend.round(flying.key, claim) as work:
                await stage(backend, flying, turn)
                erasure = asyncio.create_task(backend.retention.erase_user("acme", user))

                async def revoked() -> bool:
                    return not await backend.fences.holds(flying.key, claim)

                await until(revoked)
                assert not erasure.done(), "the erasure did not wait for the run"
                with pytest.raises(ClaimLost):
                    await work.store(
                        record_of(flying, turn, run_id), round_of(flying, turn, run_id)
                    )
        receipt = await asyncio.wait_for(erasure, timeout=30)
        assert receipt.counts() == ErasureReceipt(threads=1, messages=2)
        await self.assert_nothing_of(backend, flying, run_id)
        assert await transcript_of(backend, stored_ref) is None
        assert await backend.retention.user_thread_keys("acme", user) == set()
        again = await store_round(backend, flying, Turn.make(2))  # a new run after erasure
        assert await transcript_of(backend, flying) == expected(again.turn)

    async def test_a_run_starting_during_its_users_erasure_stores_nothing(
        self, backend: StorageBackend, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A run that takes a thread after the erasure revoked the user's claims — here,
        while the erasure looks for the user's threads — is fenced: it stores nothing, and
        the receipt leaves no thread of it behind (issue 26: its thread stayed readable with
        its run record deleted). A run after the receipt is stored whole."""
        user = f"u{uuid.uuid4().hex[:8]}"
        before, during = new_ref("acme", user), new_ref("acme", user)
        await store_round(backend, before, Turn.make(0))
        retention = backend.retention
        find = retention.user_thread_keys
        outcome: list[str] = []

        async def a_run_meanwhile(tenant_id: str, user_id: str) -> set[str]:
            if outcome:  # the erasure's verification looks again
                return await find(tenant_id, user_id)
            try:
                await store_round(backend, during, Turn.make(1))
                outcome.append("stored")
            except ClaimLost:
                outcome.append("fenced")
            return await find(tenant_id, user_id)

        monkeypatch.setattr(retention, "user_thread_keys", a_run_meanwhile)
        await retention.erase_user("acme", user)
        monkeypatch.undo()
        assert outcome == ["fenced"]
        for ref in (before, during):
            assert await transcript_of(backend, ref) is None
            assert (await backend.storage_usage(ref.key)).total == 0
        records = await backend.runs.since(now() - DAY, tenant_id="acme", limit=10_000)
        assert [r for r in records if r.user_id == user] == []
        after = await store_round(backend, during, Turn.make(2))
        assert await transcript_of(backend, during) == expected(after.turn)
        assert await backend.runs.get(during.key, after.record.run_id) is not None

    async def test_the_memory_of_users_idle_past_the_window_is_swept(
        self, backend: StorageBackend
    ) -> None:
        """``THREADKEEPER_RETENTION_MEMORY``: the memory of a user with no memory written and
        no run since the cutoff is deleted; a user who ran since keeps theirs (issue 26)."""
        from threadkeeper.domain.retention import sweep_memory

        idle, active = new_ref(), new_ref()
        await seed_memory(backend, idle, 3)
        await seed_memory(backend, active, 2)
        window = timedelta(hours=1)
        later = now() + 2 * window  # every item written now is idle by then
        await store_round(backend, active, Turn.make(0, later))  # a run since that cutoff
        assert await backend.retention.idle_memory(later - window, limit=10) == [
            (idle.tenant_id, idle.user_id)
        ]
        report = await sweep_memory(backend.retention, now=later, older_than=window, batch=1)
        assert (report.users, report.memory_items) == (1, 3)
        assert await memory_items(backend, idle.tenant_id, idle.user_id) == 0
        assert await memory_items(backend, active.tenant_id, active.user_id) == 2
        assert await backend.retention.idle_memory(now() - window, limit=10) == []

    async def test_resetting_memory_forgets_it_in_the_store_and_the_run_records(
        self, backend: StorageBackend
    ) -> None:
        ref, other = new_ref(), new_ref()
        prompt = f"You answer.\n\n{MEMORY_OPEN}\nprofile.household: married\n{MEMORY_CLOSE}"
        stored = await store_round(backend, ref, Turn.make(0), system_prompt=prompt)
        theirs = await store_round(backend, other, Turn.make(0), system_prompt=prompt)
        await seed_memory(backend, ref, 3)
        await seed_memory(backend, other, 2)

        assert await backend.retention.reset_memory(ref.tenant_id, ref.user_id) == 3
        assert await memory_items(backend, ref.tenant_id, ref.user_id) == 0
        record = await backend.runs.get(ref.key, stored.record.run_id)
        assert record is not None
        assert "married" not in record.system_prompt
        assert FORGOTTEN in record.system_prompt
        assert await transcript_of(backend, ref) == expected(stored.turn), "the thread stays"
        assert await memory_items(backend, other.tenant_id, other.user_id) == 2
        assert await backend.runs.get(other.key, theirs.record.run_id) == theirs.record

    # --- retention --------------------------------------------------------------------------

    async def test_idle_threads_by_their_newest_round_oldest_first(
        self, backend: StorageBackend
    ) -> None:
        start = now()
        old, older, fresh = new_ref(), new_ref(), new_ref()
        await store_round(backend, older, Turn.make(0, start - 300 * DAY))
        await store_round(backend, older, Turn.make(1, start - 200 * DAY))
        await store_round(backend, old, Turn.make(0, start - 120 * DAY))
        await store_round(backend, fresh, Turn.make(0, start - 300 * DAY))
        await store_round(backend, fresh, Turn.make(1, start - DAY))
        cutoff = start - 90 * DAY
        assert await backend.retention.idle_threads(cutoff, limit=10) == [older.key, old.key]
        assert await backend.retention.idle_threads(cutoff, limit=1) == [older.key]
        assert await backend.retention.idle_threads(start - 400 * DAY, limit=10) == []

    async def test_would_delete_counts_what_delete_threads_deletes(
        self, backend: StorageBackend
    ) -> None:
        start = now()
        old, older, fresh = new_ref(), new_ref(), new_ref()
        first = await store_round(backend, older, Turn.make(0, start - 300 * DAY))
        await store_round(backend, older, Turn.make(1, start - 200 * DAY))
        await give_feedback(backend, first)
        await store_round(backend, old, Turn.make(0, start - 120 * DAY))
        await store_round(backend, fresh, Turn.make(0, start - DAY))
        listed = await backend.retention.idle_threads(start - 90 * DAY, limit=10)

        counted = await backend.retention.would_delete(listed)
        assert counted == ErasureReceipt(threads=2, messages=6, memory_items=0, feedback=1)
        assert await transcript_of(backend, older) is not None, "would_delete deletes nothing"
        deleted = await backend.retention.delete_threads(listed, idle_before=start - 90 * DAY)
        assert deleted == counted
        assert await transcript_of(backend, older) is None
        assert await transcript_of(backend, old) is None
        assert await transcript_of(backend, fresh) is not None

    async def test_a_thread_active_again_since_it_was_listed_is_kept(
        self, backend: StorageBackend
    ) -> None:
        start = now()
        idle, revived = new_ref(), new_ref()
        await store_round(backend, idle, Turn.make(0, start - 120 * DAY))
        old = await store_round(backend, revived, Turn.make(0, start - 120 * DAY))
        cutoff = start - 90 * DAY
        listed = await backend.retention.idle_threads(cutoff, limit=10)
        assert set(listed) == {idle.key, revived.key}
        new = await store_round(backend, revived, Turn.make(1, start))  # a run meanwhile
        receipt = await backend.retention.delete_threads(listed, idle_before=cutoff)
        assert receipt == ErasureReceipt(threads=1, messages=2)
        assert await transcript_of(backend, idle) is None
        assert await transcript_of(backend, revived) == expected(old.turn, new.turn)

    async def test_a_sweep_deletes_the_idle_threads_in_batches(
        self, backend: StorageBackend
    ) -> None:
        start = now()
        idle = [new_ref() for _ in range(3)]
        for age, ref in enumerate(idle):
            await store_round(backend, ref, Turn.make(0, start - (100 + age) * DAY))
        active = new_ref()
        await store_round(backend, active, Turn.make(0, start - DAY))
        report = await sweep(backend.retention, now=start, older_than=90 * DAY, batch=2)
        assert report.deleted == ErasureReceipt(threads=3, messages=6)
        assert report.batches == 2
        assert all([await transcript_of(backend, ref) is None for ref in idle])
        assert await transcript_of(backend, active) is not None

    # --- storage per thread -------------------------------------------------------------

    async def test_storage_usage_counts_every_kind_kept_and_grows_with_rounds(
        self, backend: StorageBackend
    ) -> None:
        ref, other = new_ref(), new_ref()
        kept = backend.storage_kinds
        assert kept <= set(KINDS)
        assert (await backend.storage_usage(ref.key)).total == 0, "an unknown thread"

        async def rounds(start: int, count: int) -> None:
            for index in range(start, start + count):
                turn = Turn.make(index)
                stored = await store_round(backend, ref, turn, tools=tool_calls(turn))
                await give_feedback(backend, stored)

        await rounds(0, 2)
        early = (await backend.storage_usage(ref.key)).by_kind()
        for kind in KINDS:
            if kind in kept:
                assert early[kind] > 0, (kind, early)
            else:
                assert early[kind] == 0, (kind, early)
        await rounds(2, 3)
        later = await backend.storage_usage(ref.key)
        for kind in kept:
            assert later.by_kind()[kind] > early[kind], (kind, early, later)
        assert later.total == sum(later.by_kind().values())
        assert (await backend.storage_usage(other.key)).total == 0, "another thread's"

    async def test_storage_usage_is_nothing_once_the_thread_is_deleted_or_erased(
        self, backend: StorageBackend
    ) -> None:
        ref, erased, kept = new_ref(), new_ref(), new_ref()
        for thread in (ref, erased, kept):
            turn = Turn.make(0)
            await give_feedback(
                backend, await store_round(backend, thread, turn, tools=tool_calls(turn))
            )
        before = await backend.storage_usage(kept.key)
        assert before.total > 0
        await backend.retention.delete_thread(ref.key)
        assert (await backend.storage_usage(ref.key)).total == 0
        await backend.retention.erase_user(erased.tenant_id, erased.user_id)
        assert (await backend.storage_usage(erased.key)).total == 0
        assert await backend.storage_usage(kept.key) == before, "another thread is untouched"
        again = await store_round(backend, ref, Turn.make(1))  # a new thread under the key
        assert (await backend.storage_usage(ref.key)).total > 0
        assert again.head is not None

    async def test_a_stored_round_says_the_bytes_it_wrote_by_kind(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        turn = Turn.make(0)
        first = await store_round(backend, ref, turn, tools=tool_calls(turn))
        written = dict(first.written)
        wrote = backend.storage_kinds - {"feedback"}  # feedback is given after a round
        assert set(written) <= wrote, written
        for kind in wrote:
            assert written.get(kind, 0) > 0, (kind, written)
        longer = Turn.make(1)
        second = await store_round(backend, ref, longer)
        assert second.written.get("run_records", 0) > 0
        assert second.written.get("checkpoints", 0) > 0

    async def test_a_round_left_unstored_says_it_wrote_nothing(
        self, backend: StorageBackend
    ) -> None:
        ref = new_ref()
        turn, run_id = Turn.make(0), str(uuid.uuid4())
        async with backend.lock.hold(
            ref.key, run_id, tenant_id=ref.tenant_id, user_id=ref.user_id
        ) as claim:
            with backend.round(ref.key, claim) as work:
                await stage(backend, ref, turn)
                await backend.fences.claim(ref.key, ref.tenant_id, ref.user_id, "another-run")
                with pytest.raises(ClaimLost):
                    await work.store(record_of(ref, turn, run_id), round_of(ref, turn, run_id))
                assert dict(work.written) == {}

    # --- health -----------------------------------------------------------------------------

    async def test_health_answers_ok_for_every_server(self, backend: StorageBackend) -> None:
        health = await asyncio.wait_for(backend.health(), timeout=5)
        assert health
        assert set(health.values()) == {"ok"}, health


__all__ = [
    "BackendConformance",
    "Stored",
    "Turn",
    "head_of",
    "new_ref",
    "record_of",
    "round_of",
    "stage",
    "store_round",
    "tool_calls",
    "transcript_of",
]
