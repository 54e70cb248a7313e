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
