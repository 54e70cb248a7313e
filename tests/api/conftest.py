"""The API suite: every endpoint, status and SSE sequence of DESIGN.md against the real
application (real agent, real storage), parametrized by profile."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis, private_redis
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings

TENANT = "acme-insurance"
USER = "user-1"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER}

TOKEN = "api-suite-token"
PROFILES = [
    "embedded",
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("redis-mysql", marks=pytest.mark.integration),
]


@dataclass(frozen=True)
class Servers:
    """Where a server profile's data lives for one test."""

    postgres_url: str | None = None
    redis_url: str | None = None
    mysql_url: str | None = None

    def env(self) -> dict[str, str]:
        """The same as ``THREADKEEPER_*`` variables (for the CLI and server processes)."""
        values = {
            "THREADKEEPER_POSTGRES_URL": self.postgres_url,
            "THREADKEEPER_REDIS_URL": self.redis_url,
            "THREADKEEPER_MYSQL_URL": self.mysql_url,
        }
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class Event:
    event: str
    data: dict[str, Any]


def parse_sse(text: str) -> list[Event]:
    """Events of a ``text/event-stream`` body (``event:`` + ``data:`` lines)."""
    events: list[Event] = []
    name, data = "message", []
    # SSE lines end in CR, LF or CRLF only (str.splitlines would also break at U+2028 etc.)
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                events.append(Event(name, json.loads("\n".join(data))))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        events.append(Event(name, json.loads("\n".join(data))))
    return events


def settings_for(profile: str, root: Path, servers: Servers | None, **overrides: Any) -> Settings:
    if profile == "embedded":
        return Settings.of(profile="embedded", data_dir=str(root / "data"), **overrides)
    assert servers is not None, f"the {profile} profile needs its servers"
    if profile == "postgres":
        assert servers.postgres_url is not None
        return Settings.of(
            profile="postgres", postgres_url=servers.postgres_url, service_token=TOKEN, **overrides
        )
    if profile == "redis-mysql":
        assert servers.redis_url is not None
        assert servers.mysql_url is not None
        return Settings.of(
            profile="redis-mysql",
            redis_url=servers.redis_url,
            mysql_url=servers.mysql_url,
            service_token=TOKEN,
            **overrides,
        )
    raise NotImplementedError(profile)  # pragma: no cover


def headers_for(profile: str) -> dict[str, str]:
    """The trusted headers, and the service token outside the embedded profile."""
    if profile == "embedded":
        return dict(HEADERS)
    return {**HEADERS, "Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=PROFILES)
def profile(request: pytest.FixtureRequest) -> str:
    return str(request.param)


AppFactory = Callable[..., Litestar]


@pytest.fixture(scope="session")
def redis_stack() -> Iterator[PrivateRedis]:
    """A private Redis Stack for the suite (flushed before each test that uses it), so threads
    of one test never meet another's checkpoints and the shared server is left alone."""
    with private_redis() as server:
        yield server


@pytest.fixture
def database(profile: str, request: pytest.FixtureRequest) -> Iterator[Servers | None]:
    """The servers the profile needs: a fresh migrated schema or database per test."""
    if profile == "postgres":
        with fresh_schema() as url:
            yield Servers(postgres_url=url)
    elif profile == "redis-mysql":
        server: PrivateRedis = request.getfixturevalue("redis_stack")
        flush(server.url)
        with fresh_database() as url:
            yield Servers(redis_url=server.url, mysql_url=url)
    else:
        yield None


def flush(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushall()
    finally:
        client.close()


@pytest.fixture
def make_app(profile: str, tmp_path: Path, database: Servers | None) -> AppFactory:
    def make(**overrides: Any) -> Litestar:
        return create_app(settings_for(profile, tmp_path, database, **overrides))

    return make


@pytest.fixture
def auth(profile: str) -> dict[str, str]:
    return headers_for(profile)


@pytest.fixture
async def client(
    make_app: AppFactory, auth: dict[str, str]
) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        yield client


async def run(
    client: AsyncTestClient[Litestar], thread: str, content: str, **body: Any
) -> dict[str, Any]:
    """One run in JSON mode; its body."""
    response = await client.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": content, **body.pop("message", {})}, **body},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())
