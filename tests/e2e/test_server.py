"""The real server process over real HTTP: streaming, one run per thread, dropped streams,
and one process per embedded data directory."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

HEADERS = {"X-Tenant-Id": "acme-insurance", "X-User-Id": "e2e-user"}
QUESTION = "Is dental treatment covered by my health insurance?"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(data_dir: Path, port: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "threadkeeper.app.cli", "serve", "--port", str(port)],
        env={**os.environ, "THREADKEEPER_DATA_DIR": str(data_dir), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_ready(url: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"server exited: {process.stdout.read() if process.stdout else ''}"
            )
        try:
            if httpx.get(f"{url}/health/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("server did not become ready")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data_dir = tmp_path_factory.mktemp("data")
    port = free_port()
    process = serve(data_dir, port, THREADKEEPER_MODEL_TOKEN_DELAY_MS="40")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url, data_dir
    finally:
        process.terminate()
        process.wait(timeout=30)


def stream_run(url: str, thread: str, content: str) -> tuple[int, list[tuple[str, Any]]]:
    body = {"message": {"content": content}}
    with (
        httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client,
        connect_sse(client, "POST", f"/v1/threads/{thread}/runs", json=body) as source,
    ):
        if source.response.status_code != 200:
            source.response.read()
            return source.response.status_code, [("problem", source.response.json())]
        return 200, [(e.event, json.loads(e.data)) for e in source.iter_sse()]


def test_a_run_streams_over_http(server: tuple[str, Path]) -> None:
    url, _ = server
    status, events = stream_run(url, f"e2e-{uuid.uuid4().hex[:8]}", QUESTION)
    assert status == 200
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "metadata"
    assert kinds[-1] == "end"
    assert kinds.count("messages") > 3, "tokens arrive as they are produced"
    end = events[-1][1]
    assert end["status"] == "answered"
    assert "".join(d["delta"] for k, d in events if k == "messages") == end["message"]["content"]


def test_simultaneous_runs_on_one_thread_one_answer_one_409(server: tuple[str, Path]) -> None:
    url, _ = server
    thread = f"e2e-{uuid.uuid4().hex[:8]}"
    results: list[tuple[int, list[tuple[str, Any]]]] = []
    first_started = threading.Event()

    def first() -> None:
        body = {"message": {"content": QUESTION}}
        with (
            httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client,
            connect_sse(client, "POST", f"/v1/threads/{thread}/runs", json=body) as source,
        ):
            events = []
            for event in source.iter_sse():
                events.append((event.event, json.loads(event.data)))
                first_started.set()
            results.append((source.response.status_code, events))

    worker = threading.Thread(target=first)
    worker.start()
    assert first_started.wait(30)
    second_status, second = stream_run(url, thread, "And orthodontics?")
    worker.join(60)
    assert second_status == 409
    problem = second[0][1]
    running = results[0][1][0][1]["run_id"]
    assert problem["running_run_id"] == running
    assert results[0][0] == 200
    assert results[0][1][-1][0] == "end"


def test_a_dropped_stream_leaves_the_thread_as_it_was(server: tuple[str, Path]) -> None:
    url, _ = server
    thread = f"e2e-{uuid.uuid4().hex[:8]}"
    assert stream_run(url, thread, QUESTION)[0] == 200
    body = {"message": {"content": "What does maternity cover include?"}}
    with (
        httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client,
        connect_sse(client, "POST", f"/v1/threads/{thread}/runs", json=body) as source,
    ):
        for event in source.iter_sse():
            if event.event == "messages":
                break  # the client goes away mid-answer
    dropped_at = time.monotonic()
    probe = {"message": {"content": "How do I file a claim?"}}
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
        while True:  # the thread's lock is free within one second
            with client.stream("POST", f"/v1/threads/{thread}/runs", json=probe) as response:
                status, waited = response.status_code, time.monotonic() - dropped_at
                response.read()
            if status != 409:
                break
            assert waited < 1.0, "the dropped run still holds the thread after 1 s"
            time.sleep(0.05)
        assert status == 200
        assert waited < 1.0
        page = client.get(f"/v1/threads/{thread}/messages").json()
    humans = [m["content"] for m in page["messages"] if m["role"] == "human"]
    assert humans == [QUESTION, "How do I file a claim?"], "the dropped round left nothing"
    assert len(page["messages"]) == 4


def test_an_idle_connection_outlives_the_clients_pool(server: tuple[str, Path]) -> None:
    """A client pool (httpx: 5 s) or a load balancer (60 s) reuses an idle connection until
    its own idle timeout; the server must not close first, or a run sent as it closes gets no
    response at all (uvicorn's default closed at 5 s: a benchmark's run failed that way)."""
    url, _ = server
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("GET", "/health/live")
        first = connection.getresponse()
        assert first.status == 200
        first.read()
        time.sleep(7)  # past uvicorn's 5 s; far inside THREADKEEPER_HTTP_KEEPALIVE_SECONDS
        body = json.dumps({"message": {"content": QUESTION}})
        connection.request(
            "POST",
            f"/v1/threads/idle-{uuid.uuid4().hex}/runs",
            body=body,
            headers={**HEADERS, "Accept": "application/json", "Content-Type": "application/json"},
        )
        second = connection.getresponse()  # before: BrokenPipeError or RemoteDisconnected
        assert second.status == 200, second.read()
        assert json.loads(second.read())["message"]["content"]
    finally:
        connection.close()


def test_a_second_process_on_the_same_data_dir_refuses(server: tuple[str, Path]) -> None:
    _, data_dir = server
    process = serve(data_dir, free_port())
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "in use" in output


def test_no_thread_or_user_id_in_the_server_log(tmp_path: Path) -> None:
    """uvicorn's access lines name each request by its route (``route_of``), and
    threadkeeper's own lines name a thread by ``log_name``: a user id or thread id used in a
    run, a failed run and a read never reaches the log (the access lines showed the path)."""
    secret = "zq7secretvalue"
    port = free_port()
    process = serve(
        tmp_path / "data",
        port,
        THREADKEEPER_MODEL_TOKEN_DELAY_MS="200",
        THREADKEEPER_RUN_TIMEOUT_SECONDS="0.5",
        THREADKEEPER_LOG_FORMAT="json",
    )
    url = f"http://127.0.0.1:{port}"
    headers = {**HEADERS, "X-User-Id": f"{secret}-user"}
    try:
        wait_ready(url, process)
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            late = client.post(
                f"/v1/threads/{secret}-thread/runs",
                json={"message": {"content": QUESTION}},
                headers={"Accept": "application/json"},
            )
            assert late.status_code == 504
            assert client.get(f"/v1/threads/{secret}-thread/messages").status_code == 404
            assert client.get(f"/v1/users/{secret}-user/memory").status_code == 200
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    access = [line["message"] for line in lines if line["logger"] == "uvicorn.access"]
    assert any('"POST /v1/threads/{id}/runs HTTP/1.1" 504' in m for m in access), access
    assert any("run did not finish" in line["message"] for line in lines)
    assert secret not in output
