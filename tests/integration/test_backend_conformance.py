"""The server profiles pass the backend suite, opened as the registry opens them: postgres on
a fresh migrated schema per test, redis-mysql on a fresh migrated MariaDB database per test
beside a private Redis Stack (flushed per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis, private_redis
from threadkeeper.adapters.postgres import PROFILE as POSTGRES
from threadkeeper.adapters.postgres.settings import PostgresSettings
from threadkeeper.adapters.profile import Backend
from threadkeeper.adapters.redis_mysql import PROFILE as REDIS_MYSQL
from threadkeeper.adapters.redis_mysql.settings import RedisMysqlSettings
from threadkeeper.conformance.backend import BackendConformance

pytestmark = pytest.mark.integration


class TestPostgresBackend(BackendConformance):
    @pytest.fixture
    def url(self) -> Iterator[str]:
        with fresh_schema() as migrated:
            yield migrated

    @pytest.fixture
    async def open_backend(self, url: str) -> AsyncIterator[Backend]:
        async with POSTGRES.open(PostgresSettings(postgres_url=url)) as opened:
            yield opened


@pytest.fixture(scope="module")
def redis_server() -> Iterator[PrivateRedis]:
    with private_redis() as server:
        yield server


class TestRedisMysqlBackend(BackendConformance):
    @pytest.fixture
    def mysql(self) -> Iterator[str]:
        with fresh_database() as url:
            yield url

    @pytest.fixture
    async def open_backend(self, redis_server: PrivateRedis, mysql: str) -> AsyncIterator[Backend]:
        client = Redis.from_url(redis_server.url)
        await client.flushall()
        await client.aclose()
        settings = RedisMysqlSettings(
            redis_url=redis_server.url, mysql_url=mysql, lock_ttl_seconds=3
        )
        async with REDIS_MYSQL.open(settings) as opened:
            yield opened
