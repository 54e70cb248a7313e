"""``GET /messages`` paging (``page_messages``) and the in-memory ``TranscriptArchive``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadkeeper.domain.errors import UnknownMessage, UnknownThread
from threadkeeper.domain.transcript import (
    MAX_PAGE,
    Citation,
    InMemoryTranscriptArchive,
    Round,
    TranscriptMessage,
    page_messages,
)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def transcript(count: int) -> list[TranscriptMessage]:
    """``count`` messages m0..m{count-1}, alternating human and AI, oldest first."""
    return [
        TranscriptMessage(
            id=f"m{n}",
            role="human" if n % 2 == 0 else "ai",
            content=f"message {n}",
            created_at=T0 + timedelta(minutes=n),
        )
        for n in range(count)
    ]


def ids(messages: list[TranscriptMessage]) -> list[str]:
    return [m.id for m in messages]


# --- page_messages ---------------------------------------------------------------------------


def test_the_first_page_is_the_newest_oldest_first() -> None:
    page = page_messages(transcript(10), limit=3)
    assert ids(page.messages) == ["m7", "m8", "m9"]
    assert page.next_before == "m7"


def test_next_before_walks_back_to_the_start() -> None:
    messages = transcript(10)
    pages: list[list[str]] = []
    before: str | None = None
    while True:
        page = page_messages(messages, limit=3, before=before)
        pages.append(ids(page.messages))
        if page.next_before is None:
            break
        before = page.next_before
    assert pages == [["m7", "m8", "m9"], ["m4", "m5", "m6"], ["m1", "m2", "m3"], ["m0"]]


def test_a_page_that_reaches_the_start_exactly_has_no_next_page() -> None:
    page = page_messages(transcript(6), limit=3, before="m3")
    assert ids(page.messages) == ["m0", "m1", "m2"]
    assert page.next_before is None
    whole = page_messages(transcript(6), limit=6)
    assert ids(whole.messages) == [f"m{n}" for n in range(6)]
    assert whole.next_before is None


def test_before_the_first_message_is_an_empty_last_page() -> None:
    page = page_messages(transcript(4), limit=2, before="m0")
    assert page.messages == []
    assert page.next_before is None


def test_an_empty_transcript_is_one_empty_page() -> None:
    page = page_messages([], limit=20)
    assert page.messages == []
    assert page.next_before is None


def test_an_unknown_before_is_refused() -> None:
    with pytest.raises(UnknownMessage):
        page_messages(transcript(4), limit=2, before="nope")


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE + 1, 1000])
def test_limit_outside_1_to_100_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        page_messages(transcript(4), limit=limit)


@pytest.mark.parametrize("limit", [1, MAX_PAGE])
def test_limit_bounds_are_accepted(limit: int) -> None:
    page = page_messages(transcript(150), limit=limit)
    assert len(page.messages) == limit
    assert page.messages[-1].id == "m149"
    assert MAX_PAGE == 100


# --- the in-memory archive -------------------------------------------------------------------


def round_(
    run: int,
    *,
    thread_key: str = "acme:u1:t1",
    tenant_id: str = "acme",
    user_id: str = "u1",
    summary: str | None = None,
) -> Round:
    at = T0 + timedelta(minutes=2 * run)
    return Round(
        run_id=f"run-{thread_key}-{run}",
        thread_key=thread_key,
        tenant_id=tenant_id,
        user_id=user_id,
        thread_id=thread_key.rsplit(":", 1)[-1],
        human=TranscriptMessage(f"{thread_key}/h{run}", "human", f"question {run}", at),
        ai=TranscriptMessage(
            f"{thread_key}/a{run}",
            "ai",
            f"answer {run}",
            at + timedelta(seconds=5),
            citations=(Citation("c1", "d1", "Policy terms"),),
        ),
        summary=summary,
    )


async def test_append_is_idempotent_on_run_id() -> None:
    archive = InMemoryTranscriptArchive()
    assert await archive.append_round(round_(1)) is True
    assert await archive.append_round(round_(1)) is False
    page = await archive.page("acme:u1:t1", limit=10)
    assert ids(page.messages) == ["acme:u1:t1/h1", "acme:u1:t1/a1"]
    assert page.messages[1].citations == (Citation("c1", "d1", "Policy terms"),)


async def test_archive_pages_like_page_messages() -> None:
    archive = InMemoryTranscriptArchive()
    for run in range(5):
        await archive.append_round(round_(run))
    first = await archive.page("acme:u1:t1", limit=4)
    assert ids(first.messages) == [
        "acme:u1:t1/h3",
        "acme:u1:t1/a3",
        "acme:u1:t1/h4",
        "acme:u1:t1/a4",
    ]
    second = await archive.page("acme:u1:t1", limit=4, before=first.next_before)
    assert ids(second.messages)[0] == "acme:u1:t1/h1"
    assert second.next_before == "acme:u1:t1/h1"
    with pytest.raises(UnknownMessage):
        await archive.page("acme:u1:t1", limit=4, before="acme:u1:t2/h1")


async def test_an_unknown_thread_is_refused() -> None:
    archive = InMemoryTranscriptArchive()
    await archive.append_round(round_(1))
    with pytest.raises(UnknownThread):
        await archive.page("acme:u1:other", limit=10)


async def test_recent_is_the_newest_messages_oldest_first() -> None:
    archive = InMemoryTranscriptArchive()
    for run in range(3):
        await archive.append_round(round_(run))
    recent = await archive.recent("acme:u1:t1", 3)
    assert ids(recent) == ["acme:u1:t1/a1", "acme:u1:t1/h2", "acme:u1:t1/a2"]
    assert await archive.recent("acme:u1:t1", 0) == []
    assert await archive.recent("acme:u1:unknown", 5) == []


async def test_latest_summary_is_the_newest_round_that_has_one() -> None:
    archive = InMemoryTranscriptArchive()
    assert await archive.latest_summary("acme:u1:t1") is None
    await archive.append_round(round_(1, summary="first summary"))
    await archive.append_round(round_(2, summary="second summary"))
    await archive.append_round(round_(3))
    assert await archive.latest_summary("acme:u1:t1") == "second summary"


async def test_delete_thread_counts_messages_and_is_repeatable() -> None:
    archive = InMemoryTranscriptArchive()
    for run in range(3):
        await archive.append_round(round_(run))
    await archive.append_round(round_(1, thread_key="acme:u1:t2"))
    assert await archive.delete_thread("acme:u1:t1") == 6
    assert await archive.delete_thread("acme:u1:t1") == 0
    with pytest.raises(UnknownThread):
        await archive.page("acme:u1:t1", limit=10)
    assert len((await archive.page("acme:u1:t2", limit=10)).messages) == 2


async def test_erase_user_touches_only_that_tenant_and_user() -> None:
    archive = InMemoryTranscriptArchive()
    mine = ["acme:u1:t1", "acme:u1:t2"]
    others = [("acme:u2:t1", "acme", "u2"), ("other:u1:t1", "other", "u1")]
    for key in mine:
        for run in range(2):
            await archive.append_round(round_(run, thread_key=key))
    for key, tenant, user in others:
        await archive.append_round(round_(1, thread_key=key, tenant_id=tenant, user_id=user))
    assert await archive.erase_user("acme", "u1") == (2, 8)
    for key in mine:
        with pytest.raises(UnknownThread):
            await archive.page(key, limit=10)
    for key, _, _ in others:
        assert len((await archive.page(key, limit=10)).messages) == 2
    assert await archive.erase_user("acme", "u1") == (0, 0)
