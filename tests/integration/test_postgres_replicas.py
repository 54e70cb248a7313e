"""Two service processes on one PostgreSQL: 20 simultaneous runs on one thread give exactly
one answer and 19 × 409, and the thread's checkpoint history stays linear."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.test_server import free_port, wait_ready
from tests.support.postgres import fresh_schema

pytestmark = pytest.mark.integration

TOKEN = "replica-token"
HEADERS = {
    "X-Tenant-Id": "acme-insurance",
    "X-User-Id": "replica-user",
    "Authorization": f"Bearer {TOKEN}",
}


def replica(url: str, port: int, tmp: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "THREADKEEPER_PROFILE": "postgres",
        "THREADKEEPER_POSTGRES_URL": url,
        "THREADKEEPER_SERVICE_TOKEN": TOKEN,
        "THREADKEEPER_MODEL_TOKEN_DELAY_MS": "40",  # a run lasts >= 2 s
        "THREADKEEPER_DATA_DIR": str(tmp),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "threadkeeper.app.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    with fresh_schema() as url:
        processes, urls = [], []
        try:
            for index in range(2):
                port = free_port()
                processes.append(replica(url, port, tmp_path / str(index)))
                urls.append(f"http://127.0.0.1:{port}")
            for base, process in zip(urls, processes, strict=True):
                wait_ready(base, process)
            yield urls, url
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)


async def test_twenty_simultaneous_runs_on_two_replicas(
    replicas: tuple[list[str], str],
) -> None:
    urls, database = replicas
    thread = "contended"
    question = "Is dental treatment covered by my health insurance? " * 3

    async def send(index: int) -> tuple[int, dict[str, object]]:
        async with httpx.AsyncClient(base_url=urls[index % 2], headers=HEADERS, timeout=120) as c:
            response = await c.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": question}},
                headers={"Accept": "application/json"},
            )
            return response.status_code, response.json()

    results = await asyncio.gather(*(send(i) for i in range(20)))
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] + [409] * 19, statuses
    answer = next(body for status, body in results if status == 200)
    running = {body.get("running_run_id") for status, body in results if status == 409}
    assert running == {answer["run_id"]}, "every refusal names the one running run"

    async with httpx.AsyncClient(base_url=urls[1], headers=HEADERS, timeout=30) as client:
        page = (await client.get(f"/v1/threads/{thread}/messages")).json()
    assert [m["role"] for m in page["messages"]] == ["human", "ai"]

    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
            "WHERE thread_id LIKE %s AND checkpoint_ns = ''",
            (f"%:{thread}",),
        ).fetchall()
    children: dict[object, int] = {}
    for _, parent in rows:
        children[parent] = children.get(parent, 0) + 1
    assert rows, "the answered run was committed"
    assert max(children.values()) == 1, "no checkpoint has two children: the history is linear"
