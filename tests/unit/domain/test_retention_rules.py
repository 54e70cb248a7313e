"""Retention: duration parsing, the batched sweep, erasure; and the thread storage key."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from threadkeeper.domain.errors import InvalidDuration
from threadkeeper.domain.retention import (
    ErasureReceipt,
    InMemoryRetention,
    parse_duration,
    sweep,
)
from threadkeeper.domain.threads import ThreadRef, ThreadScope

NOW = datetime(2026, 6, 1, tzinfo=UTC)


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", timedelta(days=90)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        (" 7 d ", timedelta(days=7)),
        ("1d", timedelta(days=1)),
    ],
)
def test_durations_are_parsed(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["0d", "", "5y", "-1d", "d", "90", "1.5d", "90 days", "1d2h", "00s"]
)
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(InvalidDuration):
        parse_duration(text)


def test_invalid_duration_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="positive duration"):
        parse_duration("0s")


# --- the sweep -------------------------------------------------------------------------------


class RecordingRetention(InMemoryRetention):
    """The in-memory fake, recording each batch it is asked to delete."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        self.batches.append(list(thread_keys))
        return await super().delete_threads(thread_keys, idle_before=idle_before)


def populate(idle: int, active: int = 3) -> RecordingRetention:
    retention = RecordingRetention()
    for n in range(idle):
        retention.record_thread(
            f"acme:u{n % 2}:idle{n}", "acme", f"u{n % 2}", NOW - timedelta(days=100 + n), 4, 1
        )
    for n in range(active):
        retention.record_thread(f"acme:u1:active{n}", "acme", "u1", NOW - timedelta(days=n), 2)
    return retention


def idle_keys(retention: InMemoryRetention) -> set[str]:
    return {key for key in retention.thread_keys() if ":idle" in key}


async def test_sweep_deletes_only_idle_threads_in_batches() -> None:
    retention = populate(idle=7)
    report = await sweep(retention, now=NOW, older_than=timedelta(days=90), batch=3)
    assert [len(batch) for batch in retention.batches] == [3, 3, 1]
    assert report.batches == 3
    assert report.deleted == ErasureReceipt(threads=7, messages=28, memory_items=0, feedback=7)
    assert report.cutoff == NOW - timedelta(days=90)
    assert not report.dry_run
    assert retention.thread_keys() == {f"acme:u1:active{n}" for n in range(3)}
    # oldest first
    assert retention.batches[0] == ["acme:u0:idle6", "acme:u1:idle5", "acme:u0:idle4"]


async def test_a_full_last_batch_ends_on_an_empty_query() -> None:
    retention = populate(idle=6)
    report = await sweep(retention, now=NOW, older_than=timedelta(days=90), batch=3)
    assert [len(batch) for batch in retention.batches] == [3, 3]
    assert report.batches == 2
    assert report.deleted.threads == 6


async def test_max_batches_bounds_one_sweep() -> None:
    retention = populate(idle=7)
    report = await sweep(retention, now=NOW, older_than=timedelta(days=90), batch=2, max_batches=2)
    assert report.batches == 2
    assert report.deleted.threads == 4
    assert len(idle_keys(retention)) == 3


async def test_a_dry_run_deletes_nothing_and_reports_the_count() -> None:
    retention = populate(idle=7)
    before = retention.thread_keys()
    report = await sweep(retention, now=NOW, older_than=timedelta(days=90), batch=3, dry_run=True)
    assert report.dry_run
    assert report.deleted.threads == 7
    assert report.batches == 0
    assert retention.batches == []
    assert retention.thread_keys() == before


async def test_nothing_idle_nothing_deleted() -> None:
    retention = populate(idle=0)  # active threads are 0-2 days old
    report = await sweep(retention, now=NOW, older_than=timedelta(days=30), batch=10)
    assert report.batches == 0
    assert report.deleted == ErasureReceipt()
    assert len(retention.thread_keys()) == 3


async def test_the_cutoff_is_strict() -> None:
    retention = InMemoryRetention()
    retention.record_thread("acme:u1:edge", "acme", "u1", NOW - timedelta(days=90), 2)
    retention.record_thread("acme:u1:older", "acme", "u1", NOW - timedelta(days=90, seconds=1), 2)
    report = await sweep(retention, now=NOW, older_than=timedelta(days=90))
    assert report.deleted.threads == 1
    assert retention.thread_keys() == {"acme:u1:edge"}


async def test_a_batch_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch"):
        await sweep(InMemoryRetention(), now=NOW, older_than=timedelta(days=1), batch=0)


async def test_erase_user_deletes_everything_of_that_user_only() -> None:
    retention = InMemoryRetention()
    retention.record_thread("acme:u1:t1", "acme", "u1", NOW, messages=4, feedback=2)
    retention.record_thread("acme:u1:t2", "acme", "u1", NOW, messages=6, feedback=0)
    retention.record_thread("acme:u2:t1", "acme", "u2", NOW, messages=8, feedback=1)
    retention.record_thread("other:u1:t1", "other", "u1", NOW, messages=10, feedback=1)
    retention.record_memory("acme", "u1", 5)
    retention.record_memory("other", "u1", 7)
    receipt = await retention.erase_user("acme", "u1")
    assert receipt.counts() == ErasureReceipt(threads=2, messages=10, memory_items=5, feedback=2)
    assert receipt.remaining == {"memory": 0}
    assert retention.thread_keys() == {"acme:u2:t1", "other:u1:t1"}
    assert (await retention.erase_user("acme", "u1")).counts() == ErasureReceipt()
    assert (await retention.erase_user("other", "u1")).memory_items == 7


def test_receipts_add_up() -> None:
    total = ErasureReceipt(1, 2, 3, 4) + ErasureReceipt(10, 20, 30, 40)
    assert total == ErasureReceipt(11, 22, 33, 44)


# --- thread keys -----------------------------------------------------------------------------


def test_the_user_scoped_key_holds_tenant_user_and_thread() -> None:
    ref = ThreadRef("acme", "u-1", "support:2026")
    assert ref.scope is ThreadScope.USER
    assert ref.key == "acme:u-1:support:2026"


def test_the_global_key_holds_tenant_and_thread() -> None:
    ref = ThreadRef("acme", "u-1", "t1", ThreadScope.GLOBAL)
    assert ref.key == "acme:t1"
    assert ThreadRef("acme", "u-2", "t1", ThreadScope("global")).key == ref.key


def test_the_tenant_is_always_in_the_key() -> None:
    assert ThreadRef("a", "u", "t").key != ThreadRef("b", "u", "t").key
    assert (
        ThreadRef("a", "u", "t", ThreadScope.GLOBAL).key
        != ThreadRef("b", "u", "t", ThreadScope.GLOBAL).key
    )
    assert ThreadRef("a", "u1", "t").key != ThreadRef("a", "u2", "t").key


@pytest.mark.parametrize(
    ("tenant", "user", "thread", "bad"),
    [
        ("", "u", "t", "tenant_id"),
        ("ac:me", "u", "t", "tenant_id"),
        ("a" * 129, "u", "t", "tenant_id"),
        ("acme", "", "t", "user_id"),
        ("acme", "u:1", "t", "user_id"),
        ("acme", "u 1", "t", "user_id"),
        ("acme", "کاربر", "t", "user_id"),
        ("acme", "u", "", "thread_id"),
        ("acme", "u", "t/1", "thread_id"),
        ("acme", "u", "t" * 129, "thread_id"),
        ("acme", "u", "t\n", "thread_id"),
    ],
)
def test_bad_ids_are_refused(tenant: str, user: str, thread: str, bad: str) -> None:
    with pytest.raises(ValueError, match=f"invalid {bad}"):
        ThreadRef(tenant, user, thread)


def test_ids_at_the_length_limit_are_accepted() -> None:
    ref = ThreadRef("a" * 128, "b" * 128, "c" * 128)
    assert ref.key == f"{'a' * 128}:{'b' * 128}:{'c' * 128}"
