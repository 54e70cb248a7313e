"""``TranscriptArchive`` conformance: atomic, idempotent rounds; paging; counting; deletion."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from threadkeeper.domain.errors import UnknownMessage, UnknownThread
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.transcript import (
    Citation,
    Round,
    TranscriptArchive,
    TranscriptMessage,
)

ArchiveFactory = Callable[[], TranscriptArchive]

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make_round(
    ref: ThreadRef, index: int, *, run_id: str | None = None, summary: str | None = None
) -> Round:
    at = T0 + timedelta(minutes=index)
    return Round(
        run_id=run_id or str(uuid.uuid4()),
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        thread_id=ref.thread_id,
        human=TranscriptMessage(
            f"h{index}-{uuid.uuid4()}", "human", f"پرسش {index} 问题 q{index}", at
        ),
        ai=TranscriptMessage(
            f"a{index}-{uuid.uuid4()}",
            "ai",
            f"answer {index}",
            at + timedelta(seconds=1),
            (Citation("chunk-1", "doc-1", "Dental cover"),),
        ),
        summary=summary,
    )


def new_ref(tenant: str = "acme", user: str | None = None) -> ThreadRef:
    return ThreadRef(tenant, user or f"u{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}")


class TranscriptArchiveConformance:
    """Subclass and provide ``archive`` (a fixture returning the adapter under test)."""

    async def test_a_round_reads_back_whole(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        round_ = make_round(ref, 0)
        assert await archive.append_round(round_) is True
        page = await archive.page(ref.key, limit=20)
        assert page.messages == [round_.human, round_.ai]
        assert page.next_before is None

    async def test_append_is_idempotent_on_run_id(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        round_ = make_round(ref, 0, run_id=str(uuid.uuid4()))
        assert await archive.append_round(round_) is True
        assert await archive.append_round(round_) is False
        retry = make_round(ref, 1, run_id=round_.run_id)  # same run, new message ids
        assert await archive.append_round(retry) is False
        assert len((await archive.page(ref.key, limit=100)).messages) == 2

    async def test_a_run_id_is_unique_per_thread_only(self, archive: TranscriptArchive) -> None:
        """The same run_id in another thread, user or tenant is another round (issue 9: the
        archive took it for a retry and lost the round)."""
        run_id = str(uuid.uuid4())
        first = new_ref("acme")
        same_user_other_thread = ThreadRef(first.tenant_id, first.user_id, "t-other")
        other_user = new_ref("acme")
        other_tenant = ThreadRef("globex", first.user_id, first.thread_id)
        refs = (first, same_user_other_thread, other_user, other_tenant)
        rounds = [make_round(ref, i, run_id=run_id) for i, ref in enumerate(refs)]
        for round_ in rounds:
            assert await archive.append_round(round_) is True, round_.thread_key
        for ref, round_ in zip(refs, rounds, strict=True):
            page = await archive.page(ref.key, limit=100)
            assert page.messages == [round_.human, round_.ai]

    async def test_pages_walk_back_to_the_beginning(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        rounds = [make_round(ref, i) for i in range(7)]
        for round_ in rounds:
            await archive.append_round(round_)
        expected = [m for r in rounds for m in (r.human, r.ai)]
        seen: list[TranscriptMessage] = []
        before: str | None = None
        pages = 0
        while True:
            page = await archive.page(ref.key, limit=4, before=before)
            pages += 1
            assert len(page.messages) <= 4
            seen[:0] = page.messages
            if page.next_before is None:
                break
            assert page.next_before == page.messages[0].id
            before = page.next_before
        assert seen == expected
        assert pages == 4

    async def test_unknown_thread_and_cursor(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        with pytest.raises(UnknownThread):
            await archive.page(ref.key, limit=20)
        await archive.append_round(make_round(ref, 0))
        with pytest.raises(UnknownMessage):
            await archive.page(ref.key, limit=20, before="no-such-message")

    async def test_limit_is_bounded(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        await archive.append_round(make_round(ref, 0))
        for limit in (0, 101):
            with pytest.raises(ValueError, match="limit"):
                await archive.page(ref.key, limit=limit)

    async def test_recent_is_the_newest_oldest_first(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        rounds = [make_round(ref, i) for i in range(15)]
        for round_ in rounds:
            await archive.append_round(round_)
        recent = await archive.recent(ref.key, 20)
        assert recent == [m for r in rounds[-10:] for m in (r.human, r.ai)]
        assert await archive.recent(new_ref().key, 20) == []

    async def test_find_by_ids(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        rounds = [make_round(ref, i) for i in range(3)]
        for round_ in rounds:
            await archive.append_round(round_)
        wanted = [rounds[2].ai.id, rounds[0].human.id, "nope"]
        found = await archive.find(ref.key, wanted)
        assert found == [rounds[0].human, rounds[2].ai], "oldest first, unknown ids skipped"
        assert await archive.find(new_ref().key, wanted) == []
        assert await archive.find(ref.key, []) == []

    async def test_latest_summary(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        assert await archive.latest_summary(ref.key) is None
        await archive.append_round(make_round(ref, 0, summary="first"))
        await archive.append_round(make_round(ref, 1, summary="second"))
        await archive.append_round(make_round(ref, 2))
        assert await archive.latest_summary(ref.key) == "second"

    async def test_threads_are_separate(self, archive: TranscriptArchive) -> None:
        one, other = new_ref(), new_ref()
        await archive.append_round(make_round(one, 0))
        await archive.append_round(make_round(other, 0))
        assert len((await archive.page(one.key, limit=20)).messages) == 2

    async def test_count_is_the_threads_archived_messages(self, archive: TranscriptArchive) -> None:
        ref, other = new_ref(), new_ref()
        assert await archive.count(ref.key) == 0
        rounds = [make_round(ref, i) for i in range(3)]
        for round_ in rounds:
            await archive.append_round(round_)
        await archive.append_round(make_round(other, 0))
        assert await archive.count(ref.key) == 6
        await archive.append_round(rounds[1])  # a retry adds nothing
        assert await archive.count(ref.key) == 6
        assert await archive.count(other.key) == 2
        assert await archive.count(ref.key) == await archive.delete_thread(ref.key)
        assert await archive.count(ref.key) == 0
        assert await archive.count(other.key) == 2

    async def test_delete_thread(self, archive: TranscriptArchive) -> None:
        ref, kept = new_ref(), new_ref()
        for i in range(3):
            await archive.append_round(make_round(ref, i))
        await archive.append_round(make_round(kept, 0))
        assert await archive.delete_thread(ref.key) == 6
        assert await archive.delete_thread(ref.key) == 0
        with pytest.raises(UnknownThread):
            await archive.page(ref.key, limit=20)
        assert len((await archive.page(kept.key, limit=20)).messages) == 2

    async def test_a_deleted_run_id_can_be_archived_again(self, archive: TranscriptArchive) -> None:
        ref = new_ref()
        round_ = make_round(ref, 0)
        await archive.append_round(round_)
        await archive.delete_thread(ref.key)
        assert await archive.append_round(round_) is True

    async def test_erase_user_touches_only_that_user_in_that_tenant(
        self, archive: TranscriptArchive
    ) -> None:
        user = f"u{uuid.uuid4().hex[:8]}"
        mine = [new_ref("acme", user), new_ref("acme", user)]
        same_user_other_tenant = new_ref("globex", user)
        other_user = new_ref("acme")
        for ref in [*mine, same_user_other_tenant, other_user]:
            await archive.append_round(make_round(ref, 0))
            await archive.append_round(make_round(ref, 1))
        assert await archive.erase_user("acme", user) == (2, 8)
        for ref in mine:
            with pytest.raises(UnknownThread):
                await archive.page(ref.key, limit=20)
        for ref in (same_user_other_tenant, other_user):
            assert len((await archive.page(ref.key, limit=20)).messages) == 4
        assert await archive.erase_user("acme", user) == (0, 0)
