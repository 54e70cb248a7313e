"""The server profiles pass the backend suite, opened as the registry opens them: postgres on
a fresh migrated schema per test, redis-mysql on a fresh migrated MariaDB database per test
beside a private Redis Stack (flushed per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis
from threadkeeper.adapters.postgres import PROFILE as POSTGRES
from threadkeeper.adapters.postgres.settings import PostgresSettings
from threadkeeper.adapters.profile import StorageBackend
from threadkeeper.adapters.redis_mysql import PROFILE as REDIS_MYSQL
from threadkeeper.adapters.redis_mysql.settings import RedisMysqlSettings
from threadkeeper.conformance.backend import BackendConformance
from threadkeeper.conformance.isolation import IsolationConformance
from threadkeeper.domain.threads import ThreadScope

pytestmark = pytest.mark.integration


class PostgresOpened:
    """``open_backend``: postgres on a fresh migrated schema."""

    @pytest.fixture
    def url(self) -> Iterator[str]:
        with fresh_schema() as migrated:
            yield migrated

    @pytest.fixture
    async def open_backend(self, url: str) -> AsyncIterator[StorageBackend]:
        async with POSTGRES.open(PostgresSettings(postgres_url=url)) as opened:
            yield opened


class TestPostgresBackend(PostgresOpened, BackendConformance):
    pass


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_schema() as migrated:
        yield migrated


async def test_a_postgres_round_asks_for_its_session_once_per_connection(postgres_url: str) -> None:
    """The round's server session (pid, start; what an in-doubt commit ends) belongs to the
    pooled connection: asked once per connection, not once per run (issue 12: a statement
    per run for an answer that never changes)."""
    from sqlalchemy import event

    from threadkeeper.conformance.backend import Turn, new_ref, store_round

    async with POSTGRES.open(PostgresSettings(postgres_url=postgres_url)) as backend:
        asked: list[str] = []
        engine = backend.rounds.engine  # type: ignore[attr-defined]

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _seen(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
            if "pg_backend_pid()" in statement:
                asked.append(statement)

        ref = new_ref()
        for i in range(4):
            await store_round(backend, ref, Turn.make(i))
        pool = engine.sync_engine.pool
        connections = pool.checkedin() + pool.checkedout()
        assert 1 <= len(asked) <= connections < 4, (len(asked), connections)


class RedisMysqlOpened:
    """``open_backend``: redis-mysql on a fresh MariaDB database and the flushed private
    Redis Stack."""

    @pytest.fixture
    async def open_backend(
        self, redis_server: PrivateRedis, mysql: str
    ) -> AsyncIterator[StorageBackend]:
        client = Redis.from_url(redis_server.url)
        await client.flushall()
        await client.aclose()
        settings = RedisMysqlSettings(
            redis_url=redis_server.url, mysql_url=mysql, lock_ttl_seconds=3
        )
        async with REDIS_MYSQL.open(settings) as opened:
            yield opened


class TestRedisMysqlBackend(RedisMysqlOpened, BackendConformance):
    pass


class TestPostgresIsolation(PostgresOpened, IsolationConformance):
    """Sibling ids never see or delete each other's data (issue 26)."""


class TestPostgresIsolationGlobalScope(TestPostgresIsolation):
    scope = ThreadScope.GLOBAL


class TestRedisMysqlIsolation(RedisMysqlOpened, IsolationConformance):
    """Sibling ids never see or delete each other's data (issue 26): the MySQL store's
    ``LIKE`` prefix search is wrapped (``u_1`` matched ``uX1``, ``u1`` matched ``u10``)."""


class TestRedisMysqlIsolationGlobalScope(TestRedisMysqlIsolation):
    scope = ThreadScope.GLOBAL
