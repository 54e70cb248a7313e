"""``StorageUsage``: the kinds in the API's order, their total, sums."""

from __future__ import annotations

import pytest

from threadkeeper.domain.storage import KINDS, StorageUsage


def test_kinds_total_and_sum() -> None:
    usage = StorageUsage.of({"checkpoints": 10, "audit": 2})
    assert list(usage.by_kind()) == list(KINDS)
    assert usage.by_kind()["checkpoints"] == 10
    assert usage.total == 12
    assert (usage + StorageUsage(feedback=3)).total == 15
    assert StorageUsage().total == 0


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="memory"):
        StorageUsage.of({"memory": 1})


def test_the_logical_figures_grow_by_what_the_compressed_payloads_inflate_to() -> None:
    stored = StorageUsage(messages=100, run_records=40, feedback=7)
    assert stored.uncompressed == stored  # nothing compressed: logical is as stored
    usage = stored.inflated_by({"messages": 900})
    assert usage.total == 147  # the stored figures are unchanged
    assert usage.uncompressed.by_kind()["messages"] == 1000
    assert usage.uncompressed.total == 1047
    assert usage.stored == stored
    both = usage.inflated_by({"run_records": 10})  # a second inflation adds to the first
    assert both.uncompressed.by_kind() == {**stored.by_kind(), "messages": 1000, "run_records": 50}
    summed = usage + StorageUsage(checkpoints=5)  # e.g. Redis's bytes beside MySQL's
    assert summed.total == 152
    assert summed.uncompressed.total == 1052
    assert (StorageUsage(audit=1) + StorageUsage(audit=2)).logical is None
