"""The embedded profile's adapters pass the same conformance suites as the in-memory ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.retention import RetentionConformance
from tests.conformance.run_lock import LockFactory, RunLockConformance
from tests.conformance.run_records import RunRecordsConformance
from tests.support.retention import CheckpointRetentionHarness
from threadkeeper.adapters.embedded import EmbeddedBackend, open_embedded
from threadkeeper.domain.runs import RunRecords


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[EmbeddedBackend]:
    async with open_embedded(tmp_path / "data") as opened:
        yield opened


class TestEmbeddedRunLock(RunLockConformance):
    @pytest.fixture
    def lock_factory(self, backend: EmbeddedBackend) -> LockFactory:
        return lambda: backend.lock


class TestSqliteRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self, backend: EmbeddedBackend) -> RunRecords:
        return backend.runs


class TestEmbeddedRetention(RetentionConformance):
    @pytest.fixture
    def harness(self, backend: EmbeddedBackend) -> CheckpointRetentionHarness:
        return CheckpointRetentionHarness(backend)


async def test_a_second_open_of_the_data_dir_is_refused(tmp_path: Path) -> None:
    from threadkeeper.adapters.embedded import DataDirBusy

    async with open_embedded(tmp_path / "data"):
        with pytest.raises(DataDirBusy, match="in use by process"):
            async with open_embedded(tmp_path / "data"):
                pytest.fail("two processes on one data directory")
        async with open_embedded(tmp_path / "data", exclusive=False) as reader:
            assert (await reader.health()) == {"sqlite": "ok"}
