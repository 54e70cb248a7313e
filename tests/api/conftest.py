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

from tests.support.postgres import fresh_schema
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings

TENANT = "acme-insurance"
USER = "user-1"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER}

TOKEN = "api-suite-token"
PROFILES = ["embedded", pytest.param("postgres", marks=pytest.mark.integration)]


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


def settings_for(profile: str, root: Path, url: str | None, **overrides: Any) -> Settings:
    if profile == "embedded":
        return Settings(profile="embedded", data_dir=str(root / "data"), **overrides)
    if profile == "postgres":
        return Settings(
            profile="postgres", postgres_url=url or "", service_token=TOKEN, **overrides
        )
    raise NotImplementedError(profile)  # pragma: no cover - later profiles add theirs here


def headers_for(profile: str) -> dict[str, str]:
    """The trusted headers, and the service token outside the embedded profile."""
    if profile == "embedded":
        return dict(HEADERS)
    return {**HEADERS, "Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=PROFILES)
def profile(request: pytest.FixtureRequest) -> str:
    return str(request.param)


AppFactory = Callable[..., Litestar]


@pytest.fixture
def database(profile: str) -> Iterator[str | None]:
    """The server the profile needs: a fresh migrated schema per test."""
    if profile == "postgres":
        with fresh_schema() as url:
            yield url
    else:
        yield None


@pytest.fixture
def make_app(profile: str, tmp_path: Path, database: str | None) -> AppFactory:
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
