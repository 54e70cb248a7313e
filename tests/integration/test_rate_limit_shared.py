"""``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` is one limit for every replica on the server
profiles: the windows live in Redis (redis-mysql) or PostgreSQL (postgres), and two replicas
(two clients of the server) counting at once never let more than the limit through."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from tests.api.conftest import Servers, headers_for, settings_for
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import private_redis
from threadkeeper.adapters.postgres import _pool, open_postgres
from threadkeeper.adapters.postgres.ratelimit import PostgresRateWindows
from threadkeeper.adapters.redis_mysql.ratelimit import RedisWindows
from threadkeeper.app.application import create_app
from threadkeeper.app.http.ratelimit import RunRateLimit
from threadkeeper.app.service import Caller
from threadkeeper.domain.ratelimit import RateWindows

pytestmark = pytest.mark.integration


def someone() -> Caller:
    return Caller("acme", f"u-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


@pytest.fixture(params=["redis", "postgres"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(kind, URL) of a fresh server for the windows (made outside the event loop)."""
    if request.param == "redis":
        with private_redis() as redis:
            yield "redis", redis.url
    else:
        with fresh_schema() as url:
            yield "postgres", url


@pytest.fixture
async def replicas(server: tuple[str, str]) -> AsyncIterator[list[RateWindows]]:
    """Two replicas' windows over one server."""
    kind, url = server
    if kind == "redis":
        clients = [Redis.from_url(url), Redis.from_url(url)]
        try:
            yield [RedisWindows(c) for c in clients]
        finally:
            for client in clients:
                await client.aclose()
    else:
        pools: list[AsyncConnectionPool[Any]] = [_pool(url, min_size=1, max_size=4) for _ in "ab"]
        for pool in pools:
            await pool.open(wait=True)
        try:
            yield [PostgresRateWindows(pool) for pool in pools]
        finally:
            for pool in pools:
                await pool.close()


async def test_two_replicas_share_one_limit(replicas: list[RateWindows]) -> None:
    assert all(windows.shared for windows in replicas)
    limits = [RunRateLimit(3, windows) for windows in replicas]
    user = someone()
    # six runs at once, three through each replica: three pass, three are refused
    outcomes = await asyncio.gather(
        *(limits[i % 2].check(user) for i in range(6)), return_exceptions=True
    )
    refused = [o for o in outcomes if o is not None]
    assert len(refused) == 3, outcomes
    for problem in refused:
        assert getattr(problem, "status_code", None) == 429
        retry_after = int(problem.headers["Retry-After"])  # type: ignore[union-attr]
        assert 1 <= retry_after <= 60
    await limits[0].check(someone())  # another user is not limited
    # the window slides: with a 1 s window the next run passes after a second
    quick, fresh = RunRateLimit(1, replicas[1], window=1.0), someone()
    await quick.check(fresh)
    with pytest.raises(Exception, match="runs per minute"):
        await quick.check(fresh)
    await asyncio.sleep(1.1)
    await quick.check(fresh)


async def test_the_postgres_profile_counts_runs_in_the_database(
    postgres_url: str, tmp_path: Path
) -> None:
    settings = settings_for(
        "postgres", tmp_path, Servers(postgres_url=postgres_url), rate_limit_per_minute=2
    )
    app = create_app(settings)
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(headers_for("postgres"))
        statuses = []
        for index in range(3):
            response = await client.post(
                f"/v1/threads/limited-{index}/runs",
                json={"message": {"content": "Is dental treatment covered?"}},
                headers={"Accept": "application/json"},
            )
            statuses.append(response.status_code)
        assert statuses == [200, 200, 429], statuses
        assert response.headers["Retry-After"]
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM tk_run_rate_hits").fetchone() == (2,)


async def test_the_postgres_backend_offers_windows_every_replica_shares(
    postgres_url: str,
) -> None:
    async with open_postgres(postgres_url) as backend:
        assert isinstance(backend.rate_windows, PostgresRateWindows)
        assert backend.rate_windows.shared
