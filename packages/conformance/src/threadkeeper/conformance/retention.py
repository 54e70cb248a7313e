"""``Retention`` conformance: idle threads found by their newest activity, deleted in batches
with counts; a user's erasure removes all of theirs and nothing of anyone else's.

The suite seeds through a ``RetentionHarness``; ``CheckpointRetentionHarness`` is one for any
opened ``StorageBackend`` whose transcript is its checkpoints (it writes checkpoints, run records,
feedback and memory items straight into the backend's stores).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from threadkeeper.conformance.run_records import record
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.retention import ErasureReceipt, Retention, sweep
from threadkeeper.domain.runs import Feedback
from threadkeeper.domain.threads import ThreadRef

if TYPE_CHECKING:
    from threadkeeper.adapters.profile import StorageBackend

NOW = datetime(2026, 6, 1, tzinfo=UTC)


class RetentionHarness(Protocol):
    """What a suite needs besides the port: a way to create data the port then deletes."""

    retention: Retention

    async def seed_thread(
        self, ref: ThreadRef, *, last_activity: datetime, messages: int, feedback: int = 0
    ) -> None:
        """A thread whose newest activity is ``last_activity`` with ``messages`` transcript
        messages (human + AI) and ``feedback`` feedback records."""

    async def seed_memory(self, tenant_id: str, user_id: str, items: int) -> None: ...

    async def thread_exists(self, key: str) -> bool: ...


class CheckpointRetentionHarness:
    """Seeds real checkpoints, run records, feedback and store items into a backend whose
    transcript is its checkpoints (embedded, postgres, the in-memory backend)."""

    def __init__(self, backend: StorageBackend) -> None:
        self.backend = backend
        self.retention: Any = backend.retention

    async def seed_thread(
        self, ref: ThreadRef, *, last_activity: datetime, messages: int, feedback: int = 0
    ) -> None:
        history: list[BaseMessage] = []
        for index in range(messages):
            kind = HumanMessage if index % 2 == 0 else AIMessage
            history.append(kind(f"message {index}", id=f"{ref.key}-{index}"))
        checkpoint = empty_checkpoint()
        checkpoint["ts"] = last_activity.isoformat()  # the postgres profile's activity time
        checkpoint["channel_values"] = {"messages": history}
        checkpoint["channel_versions"] = {"messages": 1}
        config: Any = {"configurable": {"thread_id": ref.key, "checkpoint_ns": ""}}
        metadata: Any = {"tenant_id": ref.tenant_id, "user_id": ref.user_id, "step": 1}
        await self.backend.saver.aput(config, checkpoint, metadata, {"messages": 1})
        run = msgspec.structs.replace(
            record(
                ref.key,
                tenant=ref.tenant_id,
                user=ref.user_id,
                summary=f"Summary of the earlier conversation:\n- User: {ref.key}",
            ),
            created_at=last_activity,
        )
        await self.backend.runs.save(run)
        for _ in range(feedback):
            extra = record(ref.key, tenant=ref.tenant_id, user=ref.user_id)
            await self.backend.runs.save(extra)
            await self.backend.runs.add_feedback(
                Feedback(extra.run_id, ref.key, ref.tenant_id, ref.user_id, 1, None, last_activity)
            )

    async def seed_memory(self, tenant_id: str, user_id: str, items: int) -> None:
        for index in range(items):
            kind = MemoryKind.FACTS if index % 2 else MemoryKind.PROFILE
            await self.backend.store.aput(
                memory_namespace(tenant_id, user_id, kind),
                f"key-{index}-{uuid.uuid4().hex[:4]}",
                {"value": "v"},
            )

    async def thread_exists(self, key: str) -> bool:
        found = await self.backend.saver.aget_tuple({"configurable": {"thread_id": key}})
        return found is not None

    async def kept_texts(self, key: str) -> int:
        return await self.backend.runs.kept_texts(key)


async def kept_texts(harness: RetentionHarness, key: str) -> int:
    """The texts the thread's run records keep apart (summaries, prompts), where the harness
    can count them (``kept_texts``), else 0."""
    count = getattr(harness, "kept_texts", None)
    return 0 if count is None else int(await count(key))


def ref(tenant: str = "acme", user: str | None = None) -> ThreadRef:
    return ThreadRef(tenant, user or f"u{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}")


def assert_verified(receipt: ErasureReceipt) -> None:
    """An erasure's receipt names the stores its verification checked, each with 0 left."""
    assert receipt.remaining, "an erasure's receipt ends with its verification"
    assert all(count == 0 for count in receipt.remaining.values()), receipt.remaining


class RetentionConformance:
    """Subclass and provide ``harness`` (a fixture returning a ``RetentionHarness``) on an
    otherwise empty store."""

    async def test_idle_threads_oldest_first_and_limited(self, harness: RetentionHarness) -> None:
        old = [ref() for _ in range(3)]
        fresh = ref()
        for age, thread in zip((200, 120, 95), old, strict=True):
            await harness.seed_thread(thread, last_activity=NOW - timedelta(days=age), messages=2)
        await harness.seed_thread(fresh, last_activity=NOW - timedelta(days=5), messages=2)
        cutoff = NOW - timedelta(days=90)
        assert await harness.retention.idle_threads(cutoff, limit=10) == [t.key for t in old]
        assert await harness.retention.idle_threads(cutoff, limit=2) == [t.key for t in old[:2]]

    async def test_delete_threads_counts_what_it_removed(self, harness: RetentionHarness) -> None:
        doomed, kept = ref(), ref()
        await harness.seed_thread(doomed, last_activity=NOW, messages=6, feedback=2)
        await harness.seed_thread(kept, last_activity=NOW, messages=4)
        texts = await kept_texts(harness, kept.key)
        receipt = await harness.retention.delete_threads([doomed.key, "acme:nobody:none"])
        assert receipt == ErasureReceipt(threads=1, messages=6, memory_items=0, feedback=2)
        assert not await harness.thread_exists(doomed.key)
        assert await kept_texts(harness, doomed.key) == 0, "no summary or prompt left behind"
        assert await kept_texts(harness, kept.key) == texts
        assert await harness.thread_exists(kept.key)
        again = await harness.retention.delete_threads([doomed.key])
        assert again == ErasureReceipt()

    async def test_erase_user_removes_everything_of_theirs_only(
        self, harness: RetentionHarness
    ) -> None:
        user = f"u{uuid.uuid4().hex[:8]}"
        mine = [ref("acme", user), ref("acme", user)]
        elsewhere = ref("globex", user)
        neighbour = ref("acme")
        for thread in [*mine, elsewhere, neighbour]:
            await harness.seed_thread(thread, last_activity=NOW, messages=4, feedback=1)
        await harness.seed_memory("acme", user, 3)
        await harness.seed_memory("globex", user, 2)
        neighbours = await kept_texts(harness, neighbour.key)
        receipt = await harness.retention.erase_user("acme", user)
        assert receipt.counts() == ErasureReceipt(threads=2, messages=8, memory_items=3, feedback=2)
        assert_verified(receipt)
        for thread in mine:
            assert not await harness.thread_exists(thread.key)
            assert await kept_texts(harness, thread.key) == 0, "no summary or prompt left"
        assert await kept_texts(harness, neighbour.key) == neighbours
        assert await harness.thread_exists(elsewhere.key)
        assert await harness.thread_exists(neighbour.key)
        assert (await harness.retention.erase_user("acme", user)).counts() == ErasureReceipt()
        assert (await harness.retention.erase_user("globex", user)).memory_items == 2

    async def test_sweep_deletes_idle_threads_in_batches(self, harness: RetentionHarness) -> None:
        idle = [ref() for _ in range(5)]
        active = ref()
        for age, thread in enumerate(idle):
            await harness.seed_thread(
                thread, last_activity=NOW - timedelta(days=100 + age), messages=2
            )
        await harness.seed_thread(active, last_activity=NOW - timedelta(hours=1), messages=2)

        dry = await sweep(harness.retention, now=NOW, older_than=timedelta(days=90), dry_run=True)
        assert dry.deleted.threads == 5
        assert all([await harness.thread_exists(t.key) for t in idle])

        report = await sweep(harness.retention, now=NOW, older_than=timedelta(days=90), batch=2)
        assert report.deleted == ErasureReceipt(threads=5, messages=10)
        assert report.batches == 3
        assert not any([await harness.thread_exists(t.key) for t in idle])
        assert await harness.thread_exists(active.key)

    async def test_a_thread_active_again_since_it_was_listed_is_not_swept(
        self, harness: RetentionHarness
    ) -> None:
        """Retention lists idle threads, then deletes them one by one; a run that adds a round
        in between (the deletion waits for it) makes the thread active again: it is kept."""
        revived, idle = ref(), ref()
        for thread in (revived, idle):
            await harness.seed_thread(thread, last_activity=NOW - timedelta(days=120), messages=2)
        cutoff = NOW - timedelta(days=90)
        listed = await harness.retention.idle_threads(cutoff, limit=10)
        assert set(listed) == {revived.key, idle.key}
        await harness.seed_thread(revived, last_activity=NOW, messages=2)  # a new round
        receipt = await harness.retention.delete_threads(listed, idle_before=cutoff)
        assert receipt.threads == 1
        assert await harness.thread_exists(revived.key)
        assert not await harness.thread_exists(idle.key)
