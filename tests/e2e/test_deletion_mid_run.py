"""Deleting a thread, or erasing its user, while a run is in flight on it. A real server
process per profile, because only real HTTP gives two requests in flight at once.

- ``DELETE /v1/threads/{id}`` waits for the run to commit, then removes everything: the run
  cannot write the thread back after the 204 (deletions hold the thread's run lock).
- ``DELETE /v1/users/{id}`` first revokes the claims of the user's runs in flight: such a run
  stores nothing (it ends 409 ``claim-lost``), also when it is the *first* run of a new thread
  that nothing stored names yet (issue 9: that thread used to survive the erasure)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import PROFILES, TOKEN, Servers, flush
from tests.e2e.test_server import free_port, serve, wait_ready
from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import private_redis

HEADERS = {"X-Tenant-Id": "acme-insurance", "X-User-Id": "deleting-user"}
QUESTION = "Is dental treatment covered by my health insurance?"


@pytest.fixture(params=PROFILES)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    profile = str(request.param)
    env = {"THREADKEEPER_PROFILE": profile, "THREADKEEPER_MODEL_TOKEN_DELAY_MS": "30"}
    headers = dict(HEADERS)
    with (
        fresh_schema() if profile == "postgres" else _nothing() as postgres_url,
        private_redis() if profile == "redis-mysql" else _nothing() as redis,
        fresh_database() if profile == "redis-mysql" else _nothing() as mysql_url,
    ):
        if profile != "embedded":
            servers = Servers(
                postgres_url=postgres_url,
                redis_url=redis.url if redis is not None else None,
                mysql_url=mysql_url,
            )
            env.update(servers.env(), THREADKEEPER_SERVICE_TOKEN=TOKEN)
            headers["Authorization"] = f"Bearer {TOKEN}"
            if redis is not None:
                flush(redis.url)
        port = free_port()
        process = serve(tmp_path / "data", port, **env)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            yield url, headers
        finally:
            process.terminate()
            process.wait(timeout=30)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("deletion", ["thread", "user", "user-new-thread"])
async def test_a_deletion_mid_run_waits_for_the_run_and_leaves_nothing(
    server: tuple[str, dict[str, str]], deletion: str
) -> None:
    url, headers = server
    thread = f"t-{deletion}"
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:

        async def run() -> httpx.Response:
            return await client.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": QUESTION}},
                headers={"Accept": "application/json"},
            )

        if deletion == "user":  # a thread with a stored round, and a run in flight on it
            first = await run()
            assert first.status_code == 200
        running = asyncio.create_task(run())
        await asyncio.sleep(0.5)  # the answer streams for seconds (30 ms per token)
        probe = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": "probe"}},
            headers={"Accept": "application/json"},
        )
        assert probe.status_code == 409, "the run was not holding the thread"
        start = time.monotonic()
        if deletion == "thread":
            deleted = await client.delete(f"/v1/threads/{thread}")
            assert deleted.status_code == 204
        else:
            deleted = await client.delete(f"/v1/users/{headers['X-User-Id']}")
            assert deleted.status_code == 200
            stored_before = 1 if deletion == "user" else 0  # the run in flight stores nothing
            assert deleted.json()["threads"] == stored_before
            assert deleted.json()["messages"] == 2 * stored_before
        waited = time.monotonic() - start
        answered = await running
        if deletion == "thread":
            assert answered.status_code == 200, answered.text  # committed, then deleted
            assert answered.json()["status"] == "answered"
        else:
            assert answered.status_code == 409, answered.text
            assert answered.json()["type"].endswith(":claim-lost")
        assert waited > 0.2, f"the deletion answered in {waited:.2f} s, without waiting"
        gone = await client.get(f"/v1/threads/{thread}/messages")
        assert gone.status_code == 404, gone.text
