"""The isolation property at full size (``tox -e reliability-full``), on every profile and in
both thread scopes: ids that differ by ``_``, ``%``, a separator, letter case or a prefix never
see or delete each other's data (issue 26). CI runs the same property with few examples in
the unit (embedded) and integration (postgres, redis-mysql) suites; here it is skipped unless
``THREADKEEPER_RELIABILITY_SIZE=full``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.conftest import mysql, redis_server  # noqa: F401 (fixtures)
from tests.integration.test_backend_conformance import PostgresOpened, RedisMysqlOpened
from tests.reliability.conftest import FULL, Measure
from threadkeeper.adapters.embedded import PROFILE as EMBEDDED
from threadkeeper.adapters.embedded.settings import EmbeddedSettings
from threadkeeper.adapters.profile import StorageBackend
from threadkeeper.conformance.isolation import IsolationConformance
from threadkeeper.domain.threads import ThreadScope

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not FULL, reason="full size only (CI runs it in unit and integration)"),
]

EXAMPLES = 300


class FullSize(IsolationConformance):
    @pytest.fixture
    def isolation_examples(self, measure: Measure) -> int:
        measure("isolation", profile=type(self).__name__, scope=self.scope.value, examples=EXAMPLES)
        return EXAMPLES


class EmbeddedOpened:
    @pytest.fixture
    async def open_backend(self, tmp_path: Path) -> AsyncIterator[StorageBackend]:
        async with EMBEDDED.open(EmbeddedSettings(data_dir=str(tmp_path / "data"))) as opened:
            yield opened


class TestEmbedded(EmbeddedOpened, FullSize):
    pass


class TestEmbeddedGlobal(EmbeddedOpened, FullSize):
    scope = ThreadScope.GLOBAL


class TestPostgres(PostgresOpened, FullSize):
    pass


class TestPostgresGlobal(PostgresOpened, FullSize):
    scope = ThreadScope.GLOBAL


class TestRedisMysql(RedisMysqlOpened, FullSize):
    pass


class TestRedisMysqlGlobal(RedisMysqlOpened, FullSize):
    scope = ThreadScope.GLOBAL
