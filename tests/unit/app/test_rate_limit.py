"""``THREADKEEPER_RATE_LIMIT_PER_MINUTE``: runs per (tenant, user) per minute, 429 beyond."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient, TestClient

from tests.support.fake_service import FakeThreadService
from threadkeeper.adapters.embedded import open_embedded
from threadkeeper.adapters.redis_mysql.ratelimit import RedisWindows
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings, load_settings
from threadkeeper.app.http import HttpSettings, create_http_app
from threadkeeper.app.http.ratelimit import RunRateLimit
from threadkeeper.domain.ratelimit import InMemoryWindows

PROBLEM = "application/problem+json"
TOKEN = "rate-token"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def headers(user: str = "u1", tenant: str = "acme") -> dict[str, str]:
    return {
        "Authorization": f"Bearer {TOKEN}",
        "X-Tenant-Id": tenant,
        "X-User-Id": user,
        "Accept": "application/json",
    }


def run_body(content: str = "hi") -> dict[str, Any]:
    return {"message": {"content": content}}


@pytest.fixture
def clock() -> Clock:
    return Clock()


def limited_app(per_minute: int | None, clock: Clock) -> Litestar:
    limit = None if per_minute is None else RunRateLimit(per_minute, InMemoryWindows(clock))
    return create_http_app(
        FakeThreadService(), HttpSettings(service_token=TOKEN, run_rate_limit=limit)
    )


@pytest.fixture
async def client(clock: Clock) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(limited_app(3, clock)) as client:
        yield client


async def test_the_run_over_the_limit_is_429_with_retry_after(
    client: AsyncTestClient[Litestar], clock: Clock
) -> None:
    for index in range(3):
        clock.now += 10
        ok = await client.post(f"/v1/threads/t{index}/runs", json=run_body(), headers=headers())
        assert ok.status_code == 200
    clock.now += 5  # the first run was 25 s ago: it leaves the window in 35 s
    over = await client.post("/v1/threads/t9/runs", json=run_body(), headers=headers())
    assert over.status_code == 429
    assert over.headers["content-type"].startswith(PROBLEM)
    assert over.headers["retry-after"] == "35"
    body = over.json()
    assert body["status"] == 429
    assert body["type"] == "urn:threadkeeper:problem:rate-limited"
    assert "3 runs per minute" in body["detail"]
    # an SSE request is refused the same way, before any stream starts
    sse = await client.post(
        "/v1/threads/t9/runs", json=run_body(), headers={**headers(), "Accept": "*/*"}
    )
    assert sse.status_code == 429
    assert sse.headers["content-type"].startswith(PROBLEM)
    clock.now += 35  # the oldest run leaves the window: one more is allowed, not two
    assert (
        await client.post("/v1/threads/t9/runs", json=run_body(), headers=headers())
    ).status_code == 200
    assert (
        await client.post("/v1/threads/t9/runs", json=run_body(), headers=headers())
    ).status_code == 429


async def test_other_users_and_tenants_are_not_limited_by_one_user(
    client: AsyncTestClient[Litestar],
) -> None:
    for index in range(3):
        await client.post(f"/v1/threads/t{index}/runs", json=run_body(), headers=headers())
    assert (
        await client.post("/v1/threads/t1/runs", json=run_body(), headers=headers())
    ).status_code == 429
    for other in (headers(user="u2"), headers(tenant="acme-eu")):
        response = await client.post("/v1/threads/t1/runs", json=run_body(), headers=other)
        assert response.status_code == 200, other
    # the other routes of the limited user are not runs
    assert (await client.get("/v1/threads/t1/messages", headers=headers())).status_code == 200


async def test_refused_requests_do_not_use_up_the_users_runs(
    client: AsyncTestClient[Litestar],
) -> None:
    no_token = {k: v for k, v in headers().items() if k != "Authorization"}
    for _ in range(5):
        assert (
            await client.post("/v1/threads/t1/runs", json=run_body(), headers=no_token)
        ).status_code == 401
        assert (
            await client.post("/v1/threads/t1/runs", json=run_body(" "), headers=headers())
        ).status_code == 422
    for index in range(3):
        response = await client.post(
            f"/v1/threads/t{index}/runs", json=run_body(), headers=headers()
        )
        assert response.status_code == 200


def test_no_limit_when_off(clock: Clock) -> None:
    with TestClient(limited_app(None, clock)) as client:
        for index in range(30):
            response = client.post(f"/v1/threads/t{index}/runs", json=run_body(), headers=headers())
            assert response.status_code == 200


@pytest.mark.parametrize(("variable", "expected"), [(None, None), ("0", None), ("7", 7)])
def test_the_setting_makes_the_limit(
    tmp_path: Path, variable: str | None, expected: int | None
) -> None:
    environ = {"THREADKEEPER_DATA_DIR": str(tmp_path)}
    if variable is not None:
        environ["THREADKEEPER_RATE_LIMIT_PER_MINUTE"] = variable
    app = create_app(load_settings(environ))
    limit = app.dependencies["run_rate_limit"].dependency()
    assert (limit.per_minute if limit is not None else None) == expected


def test_the_configured_limit_reaches_the_runs_endpoint(tmp_path: Path) -> None:
    """THREADKEEPER_RATE_LIMIT_PER_MINUTE is wired: the real app on embedded refuses the
    third run of a user in a minute when it is 2."""
    settings = Settings.of(data_dir=str(tmp_path / "data"), rate_limit_per_minute=2)
    user = {"X-Tenant-Id": "acme", "X-User-Id": "u1", "Accept": "application/json"}
    with TestClient(create_app(settings), timeout=60) as client:
        for index in range(2):
            response = client.post(f"/v1/threads/t{index}/runs", json=run_body(), headers=user)
            assert response.status_code == 200, response.text
        over = client.post("/v1/threads/t2/runs", json=run_body(), headers=user)
        assert over.status_code == 429
        assert 1 <= int(over.headers["retry-after"]) <= 60
        other = client.post(
            "/v1/threads/t2/runs", json=run_body(), headers={**user, "X-User-Id": "u2"}
        )
        assert other.status_code == 200
        # nothing was stored for the refused run
        assert client.get("/v1/threads/t2/messages", headers=user).status_code == 404


def test_the_openapi_documents_429_with_retry_after(clock: Clock) -> None:
    with TestClient(limited_app(3, clock)) as client:
        openapi = client.get("/schema/openapi.json").json()
    responses = openapi["paths"]["/v1/threads/{thread_id}/runs"]["post"]["responses"]
    assert set(responses["429"]["content"]) == {PROBLEM}
    retry_after = responses["429"]["headers"]["Retry-After"]
    assert retry_after["required"] is True
    assert retry_after["schema"] == {"type": "integer", "minimum": 1}
    # only runs are limited
    assert "429" not in openapi["paths"]["/v1/threads/{thread_id}/messages"]["get"]["responses"]


async def test_in_memory_windows_forget_idle_users(clock: Clock) -> None:
    windows = InMemoryWindows(clock)
    for index in range(InMemoryWindows.SWEEP_EVERY - 1):
        assert await windows.hit(f"t:u{index}", limit=1, window=60) is None
    clock.now += 61
    assert len(windows) == InMemoryWindows.SWEEP_EVERY - 1
    assert await windows.hit("t:late", limit=1, window=60) is None  # the sweep's turn
    assert len(windows) == 1


def test_a_limit_of_zero_is_not_a_limiter() -> None:
    with pytest.raises(ValueError, match="positive"):
        RunRateLimit(0)


async def test_a_profile_of_one_process_has_no_shared_windows(tmp_path: Path) -> None:
    """The embedded backend offers no windows: the rate limit keeps them in its process."""
    async with open_embedded(tmp_path / "data") as backend:
        assert backend.rate_windows is None


async def test_redis_down_does_not_refuse_runs() -> None:
    from redis.asyncio import Redis

    unreachable = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        assert await RedisWindows(unreachable).hit("t:u", limit=1, window=60) is None
    finally:
        await unreachable.aclose()
