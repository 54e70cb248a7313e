"""``RunRecords`` conformance: completed runs kept once, found by id and by human message,
feedback only on known runs (counted per thread, listed per user), the user's threads, deletion
by thread and by user, forgetting what the records hold of the user's memory, and the records
since a time, page by page (``since``)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from threadkeeper.domain.runs import (
    Feedback,
    ModelCall,
    RunRecord,
    RunRecords,
    UnknownRun,
    cursor_of,
    record_pages,
)

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(
    thread_key: str | None = None,
    *,
    tenant: str = "acme",
    user: str = "u1",
    run_id: str | None = None,
    summary: str | None = None,
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
        model_calls=(ModelCall(("h1", "a1"), summary, 120, 8000, "o200k_base"),),
        checkpoint_id="cp-1",
    )


def summary_versions(count: int, *, cap: int = 8) -> list[str]:
    """Rolling-summary texts as a summarizer writes them: a heading, the first two lines
    kept, a few lines added per version and the oldest after the head dropped past ``cap``."""
    lines: list[str] = []
    out: list[str] = []
    for version in range(count):
        lines += [f"- User: question {version} 是否 بله", f"- Assistant: answer {version}"]
        if len(lines) > cap:
            lines = lines[:2] + lines[-(cap - 2) :]
        out.append("\n".join(["Summary of the earlier conversation:", *lines]))
    return out


def compact_record(key: str, *, tenant: str, user: str, version: int, summary: str) -> RunRecord:
    """A record as the service writes it: compact windows, a summary per model call, the
    response's run id, thread id and status those of the record."""
    base = record(key, tenant=tenant, user=user)
    calls = (
        ModelCall((), summary, 900, 8000, "o200k_base", window=((-2 * version, 1),)),
        ModelCall(
            (), summary, 950, 8000, "o200k_base", window=((-2 * version, 1), "call-1", "tool-1")
        ),
    )
    response = {
        "run_id": base.run_id,
        "thread_id": base.thread_id,
        "status": base.status,
        "message": {"id": f"a-{version}", "role": "ai", "content": "بله", "citations": []},
        "usage": {"input_tokens": 950, "output_tokens": 3, "source": "provider"},
    }
    return msgspec.structs.replace(
        base,
        model_calls=calls,
        response=response,
        memory_keys=(f"profile/language@{version}", "facts/product:dental@1"),
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


def at(minutes: float, *, tenant: str, user: str = "u1", key: str | None = None) -> RunRecord:
    """A record of ``tenant`` stored ``minutes`` after ``AT``."""
    return msgspec.structs.replace(
        record(key, tenant=tenant, user=user), created_at=AT + timedelta(minutes=minutes)
    )


CONCURRENT_FEEDBACK = 8
ROUNDS = 5
"""``test_concurrent_first_feedback_…``: feedbacks sent at once on a new run, for so many runs."""


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


class RunRecordsConformance:
    """Subclass and provide ``records`` (a fixture returning the adapter, empty)."""

    async def test_a_record_reads_back_equal(self, records: RunRecords) -> None:
        item = record()
        assert await records.save(item) is True
        assert await records.get(item.thread_key, item.run_id) == item
        assert await records.by_human_message(item.thread_key, item.human_message_id) == item

    async def test_records_with_many_summary_versions_read_back_equal(
        self, records: RunRecords
    ) -> None:
        """A store may keep texts apart (once per thread, a version as a delta of an earlier
        one): every version reads back whole, in any order, and a repeated one too."""
        user = f"u{uuid.uuid4().hex[:6]}"
        key = f"acme:{user}:t-{uuid.uuid4().hex[:8]}"
        versions = summary_versions(40)
        items = [
            compact_record(key, tenant="acme", user=user, version=i, summary=text)
            for i, text in enumerate([*versions, versions[3], ""])
        ]
        for item in items:
            assert await records.save(item) is True
        for item in reversed(items):
            assert await records.get(key, item.run_id) == item
            assert await records.by_human_message(key, item.human_message_id) == item

    async def test_deleting_a_thread_or_erasing_a_user_leaves_no_texts(
        self, records: RunRecords
    ) -> None:
        user = f"u{uuid.uuid4().hex[:6]}"
        mine = [f"acme:{user}:t-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        neighbour = f"acme:someone:t-{uuid.uuid4().hex[:8]}"
        for key in (*mine, neighbour):
            owner = "someone" if key == neighbour else user
            for i, text in enumerate(summary_versions(5)):
                await records.save(
                    compact_record(key, tenant="acme", user=owner, version=i, summary=text)
                )
        kept = await records.kept_texts(neighbour)
        assert await records.delete_thread(mine[0]) == (5, 0)
        assert await records.kept_texts(mine[0]) == 0
        assert await records.erase_user("acme", user) == (5, 0)
        assert await records.kept_texts(mine[1]) == 0
        assert await records.kept_texts(neighbour) == kept
        again = compact_record(
            mine[0], tenant="acme", user=user, version=1, summary=summary_versions(2)[1]
        )
        await records.save(again)  # a text deleted with its thread is stored again
        assert await records.get(mine[0], again.run_id) == again

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

    async def test_concurrent_first_feedback_on_a_run_all_succeed_as_one_row(
        self, records: RunRecords
    ) -> None:
        """Several feedbacks on a run with none yet, at once (a double-clicked button, retries):
        every one succeeds and the run keeps exactly one, one of those sent (the last writer's).
        A store that updates and then inserts when nothing was updated lets two of them insert
        (a duplicate key: a 500); one upsert statement does not."""
        failures: list[BaseException] = []
        for _ in range(ROUNDS):
            item = record()
            await records.save(item)
            sent = [
                msgspec.structs.replace(
                    feedback(item, 1 if i % 2 else -1, at=AT + timedelta(seconds=i)),
                    comment=f"note {i}",
                )
                for i in range(CONCURRENT_FEEDBACK)
            ]
            results = await asyncio.gather(
                *(records.add_feedback(note) for note in sent), return_exceptions=True
            )
            failures += [r for r in results if isinstance(r, BaseException)]
            assert await records.feedback_count(item.thread_key) == 1
            kept = await records.feedback_of([(item.thread_key, item.run_id)])
            assert kept[(item.thread_key, item.run_id)] in sent
        assert not failures, (
            f"{len(failures)} of {ROUNDS * CONCURRENT_FEEDBACK} failed: {failures[0]!r}"
        )

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
        texts = await records.kept_texts(escalated.thread_key)
        assert await records.forget_memory("acme", user) == 1
        # the prompt that held the memory is not kept apart either (replaced, not added to)
        assert await records.kept_texts(escalated.thread_key) == texts
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

    async def test_since_lists_the_tenants_records_from_the_cutoff_on_oldest_first(
        self, records: RunRecords
    ) -> None:
        """The cutoff is inclusive; records read back equal; another tenant's are not listed
        unless every tenant's are asked for."""
        mine, theirs = tenant(), tenant()
        before = at(-1, tenant=mine)
        listed = [at(0, tenant=mine), at(2.5, tenant=mine), at(1, tenant=mine, user="u2")]
        other = at(0.5, tenant=theirs)
        for item in (listed[1], before, other, listed[0], listed[2]):
            assert await records.save(item) is True
        found = await records.since(AT, tenant_id=mine)
        assert found == sorted(listed, key=lambda r: r.created_at)
        everyone = await records.since(AT, limit=1000)
        assert [r for r in everyone if r.tenant_id in (mine, theirs)] == sorted(
            [*listed, other], key=lambda r: r.created_at
        )
        times = [r.created_at for r in everyone]
        assert times == sorted(times)
        assert await records.since(AT + timedelta(minutes=2.5), tenant_id=mine) == [listed[1]]
        later = AT + timedelta(minutes=2.5, microseconds=1)
        assert await records.since(later, tenant_id=mine) == []

    async def test_since_compares_instants_whatever_the_cutoffs_zone(
        self, records: RunRecords
    ) -> None:
        mine = tenant()
        item = at(0, tenant=mine)
        await records.save(item)
        tehran = timezone(timedelta(hours=3, minutes=30))
        assert await records.since(AT.astimezone(tehran), tenant_id=mine) == [item]
        just_after = (AT + timedelta(microseconds=1)).astimezone(tehran)
        assert await records.since(just_after, tenant_id=mine) == []

    async def test_since_of_an_unknown_tenant_or_a_future_time_is_empty(
        self, records: RunRecords
    ) -> None:
        mine = tenant()
        await records.save(at(0, tenant=mine))
        assert await records.since(AT, tenant_id=tenant()) == []
        assert await records.since(datetime.now(UTC) + timedelta(days=1)) == []

    async def test_since_pages_by_keyset_each_record_once_in_one_order(
        self, records: RunRecords
    ) -> None:
        """Pages after the previous page's last record (exclusive), records with the same time
        in several threads and in one thread included: together they are the one-page list."""
        mine = tenant()
        shared = f"{mine}:u1:t-shared"
        items = [at(0, tenant=mine) for _ in range(3)]  # one time, three threads
        items += [at(0, tenant=mine, key=shared) for _ in range(2)]  # one time, one thread
        items += [at(1, tenant=mine), at(2, tenant=mine)]
        for item in reversed(items):
            await records.save(item)
        whole = await records.since(AT, tenant_id=mine, limit=100)
        assert sorted(r.run_id for r in whole) == sorted(r.run_id for r in items)
        pages: list[list[RunRecord]] = []
        after = None
        while True:
            page = await records.since(AT, tenant_id=mine, after=after, limit=3)
            pages.append(page)
            if len(page) < 3:
                break
            after = cursor_of(page[-1])
        assert [len(p) for p in pages] == [3, 3, 1]
        assert [r for p in pages for r in p] == whole
        pages = [p async for p in record_pages(records, AT, tenant_id=mine, page=2)]
        assert [len(p) for p in pages] == [2, 2, 2, 1]
        assert [r for p in pages for r in p] == whole
        assert [len(p) async for p in record_pages(records, AT, tenant_id=mine, page=7)] == [7]
        assert [p async for p in record_pages(records, AT, tenant_id=tenant())] == []

    async def test_feedback_of_a_page_of_runs_by_run(self, records: RunRecords) -> None:
        """Runs with no feedback and runs not stored are left out; a replaced one is the
        newest."""
        mine = tenant()
        rated, unrated, same_id = at(0, tenant=mine), at(1, tenant=mine), at(2, tenant=mine)
        same_id = msgspec.structs.replace(same_id, run_id=rated.run_id)  # another thread
        for item in (rated, unrated, same_id):
            await records.save(item)
        await records.add_feedback(feedback(rated, 1))
        newest = feedback(rated, -1, at=AT + timedelta(minutes=5))
        await records.add_feedback(newest)
        runs = [(r.thread_key, r.run_id) for r in (rated, unrated, same_id)]
        assert await records.feedback_of([*runs, (f"{mine}:u1:none", "nope")]) == {runs[0]: newest}
        assert await records.feedback_of([]) == {}

    async def test_since_never_lists_deleted_threads_or_erased_users(
        self, records: RunRecords
    ) -> None:
        mine = tenant()
        kept, deleted = at(0, tenant=mine), at(1, tenant=mine)
        erased = msgspec.structs.replace(
            at(2, tenant=mine, user="gone"), thread_key=f"{mine}:gone:t-1", thread_id="t-1"
        )
        for item in (kept, deleted, erased):
            await records.save(item)
            await records.add_feedback(feedback(item))
        await records.delete_thread(deleted.thread_key)
        await records.erase_user(mine, "gone")
        assert await records.since(AT, tenant_id=mine) == [kept]
