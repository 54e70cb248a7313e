"""Two service processes on one PostgreSQL: 20 simultaneous runs on one thread give exactly
one answer and 19 × 409, and the thread holds exactly that one round; one process serves more
simultaneous runs on different threads than its saver pool has connections."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.test_server import free_port, wait_ready
from tests.support.postgres import fresh_schema
from threadkeeper.adapters.postgres import POOL_SIZE
from threadkeeper.adapters.postgres.ledger import TABLE as LEDGER

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

    async def send(index: int) -> tuple[int, dict[str, object], float]:
        async with httpx.AsyncClient(base_url=urls[index % 2], headers=HEADERS, timeout=120) as c:
            start = time.monotonic()
            response = await c.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": question}},
                headers={"Accept": "application/json"},
            )
            return response.status_code, response.json(), time.monotonic() - start

    results = await asyncio.gather(*(send(i) for i in range(20)))
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200] + [409] * 19, statuses
    answer, took = next((body, took) for status, body, took in results if status == 200)
    assert took >= 2.0, f"the run lasted {took:.2f} s: too short to overlap the others"
    running = {body.get("running_run_id") for status, body, _ in results if status == 409}
    assert running == {answer["run_id"]}, "every refusal names the one running run"

    async with httpx.AsyncClient(base_url=urls[1], headers=HEADERS, timeout=30) as client:
        page = (await client.get(f"/v1/threads/{thread}/messages")).json()
    assert [m["role"] for m in page["messages"]] == ["human", "ai"]

    with psycopg.connect(database) as conn:
        checkpoints = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id LIKE %s", (f"%:{thread}",)
        ).fetchone()
        runs = conn.execute(
            "SELECT run_id FROM tk_run_records WHERE thread_key LIKE %s", (f"%:{thread}",)
        ).fetchall()
        messages = conn.execute(
            f"SELECT count(*) FROM {LEDGER} WHERE thread_id LIKE %s", (f"%:{thread}",)
        ).fetchone()
    # one committed run: one run record, one checkpoint, its two messages stored once
    assert runs == [(answer["run_id"],)]
    assert checkpoints == (1,)
    assert messages == (2,)


async def test_one_replica_runs_more_threads_at_once_than_its_saver_pool_has_connections(
    replicas: tuple[list[str], str],
) -> None:
    """Each run pins a connection for its advisory lock; those come from a pool of their own,
    so 25 runs in flight (more than the 20 saver/store connections) all finish."""
    urls, _ = replicas
    count = POOL_SIZE + 5
    question = "Is dental treatment covered by my health insurance?"

    async def send(client: httpx.AsyncClient, index: int) -> int:
        response = await client.post(
            f"/v1/threads/parallel-{index}/runs",
            json={"message": {"content": question}},
            headers={"Accept": "application/json"},
        )
        return response.status_code

    start = time.monotonic()
    async with httpx.AsyncClient(base_url=urls[0], headers=HEADERS, timeout=120) as client:
        statuses = await asyncio.gather(*(send(client, i) for i in range(count)))
    took = time.monotonic() - start
    assert statuses == [200] * count, statuses
    assert took < 25, f"{count} runs took {took:.1f} s: runs waited for connections"
