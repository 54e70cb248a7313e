"""The redis-mysql profile as real server processes over real HTTP: one run per thread across
replicas (a Redis lock, not a per-process one), a dropped stream leaves nothing in the MySQL
archive and frees the thread within a second, and a process killed mid-run blocks its thread
for at most the lock's TTL.

Every test has its own Redis Stack (``private_redis``) and a fresh migrated MariaDB database;
the shared Redis on 6380 and the MariaDB server itself are never touched.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from httpx_sse import connect_sse

from tests.e2e.test_server import free_port, wait_ready
from tests.support.mysql import fresh_database, query
from tests.support.redis_stack import PrivateRedis, private_redis

pytestmark = pytest.mark.integration

TOKEN = "redis-mysql-process-token"
TENANT = "acme-insurance"
USER = "process-user"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER, "Authorization": f"Bearer {TOKEN}"}
JSON = {"Accept": "application/json"}
QUESTION = "Is dental treatment covered by my health insurance?"
LOCK_PREFIX = "tk:run-lock:"


@dataclass
class Stack:
    redis: PrivateRedis
    mysql_url: str


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def stack() -> Iterator[Stack]:
    with private_redis() as server, fresh_database() as url:
        yield Stack(server, url)


def start(stack: Stack, tmp: Path, name: str, **env: str) -> Server:
    """One ``threadkeeper serve`` process on the stack (output to ``<tmp>/<name>.log``)."""
    port = free_port()
    data = tmp / name
    data.mkdir(parents=True, exist_ok=True)
    log = tmp / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "threadkeeper.app.cli", "serve", "--port", str(port)],
            env={
                **os.environ,
                "THREADKEEPER_PROFILE": "redis-mysql",
                "THREADKEEPER_REDIS_URL": stack.redis.url,
                "THREADKEEPER_MYSQL_URL": stack.mysql_url,
                "THREADKEEPER_SERVICE_TOKEN": TOKEN,
                "THREADKEEPER_DATA_DIR": str(data),
                **env,
            },
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Server(process, f"http://127.0.0.1:{port}", log)


def ready(*servers: Server) -> None:
    for server in servers:
        try:
            wait_ready(server.url, server.process)  # type: ignore[arg-type]
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {server.log.name} ---\n{server.output()}") from None


def stop(*servers: Server) -> None:
    for server in servers:
        if server.process.poll() is None:
            server.process.terminate()
    for server in servers:
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
        print(f"--- {server.log.name} (exit {server.process.returncode}) ---")
        print(server.output()[-4000:])


def lock_key(thread: str) -> str:
    return f"{LOCK_PREFIX}{TENANT}:{USER}:{thread}"


def archived(mysql_url: str, thread: str | None = None) -> list[tuple[str, str, str]]:
    """(run_id, role, content) of the archive rows (of one thread, or all), in order."""
    if thread is None:
        rows = query(mysql_url, "SELECT run_id, role, content FROM chat_messages ORDER BY seq")
    else:
        rows = query(
            mysql_url,
            "SELECT run_id, role, content FROM chat_messages WHERE thread_id = %s ORDER BY seq",
            (thread,),
        )
    return [(r[0], r[1], r[2]) for r in rows]


def messages(url: str, thread: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{url}/v1/threads/{thread}/messages",
        params={"limit": 100},
        headers=HEADERS,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


def round_of(body: dict[str, Any], question: str) -> list[tuple[str, str, str]]:
    """The two archive rows a completed run's body stands for."""
    run_id = body["run_id"]
    return [(run_id, "human", question), (run_id, "ai", body["message"]["content"])]


async def test_twenty_simultaneous_runs_on_two_replicas(stack: Stack, tmp_path: Path) -> None:
    # both replicas start at once on a Redis without indexes: they race to create them
    servers = [
        start(stack, tmp_path, f"replica-{i}", THREADKEEPER_MODEL_TOKEN_DELAY_MS="40")
        for i in range(2)
    ]
    try:
        ready(*servers)
        thread = f"contended-{uuid.uuid4().hex[:8]}"
        clients = [
            httpx.AsyncClient(base_url=servers[i % 2].url, headers=HEADERS, timeout=120)
            for i in range(20)
        ]
        began = time.monotonic()

        async def send(client: httpx.AsyncClient) -> tuple[int, str, dict[str, Any], float]:
            response = await client.post(
                f"/v1/threads/{thread}/runs", json={"message": {"content": QUESTION}}, headers=JSON
            )
            kind = response.headers.get("content-type", "")
            return response.status_code, kind, response.json(), time.monotonic()

        try:
            results = await asyncio.gather(*(send(c) for c in clients))
        finally:
            for client in clients:
                await client.aclose()

        statuses = sorted(status for status, *_ in results)
        assert statuses == [200] + [409] * 19, statuses
        _, _, answer, answered_at = next(r for r in results if r[0] == 200)
        refusals = [r for r in results if r[0] == 409]
        assert answered_at - began >= 2.0, "the answered run was slow enough to be contended"
        assert max(r[3] for r in refusals) < answered_at, "every refusal came while it ran"
        assert all(kind.startswith("application/problem+json") for _, kind, _, _ in refusals)
        running = {body.get("running_run_id") for _, _, body, _ in refusals}
        assert running == {answer["run_id"]}, "every refusal names the one running run"

        assert archived(stack.mysql_url) == round_of(answer, QUESTION), "exactly one round"
        for server in servers:  # both replicas read the same archive
            page = messages(server.url, thread)
            assert [(m["role"], m["content"]) for m in page] == [
                ("human", QUESTION),
                ("ai", answer["message"]["content"]),
            ]
        probe = redis.Redis.from_url(stack.redis.url)
        try:
            assert not probe.exists(lock_key(thread)), "the lock was released"
        finally:
            probe.close()
    finally:
        stop(*servers)


def test_a_dropped_stream_leaves_no_round_and_frees_the_thread(
    stack: Stack, tmp_path: Path
) -> None:
    server = start(stack, tmp_path, "single", THREADKEEPER_MODEL_TOKEN_DELAY_MS="20")
    try:
        ready(server)
        thread = f"dropped-{uuid.uuid4().hex[:8]}"
        with httpx.Client(base_url=server.url, headers=HEADERS, timeout=60) as client:
            first = client.post(
                f"/v1/threads/{thread}/runs", json={"message": {"content": QUESTION}}, headers=JSON
            )
            assert first.status_code == 200, first.text

        dropped_question = "What does maternity cover include?"
        dropped_run, deltas = None, 0
        with (
            httpx.Client(base_url=server.url, headers=HEADERS, timeout=60) as client,
            connect_sse(
                client,
                "POST",
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": dropped_question}},
            ) as source,
        ):
            assert source.response.status_code == 200
            for event in source.iter_sse():
                if event.event == "metadata":
                    dropped_run = event.json()["run_id"]
                elif event.event == "messages":
                    deltas += 1
                    break  # the client goes away mid-answer
                assert event.event not in ("end", "error"), event.data
        dropped_at = time.monotonic()
        assert dropped_run is not None
        assert deltas == 1, "the stream was dropped after the answer began"

        question = "How do I file a claim?"
        refused: list[float] = []
        with httpx.Client(base_url=server.url, headers=HEADERS, timeout=60) as client:
            while True:
                sent = time.monotonic() - dropped_at
                response = client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": question}},
                    headers=JSON,
                )
                if response.status_code != 409:
                    break
                assert response.json().get("running_run_id") == dropped_run
                assert sent <= 1.0, f"the dropped run still holds the thread {sent:.2f} s later"
                refused.append(sent)
                time.sleep(0.05)
        # a JSON answer arrives when the run ends; it was accepted when it was sent
        assert response.status_code == 200, response.text
        assert sent <= 1.0, f"accepted {sent:.2f} s after the disconnect"
        print(f"accepted {sent:.3f} s after the disconnect; {len(refused)} × 409 before")
        second = response.json()

        assert not [r for r in archived(stack.mysql_url) if r[0] == dropped_run], (
            "the dropped run archived nothing"
        )
        assert archived(stack.mysql_url, thread) == [
            *round_of(first.json(), QUESTION),
            *round_of(second, question),
        ]
        page = messages(server.url, thread)
        assert [m["content"] for m in page if m["role"] == "human"] == [QUESTION, question]
        assert len(page) == 4
    finally:
        stop(server)


def test_a_killed_process_blocks_the_thread_at_most_the_lock_ttl(
    stack: Stack, tmp_path: Path
) -> None:
    ttl = 3.0
    margin = 1.5
    doomed = start(
        stack,
        tmp_path,
        "doomed",
        THREADKEEPER_LOCK_TTL_SECONDS=str(int(ttl)),
        THREADKEEPER_MODEL_TOKEN_DELAY_MS="200",  # the dental answer takes ~20 s
    )
    survivor = start(
        stack,
        tmp_path,
        "survivor",
        THREADKEEPER_LOCK_TTL_SECONDS=str(int(ttl)),
        THREADKEEPER_MODEL_TOKEN_DELAY_MS="5",
    )
    probe = redis.Redis.from_url(stack.redis.url)
    worker: threading.Thread | None = None
    try:
        ready(doomed, survivor)
        thread = f"killed-{uuid.uuid4().hex[:8]}"
        key = lock_key(thread)
        outcome: list[object] = []

        def run_on_doomed() -> None:
            try:
                outcome.append(
                    httpx.post(
                        f"{doomed.url}/v1/threads/{thread}/runs",
                        json={"message": {"content": QUESTION}},
                        headers={**HEADERS, **JSON},
                        timeout=60,
                    )
                )
            except httpx.HTTPError as exc:
                outcome.append(exc)

        worker = threading.Thread(target=run_on_doomed, daemon=True)
        worker.start()
        deadline = time.monotonic() + 30
        while (token := probe.get(key)) is None:
            assert time.monotonic() < deadline, "the run never took the thread's lock"
            assert not outcome, f"the run ended before it was seen: {outcome}"
            time.sleep(0.02)
        taken_at = time.monotonic()
        dead_run = token.decode().split("|", 1)[0]
        assert 0 < probe.pttl(key) <= ttl * 1000, "the lock carries the configured TTL"

        time.sleep(ttl + 0.5 - (time.monotonic() - taken_at))
        assert probe.get(key) == token, "the lock outlives its TTL while the run lives"
        assert not outcome, "the run is still in flight when the process is killed"

        doomed.process.kill()
        doomed.process.wait(timeout=10)
        killed_at = time.monotonic()
        remaining = probe.pttl(key) / 1000
        assert remaining > 0, "the dead run's lock outlives its process"
        expires_at = killed_at + remaining
        worker.join(10)
        assert len(outcome) == 1, "the request to the killed process has ended"
        assert isinstance(outcome[0], httpx.HTTPError), "it ended without an answer"

        question = "How do I file a claim?"
        refused: list[float] = []
        with httpx.Client(base_url=survivor.url, headers=HEADERS, timeout=60) as client:
            while True:
                sent = time.monotonic()
                response = client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": question}},
                    headers=JSON,
                )
                if response.status_code != 409:
                    break
                assert response.json().get("running_run_id") == dead_run
                assert sent - killed_at <= ttl + margin, (
                    f"the thread is still blocked {sent - killed_at:.2f} s after the kill"
                )
                refused.append(sent - killed_at)
                time.sleep(0.1)
        assert response.status_code == 200, response.text
        after = sent - killed_at
        print(
            f"accepted {after:.2f} s after the kill (lock had {remaining:.2f} s left); "
            f"{len(refused)} × 409 before"
        )
        assert refused, "runs were refused while the dead run's lock lived"
        assert sent >= expires_at - 0.3, "accepted only once the dead run's lock expired"
        assert after <= ttl + margin

        answer = response.json()
        assert not [r for r in archived(stack.mysql_url) if r[0] == dead_run], (
            "the killed run archived nothing"
        )
        assert archived(stack.mysql_url, thread) == round_of(answer, question)
        page = messages(survivor.url, thread)
        assert [(m["role"], m["content"]) for m in page] == [
            ("human", question),
            ("ai", answer["message"]["content"]),
        ]
    finally:
        probe.close()
        stop(doomed, survivor)
        if worker is not None:
            worker.join(10)
