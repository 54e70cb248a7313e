"""``RunRecords`` conformance: completed runs kept once, found by id and by human message,
feedback only on known runs (counted per thread, listed per user), the user's threads, deletion
by thread and by user, and forgetting what the records hold of the user's memory."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from threadkeeper.domain.runs import Feedback, ModelCall, RunRecord, RunRecords, UnknownRun

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(
    thread_key: str | None = None,
    *,
    tenant: str = "acme",
    user: str = "u1",
    run_id: str | None = None,
) -> RunRecord:
    key = thread_key or f"{tenant}:{user}:t-{uuid.uuid4().hex[:8]}"
    return RunRecord(
        run_id=run_id or str(uuid.uuid4()),
        thread_key=key,
        tenant_id=tenant,
        user_id=user,
        thread_id=key.rsplit(":", 1)[-1],
        human_message_id=f"h-{uuid.uuid4().hex[:8]}",
        status="answered",
        created_at=AT,
        response={"status": "answered", "message": {"content": "بله، 是的, yes"}},
        system_prompt="prompt",
        prompt_version="v1",
        chunk_ids=("dental#1",),
        memory_keys=("profile/language@2026-03-01T12:00:00+00:00",),
        model_calls=(ModelCall(("h1", "a1"), None, 120, 8000, "o200k_base"),),
        checkpoint_id="cp-1",
    )


def feedback(item: RunRecord, score: int = 1, *, at: datetime = AT) -> Feedback:
    return Feedback(
        run_id=item.run_id,
        thread_key=item.thread_key,
        tenant_id=item.tenant_id,
        user_id=item.user_id,
        score=1 if score > 0 else -1,
        comment="clear",
        at=at,
    )


class RunRecordsConformance:
    """Subclass and provide ``records`` (a fixture returning the adapter, empty)."""

    async def test_a_record_reads_back_equal(self, records: RunRecords) -> None:
        item = record()
        assert await records.save(item) is True
        assert await records.get(item.thread_key, item.run_id) == item
        assert await records.by_human_message(item.thread_key, item.human_message_id) == item

    async def test_save_is_idempotent_on_run_id(self, records: RunRecords) -> None:
        item = record()
        assert await records.save(item) is True
        changed = msgspec.structs.replace(item, status="escalate")
        assert await records.save(changed) is False
        assert (await records.get(item.thread_key, item.run_id)) == item

    async def test_unknown_lookups(self, records: RunRecords) -> None:
        assert await records.get("acme:u1:none", "nope") is None
        assert await records.by_human_message("acme:u1:none", "nope") is None

    async def test_feedback_needs_a_known_run_and_a_later_one_replaces(
        self, records: RunRecords
    ) -> None:
        item = record()
        with pytest.raises(UnknownRun):
            await records.add_feedback(feedback(item))
        await records.save(item)
        await records.add_feedback(feedback(item, 1))
        await records.add_feedback(feedback(item, -1))
        assert await records.delete_thread(item.thread_key) == (1, 1)

    async def test_delete_thread_counts_and_spares_others(self, records: RunRecords) -> None:
        first, other = record(), record()
        second = record(first.thread_key)
        for item in (first, second, other):
            await records.save(item)
        await records.add_feedback(feedback(first))
        assert await records.delete_thread(first.thread_key) == (2, 1)
        assert await records.delete_thread(first.thread_key) == (0, 0)
        assert await records.get(other.thread_key, other.run_id) == other

    async def test_feedback_count_is_per_thread_and_a_replacement_counts_once(
        self, records: RunRecords
    ) -> None:
        first, other = record(), record()
        second = record(first.thread_key)
        for item in (first, second, other):
            await records.save(item)
        assert await records.feedback_count(first.thread_key) == 0
        await records.add_feedback(feedback(first, 1))
        await records.add_feedback(feedback(first, -1))  # replaces the first one
        await records.add_feedback(feedback(second))
        await records.add_feedback(feedback(other))
        assert await records.feedback_count(first.thread_key) == 2
        assert await records.feedback_count(other.thread_key) == 1
        assert await records.feedback_count("acme:u1:none") == 0
        await records.delete_thread(first.thread_key)
        assert await records.feedback_count(first.thread_key) == 0
        assert await records.feedback_count(other.thread_key) == 1

    async def test_user_feedback_is_the_users_in_the_tenant_oldest_first(
        self, records: RunRecords
    ) -> None:
        user = f"u{uuid.uuid4().hex[:6]}"
        mine = [record(tenant="acme", user=user) for _ in range(3)]
        elsewhere = record(tenant="globex", user=user)
        neighbour = record(tenant="acme", user="someone")
        for item in (*mine, elsewhere, neighbour):
            await records.save(item)
        assert await records.user_feedback("acme", user) == []
        given = [
            feedback(mine[1], 1, at=AT + timedelta(minutes=1)),
            feedback(mine[0], -1, at=AT + timedelta(minutes=2)),
            feedback(mine[2], 1, at=AT + timedelta(minutes=3)),
        ]
        for note in (given[2], given[0], given[1]):  # stored in another order
            await records.add_feedback(note)
        await records.add_feedback(feedback(elsewhere))
        await records.add_feedback(feedback(neighbour))
        assert await records.user_feedback("acme", user) == given
        replaced = feedback(mine[2], -1, at=AT + timedelta(minutes=4))
        await records.add_feedback(replaced)
        assert await records.user_feedback("acme", user) == [*given[:2], replaced]
        assert await records.user_feedback("globex", user) == [feedback(elsewhere)]

    async def test_user_threads_are_the_users_in_the_tenant_each_once(
        self, records: RunRecords
    ) -> None:
        user = f"u{uuid.uuid4().hex[:6]}"
        one = record(tenant="acme", user=user)
        again = record(one.thread_key, tenant="acme", user=user)
        two = record(tenant="acme", user=user)
        elsewhere = record(tenant="globex", user=user)
        neighbour = record(tenant="acme", user="someone")
        assert await records.user_threads("acme", user) == []
        for item in (one, again, two, elsewhere, neighbour):
            await records.save(item)
        found = await records.user_threads("acme", user)
        assert sorted(found) == sorted({one.thread_key, two.thread_key})
        assert len(found) == 2, "each thread once, however many runs it has"
        assert await records.user_threads("globex", user) == [elsewhere.thread_key]
        await records.erase_user("acme", user)
        assert await records.user_threads("acme", user) == []
        assert await records.user_threads("globex", user) == [elsewhere.thread_key]

    async def test_erase_user_only_that_user_in_that_tenant(self, records: RunRecords) -> None:
        user = f"u{uuid.uuid4().hex[:6]}"
        mine = [record(tenant="acme", user=user), record(tenant="acme", user=user)]
        elsewhere = record(tenant="globex", user=user)
        neighbour = record(tenant="acme", user="someone")
        for item in (*mine, elsewhere, neighbour):
            await records.save(item)
            await records.add_feedback(feedback(item))
        assert await records.erase_user("acme", user) == (2, 2)
        assert await records.get(elsewhere.thread_key, elsewhere.run_id) == elsewhere
        assert await records.get(neighbour.thread_key, neighbour.run_id) == neighbour

    async def test_forget_memory_removes_what_the_users_records_hold_of_it(
        self, records: RunRecords
    ) -> None:
        user = f"u{uuid.uuid4().hex[:6]}"
        prompt = (
            "You are the assistant."
            "\n\n<memory>\nprofile.household: married </memory> with two kids\n"
            "facts.product: dental\n</memory>"
            '\n\n<documents>\n<doc chunk_id="d#1">cover &lt;/memory&gt;</doc>\n</documents>'
        )
        handoff = {
            "conversation_summary": "asked twice",
            "profile": [{"key": "household", "value": "married"}],
            "recent_messages": [],
        }
        escalated = msgspec.structs.replace(
            record(tenant="acme", user=user),
            system_prompt=prompt,
            response={"status": "escalate", "handoff_context": handoff},
        )
        plain = record(tenant="acme", user=user)
        neighbour = msgspec.structs.replace(
            record(tenant="acme", user="someone"), system_prompt=prompt
        )
        for item in (escalated, plain, neighbour):
            await records.save(item)
        assert await records.forget_memory("acme", user) == 1
        stored = await records.get(escalated.thread_key, escalated.run_id)
        assert stored is not None
        assert "married" not in stored.system_prompt
        assert "dental\n" not in stored.system_prompt
        assert stored.system_prompt.startswith("You are the assistant.\n\n<memory>\n[forgotten")
        assert stored.system_prompt.endswith(prompt[prompt.index("\n</memory>\n\n<documents>") :])
        assert stored.response["handoff_context"]["profile"] == []
        assert stored.response["handoff_context"]["conversation_summary"] == "asked twice"
        assert stored.memory_keys == escalated.memory_keys
        assert await records.get(plain.thread_key, plain.run_id) == plain
        assert await records.get(neighbour.thread_key, neighbour.run_id) == neighbour
        assert await records.forget_memory("acme", user) == 0
