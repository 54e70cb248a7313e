"""A provider that hangs, fails or cuts its stream, through a real server process and a fake
OpenAI-compatible provider on loopback (real HTTP both ways).

Issue 9: with a provider that stopped answering, the thread answered 409 for minutes, a
``DELETE`` waited 30 s then 409, the SSE client saw nothing for 90 s and the first Ctrl-C did
not stop ``serve``. Now a model call has a deadline (``THREADKEEPER_MODEL_TIMEOUT_SECONDS``,
its whole stream included), is retried (``THREADKEEPER_MODEL_MAX_RETRIES``) and falls back
(``THREADKEEPER_MODEL_FALLBACK``); the run has a deadline (``THREADKEEPER_RUN_TIMEOUT_SECONDS``:
504 ``run-timeout``); a quiet stream gets keep-alive comments; one SIGTERM drains.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Servers
from tests.reliability.conftest import Measure
from tests.support.fake_openai import FakeProvider, fake_provider
from tests.support.servers import ProfileServer, profile_server, start_server

DENTAL = "Is dental treatment covered by my health insurance?"
CLAIM = "How do I file a claim?"


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with fake_provider(retry_after_ms=1) as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(provider: FakeProvider) -> Iterator[None]:
    provider.reset()
    yield
    provider.reset()  # releases requests a test left hanging


def model_env(provider: FakeProvider, **settings: str) -> dict[str, str]:
    return {
        "THREADKEEPER_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": provider.url,
        "OPENAI_API_KEY": "test-key",
        **settings,
    }


@pytest.fixture(scope="module")
def server(
    provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProfileServer]:
    """Model calls of 1 s at most, one retry, no fallback; keep-alives every 0.3 s."""
    env = model_env(
        provider,
        THREADKEEPER_MODEL_TIMEOUT_SECONDS="1",
        THREADKEEPER_MODEL_MAX_RETRIES="1",
        THREADKEEPER_RUN_TIMEOUT_SECONDS="60",
        THREADKEEPER_SSE_HEARTBEAT_SECONDS="0.3",
    )
    with profile_server("embedded", tmp_path_factory.mktemp("model-faults"), **env) as running:
        yield running


def post(server: ProfileServer, thread: str, content: str, **kw: Any) -> httpx.Response:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=120) as client:
        return client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": content}},
            headers={"Accept": "application/json"},
            **kw,
        )


def humans(server: ProfileServer, thread: str) -> list[str] | None:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        page = client.get(f"/v1/threads/{thread}/messages", params={"limit": 100})
    if page.status_code == 404:
        return None
    return [m["content"] for m in page.json()["messages"] if m["role"] == "human"]


def test_a_hung_provider_fails_the_run_and_frees_the_thread(
    server: ProfileServer, provider: FakeProvider, measure: Measure
) -> None:
    provider.set_mode("hang", times=2)  # the call and its one retry
    start = time.monotonic()
    failed = post(server, "hung", DENTAL)
    took = time.monotonic() - start
    assert failed.status_code == 502, failed.text
    assert failed.json()["type"] == "urn:threadkeeper:problem:model-unavailable"
    assert provider.count("hang") == 2, "one call, one retry, the client's own retries off"
    measure("provider", fault="hang", seconds_to_answer=round(took, 2), answer=failed.status_code)
    assert took < 30, f"{took:.1f} s: the deadline did not hold"
    assert humans(server, "hung") is None, "nothing of the run was stored"
    answered = post(server, "hung", DENTAL)  # the thread is free at once
    assert answered.status_code == 200, answered.text
    assert humans(server, "hung") == [DENTAL]


@pytest.mark.parametrize("fault", ["error_500", "cut", "hang_after"])
def test_a_failed_call_is_retried_once(
    server: ProfileServer, provider: FakeProvider, fault: Any, measure: Measure
) -> None:
    provider.set_mode(fault, times=1)
    start = time.monotonic()
    answered = post(server, f"retried-{fault}", DENTAL)
    measure(
        "provider",
        fault=f"{fault} once",
        seconds_to_answer=round(time.monotonic() - start, 2),
        answer=answered.status_code,
    )
    assert answered.status_code == 200, answered.text
    assert provider.count(fault) == 1
    assert provider.count("ok") >= 1, "the retry was answered"
    assert humans(server, f"retried-{fault}") == [DENTAL], "one round, stored once"


def stream(server: ProfileServer, thread: str, content: str) -> tuple[list[str], list[Any]]:
    """Raw SSE: (comment lines, events as (name, data))."""
    comments: list[str] = []
    events: list[Any] = []
    with (
        httpx.Client(base_url=server.url, headers=server.headers, timeout=120) as client,
        client.stream(
            "POST", f"/v1/threads/{thread}/runs", json={"message": {"content": content}}
        ) as response,
    ):
        assert response.status_code == 200
        name = "message"
        for line in response.iter_lines():
            if line.startswith(":"):
                comments.append(line)
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line[5:])))
    return comments, events


def test_a_quiet_stream_gets_keep_alives_and_a_retry_is_announced(
    server: ProfileServer, provider: FakeProvider
) -> None:
    provider.set_mode("hang_after", times=1)  # a few tokens, then silence until the deadline
    comments, events = stream(server, "quiet", DENTAL)
    assert comments, "keep-alive comments while the provider was silent"
    assert all(c.startswith(": keep-alive") for c in comments)
    kinds = [name for name, _ in events]
    assert kinds[0] == "metadata"
    assert kinds[-1] == "end", kinds
    retry = [data for name, data in events if name == "custom" and data.get("stage") == "model"]
    assert retry
    assert retry[0]["status"] == "retry"
    assert humans(server, "quiet") == [DENTAL]


@pytest.fixture
def short_runs(provider: FakeProvider, tmp_path: Path) -> Iterator[ProfileServer]:
    """Model calls may take 30 s, the whole run 2 s."""
    env = model_env(
        provider,
        THREADKEEPER_MODEL_TIMEOUT_SECONDS="30",
        THREADKEEPER_MODEL_MAX_RETRIES="0",
        THREADKEEPER_RUN_TIMEOUT_SECONDS="2",
    )
    with profile_server("embedded", tmp_path, **env) as running:
        yield running


def test_a_run_past_its_deadline_is_504_and_stores_nothing(
    short_runs: ProfileServer, provider: FakeProvider, measure: Measure
) -> None:
    provider.set_mode("hang")
    start = time.monotonic()
    timed_out = post(short_runs, "deadline", DENTAL)
    measure(
        "provider",
        fault="hang past the run deadline (2 s)",
        seconds_to_answer=round(time.monotonic() - start, 2),
        answer=timed_out.status_code,
    )
    assert timed_out.status_code == 504, timed_out.text
    assert timed_out.json()["type"] == "urn:threadkeeper:problem:run-timeout"
    _, events = stream(short_runs, "deadline", DENTAL)
    assert events[-1][0] == "error"
    assert events[-1][1]["type"] == "urn:threadkeeper:problem:run-timeout"
    assert humans(short_runs, "deadline") is None
    provider.set_mode("ok")
    assert post(short_runs, "deadline", CLAIM).status_code == 200, "the thread is free at once"
    assert humans(short_runs, "deadline") == [CLAIM]


def test_a_fallback_model_answers_when_the_provider_does_not(
    provider: FakeProvider, tmp_path: Path
) -> None:
    env = model_env(
        provider,
        THREADKEEPER_MODEL_TIMEOUT_SECONDS="1",
        THREADKEEPER_MODEL_MAX_RETRIES="0",
        THREADKEEPER_MODEL_FALLBACK="builtin",
    )
    provider.set_mode("error_500")
    with profile_server("embedded", tmp_path, **env) as server:
        answered = post(server, "fallback", DENTAL)
        assert answered.status_code == 200, answered.text
        assert answered.json()["status"] == "answered"
        assert provider.count("error_500") >= 1
        assert humans(server, "fallback") == [DENTAL]


@pytest.mark.parametrize("finishes", [True, False])
def test_one_sigterm_drains_and_exits(
    provider: FakeProvider, tmp_path: Path, measure: Measure, *, finishes: bool
) -> None:
    """Runs in flight get the grace period; the rest are cancelled (their threads unchanged)
    and the process exits after one SIGTERM, without a traceback."""
    env = model_env(
        provider,
        THREADKEEPER_SHUTDOWN_GRACE_SECONDS="3",
        THREADKEEPER_MODEL_MAX_RETRIES="0",
    )
    provider.delay = 0.1  # "slow": ~2 s for the answer, inside the grace period
    provider.set_mode("slow" if finishes else "hang")
    result: dict[str, Any] = {}
    with start_server("embedded", tmp_path / "data", Servers(), None, **env) as server:

        def call() -> None:
            try:
                result["response"] = post(server, "draining", DENTAL)
            except httpx.HTTPError as exc:
                result["error"] = exc

        caller = threading.Thread(target=call)
        caller.start()
        provider.wait_for_requests(1, timeout=30)  # the run is at the model
        start = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        during: dict[str, Any] = {}
        if not finishes:  # the run holds the drain open for its grace: ask meanwhile
            time.sleep(0.5)
            with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as c:
                during["run"] = c.post(
                    "/v1/threads/late/runs",
                    json={"message": {"content": DENTAL}},
                    headers={"Accept": "application/json"},
                )
                during["ready"] = c.get("/health/ready")
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("one SIGTERM did not stop the server")
        took = time.monotonic() - start
        measure(
            "shutdown",
            run="finishes within the grace" if finishes else "hangs",
            grace_seconds=3,
            seconds_to_exit=round(took, 2),
        )
        caller.join(timeout=30)
        provider.release()
        output = server.output()
    assert "Traceback" not in output, output[-2000:]
    provider.set_mode("ok")
    with start_server("embedded", tmp_path / "data", Servers(), None, **env) as again:
        stored = humans(again, "draining")
    if finishes:
        assert result["response"].status_code == 200, result
        assert stored == [DENTAL]
    else:
        assert "error" in result or result["response"].status_code >= 500, result
        assert took >= 2.5, f"exited after {took:.1f} s, before the grace period"
        assert stored is None, "the cancelled run left its thread unchanged"
        # issue 29, item 8: arriving during the drain is answered, not refused
        assert during["run"].status_code == 503, during["run"].text
        assert during["run"].json()["type"].endswith(":unavailable")
        assert during["ready"].status_code == 503, during["ready"].text
        assert during["ready"].json()["checks"]["service"] == "shutting down"
