"""The postgres adapters pass the port conformance suites on the real server, each test in a
fresh migrated schema; the saver as threadkeeper configures it passes LangGraph's suite."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.conformance.retention import RetentionConformance
from tests.conformance.run_lock import LockFactory, RunLockConformance
from tests.conformance.run_records import RunRecordsConformance
from tests.support.postgres import fresh_schema
from tests.support.retention import CheckpointRetentionHarness
from threadkeeper.adapters.postgres import (
    AdvisoryRunLock,
    PostgresBackend,
    SchemaNotReady,
    _pool,
    advisory_key,
    open_postgres,
)
from threadkeeper.domain.runs import RunRecords

pytestmark = pytest.mark.integration


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as migrated:
        yield migrated


@pytest.fixture
async def backend(url: str) -> AsyncIterator[PostgresBackend]:
    async with open_postgres(url) as opened:
        yield opened


class TestAdvisoryRunLock(RunLockConformance):
    """Clients on separate pools: separate replicas of the service."""

    @pytest.fixture
    async def lock_factory(self, url: str) -> AsyncIterator[LockFactory]:
        pools = [_pool(url, min_size=1, max_size=25) for _ in range(4)]
        for pool in pools:
            await pool.open(wait=True)
        turn = itertools.count()
        yield lambda: AdvisoryRunLock(pools[next(turn) % len(pools)])
        for pool in pools:
            await pool.close()


class TestPostgresRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self, backend: PostgresBackend) -> RunRecords:
        return backend.runs


class TestPostgresRetention(RetentionConformance):
    @pytest.fixture
    def harness(self, backend: PostgresBackend) -> CheckpointRetentionHarness:
        return CheckpointRetentionHarness(backend)


def test_advisory_keys_are_stable_signed_64_bit() -> None:
    key = advisory_key("acme:u1:t-1")
    assert key == advisory_key("acme:u1:t-1")
    assert -(2**63) <= key < 2**63
    assert key != advisory_key("acme:u1:t-2")


async def test_the_service_refuses_an_unmigrated_schema() -> None:
    with (
        fresh_schema(migrate=False) as bare,
        pytest.raises(SchemaNotReady, match="threadkeeper migrate"),
    ):
        async with open_postgres(bare):
            pytest.fail("opened without a schema")
