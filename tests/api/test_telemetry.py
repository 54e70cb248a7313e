"""One OpenTelemetry stack on every profile: a run, a tool call, a 409, a timeout, a streamed
run, a summary fold (where the profile summarizes), a compaction and a cold start (redis-mysql)
are seen as spans (in-memory exporter) and as metrics (in-memory reader beside the Prometheus
reader ``/metrics`` serves) — and no thread key, user id or message content reaches a span, a
metric or a log line."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace import ReadableSpan

from tests.api.conftest import TENANT, USER, AppFactory, Servers, flush, run
from tests.support import metrics, tracing
from threadkeeper.app.runs import execute

Client = AsyncTestClient[Litestar]
DETAILS = "Please give me the full details of the dental cover"
QUESTIONS = [
    "Is dental treatment covered by my health insurance?",
    "Does my policy cover physiotherapy sessions?",
    "How do I file a claim for a hospital stay?",
    "What is the waiting period for maternity cover?",
    "Can I add my spouse to my health insurance?",
    "Is emergency treatment abroad covered?",
]


@pytest.fixture(scope="module", autouse=True)
def _tracing() -> None:
    tracing.install()


@pytest.fixture
async def open_client(make_app: AppFactory, auth: dict[str, str]) -> Any:
    opened: list[AsyncTestClient[Litestar]] = []

    async def open_one(**overrides: Any) -> Client:
        client = AsyncTestClient(make_app(**overrides), timeout=60)
        await client.__aenter__()
        client.headers.update(auth)
        opened.append(client)
        return client

    yield open_one
    for client in reversed(opened):
        await client.__aexit__(None, None, None)


def trace_of(span: ReadableSpan) -> list[ReadableSpan]:
    trace_id = span.context.trace_id
    return [s for s in tracing.EXPORTER.get_finished_spans() if s.context.trace_id == trace_id]


def run_spans(run_id: str) -> list[ReadableSpan]:
    """The spans of the trace whose ``invoke_agent`` span is run ``run_id``."""
    (agent,) = [
        s
        for s in tracing.EXPORTER.get_finished_spans()
        if s.name.startswith("invoke_agent")
        and (s.attributes or {}).get("threadkeeper.run_id") == run_id
    ]
    return trace_of(agent)


def service_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The service's log records (not the test client's: httpx logs each URL it asks for)."""
    return [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]


class Delta:
    """Metric values before something happens, and what it added."""

    def __init__(self, name: str, **attributes: Any) -> None:
        self.name, self.attributes = name, attributes
        self.before = metrics.total(name, **attributes)

    @property
    def added(self) -> float:
        return metrics.total(self.name, **self.attributes) - self.before


async def test_a_run_with_a_tool_call(open_client: Any, profile: str) -> None:
    client = await open_client()
    runs = Delta("threadkeeper.runs", profile=profile, status="answered", mode="json")
    duration = Delta("threadkeeper.run.duration", profile=profile, status="answered")
    calls = Delta("gen_ai.client.operation.duration", **{"gen_ai.operation.name": "chat"})
    inputs = Delta("gen_ai.client.token.usage", **{"gen_ai.token.type": "input"})
    outputs = Delta("gen_ai.client.token.usage", **{"gen_ai.token.type": "output"})
    after = Delta("threadkeeper.window.tokens", profile=profile, stage="after_trim")
    before = Delta("threadkeeper.window.tokens", profile=profile, stage="before_trim")
    held = Delta("threadkeeper.lock.wait", profile=profile, outcome="held")
    http = Delta("http.server.duration", **{"http.target": "/v1/threads/{thread_id}/runs"})

    body = await run(client, f"tool-{uuid.uuid4().hex[:8]}", DETAILS)

    assert body["status"] == "answered"
    assert runs.added == 1
    assert duration.added == 1
    assert calls.added == 2, "the tool call, then the answer"
    assert inputs.added == 2
    assert outputs.added == 2
    assert after.added == 2
    assert before.added == 2
    assert held.added == 1
    assert http.added == 1
    names = [s.name for s in run_spans(body["run_id"])]
    assert "execute_tool fetch_faq_document" in names
    assert names.count("invoke_agent threadkeeper") == 1
    assert len([n for n in names if n.startswith("chat ")]) == 2
    assert "threadkeeper.commit" in names

    exposition = (await client.get("/metrics")).text
    for family in (
        "threadkeeper_runs_total",
        "threadkeeper_run_duration_seconds_bucket",
        "gen_ai_client_operation_duration_seconds_bucket",
        "gen_ai_client_token_usage_bucket",
        "threadkeeper_window_tokens_bucket",
        "threadkeeper_lock_wait_seconds_bucket",
        "http_server_duration_milliseconds_bucket",
    ):
        assert family in exposition, family


async def test_a_streamed_run_times_its_first_token_and_chunk(
    open_client: Any, profile: str
) -> None:
    client = await open_client()
    first_token = Delta("threadkeeper.run.time_to_first_token", profile=profile)
    first_chunk = Delta("gen_ai.client.operation.time_to_first_chunk")
    response = await client.post(
        f"/v1/threads/sse-{uuid.uuid4().hex[:8]}/runs",
        json={"message": {"content": QUESTIONS[0]}},
        headers={"Accept": "text/event-stream"},
    )
    assert response.status_code == 200
    assert "event: end" in response.text
    run_id = json.loads(response.text.split("data:", 1)[1].split("\n", 1)[0])["run_id"]
    assert first_token.added == 1
    assert first_chunk.added >= 1
    chats = [s for s in run_spans(run_id) if s.name.startswith("chat ")]
    assert any("gen_ai.response.time_to_first_chunk" in (s.attributes or {}) for s in chats)


async def _hold(app: Litestar, key: str, held: threading.Event, release: threading.Event) -> None:
    """Hold thread ``key``'s run lock (as another run — on another replica, say — would) until
    ``release``; runs in the app's own event loop."""
    service = await app.state.container.service()
    tenant, user, _ = key.split(":")
    async with service.backend.lock.hold(key, "held-by-test", tenant_id=tenant, user_id=user):
        held.set()
        await asyncio.to_thread(release.wait, 120)


async def test_a_busy_thread_is_409_and_counted(open_client: Any, profile: str) -> None:
    client = await open_client()
    thread = f"busy-{uuid.uuid4().hex[:8]}"
    busy = Delta("threadkeeper.runs", profile=profile, status="thread-busy")
    refused = Delta("threadkeeper.lock.wait", profile=profile, outcome="busy")
    held, release = threading.Event(), threading.Event()
    app = client.app
    holder = client.blocking_portal.start_task_soon(
        _hold, app, f"{TENANT}:{USER}:{thread}", held, release
    )
    try:
        assert await asyncio.to_thread(held.wait, 60)
        second = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": QUESTIONS[2]}},
            headers={"Accept": "application/json"},
        )
        assert second.status_code == 409, second.text
    finally:
        release.set()
        await asyncio.to_thread(holder.result, 60)
    assert busy.added == 1
    assert refused.added == 1
    body = await run(client, thread, QUESTIONS[2])  # released: the thread takes runs again
    assert body["status"] == "answered"


async def test_a_run_past_its_deadline_is_504_and_counted(
    open_client: Any, profile: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = await open_client(model_token_delay_ms=200.0, run_timeout_seconds=0.5)
    timeouts = Delta("threadkeeper.runs", profile=profile, status="run-timeout")
    durations = Delta("threadkeeper.run.duration", profile=profile, status="run-timeout")
    thread = f"slow-{uuid.uuid4().hex[:8]}"
    tracing.EXPORTER.clear()
    with caplog.at_level(logging.INFO):
        response = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": QUESTIONS[3]}},
            headers={"Accept": "application/json"},
        )
    assert response.status_code == 504, response.text
    assert timeouts.added == 1
    assert durations.added == 1

    def failed() -> list[ReadableSpan]:  # the span ends once the thread is released
        return [
            s
            for s in tracing.EXPORTER.get_finished_spans()
            if s.name.startswith("invoke_agent")
            and (s.attributes or {}).get("threadkeeper.profile") == profile
            and any((e.attributes or {}).get("exception.type") == "RunTimeout" for e in s.events)
        ]

    for _ in range(600):
        if failed():
            break
        await asyncio.sleep(0.05)
    assert failed(), "the run's span records its failure"
    logged = "\n".join(r.getMessage() for r in service_records(caplog))
    assert thread not in logged, "a thread key (its user id) never reaches a log line"


async def test_a_summary_fold_is_counted_where_the_profile_summarizes(
    open_client: Any, profile: str
) -> None:
    if profile == "redis-mysql":
        client = await open_client(
            hooks="truncate_tool_results,summarize,compact",
            summary_after_turns=2,
            token_budget=900,
        )
    else:
        client = await open_client(summary_after_turns=2, token_budget=900)
    folds = Delta("threadkeeper.summary.folds", profile=profile)
    compactions = Delta("threadkeeper.compactions", profile=profile)
    thread = f"fold-{uuid.uuid4().hex[:8]}"
    for question in QUESTIONS * 2:
        await run(client, thread, question)
    assert folds.added >= 1
    if profile == "redis-mysql":
        assert compactions.added >= 1, "redis-mysql compacts its checkpoints"
    else:
        assert compactions.added == 0, "the checkpoints are the record: never compacted"
    compacted = [
        s
        for s in tracing.EXPORTER.get_finished_spans()
        if s.name.startswith("chat ") and (s.attributes or {}).get("threadkeeper.compacted")
    ]
    assert compacted, "a call shown a summary is marked compacted"


@pytest.mark.integration
async def test_a_cold_start_is_counted_on_redis_mysql(
    open_client: Any, profile: str, database: Servers | None
) -> None:
    if profile != "redis-mysql":
        pytest.skip("only redis-mysql restores a thread from its archive")
    assert database is not None
    assert database.redis_url is not None
    client = await open_client()
    cold = Delta("threadkeeper.cold_starts", profile=profile)
    thread = f"cold-{uuid.uuid4().hex[:8]}"
    await run(client, thread, QUESTIONS[0])
    assert cold.added == 0
    flush(database.redis_url)  # the checkpoints are gone, the archive is not
    await run(client, thread, QUESTIONS[1])
    assert cold.added == 1


SECRET = "zq7secretvalue"


async def test_no_thread_key_user_id_or_content_leaves_the_process(
    make_app: AppFactory, auth: dict[str, str], profile: str, caplog: pytest.LogCaptureFixture
) -> None:
    tracing.EXPORTER.clear()
    thread = f"{SECRET}-thread"
    user = f"{SECRET}-user"
    headers = {**auth, "X-User-Id": user}
    # threadkeeper's own records at every level; drivers' DEBUG records show SQL parameters
    # (docs/operations.md: run them at INFO or above)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="threadkeeper")
    async with AsyncTestClient(make_app(), timeout=60) as client:
        client.headers.update(headers)
        await run(client, thread, f"{DETAILS} {SECRET}-content")
        await client.get(f"/v1/threads/{thread}/messages")
        await client.get(f"/v1/users/{user}/memory")
        exposition = (await client.get("/metrics")).text
    async with AsyncTestClient(
        make_app(model_token_delay_ms=200.0, run_timeout_seconds=0.5), timeout=60
    ) as client:
        client.headers.update(headers)
        late = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": f"{SECRET}-late"}},
            headers={"Accept": "application/json"},
        )
        assert late.status_code == 504
    await asyncio.sleep(0)
    spans = tracing.EXPORTER.get_finished_spans()
    assert spans
    for span in spans:
        assert SECRET not in span.to_json(), span.name
    assert SECRET not in json.dumps(metrics.all_attributes(), default=str)
    assert SECRET not in exposition
    for record in service_records(caplog):
        assert SECRET not in record.getMessage(), record.name
    assert TENANT  # tenants may be named (they are the operator's customers, not people)


async def test_deletions_and_erasures_are_counted(
    make_app: AppFactory, auth: dict[str, str]
) -> None:
    requested = Delta("threadkeeper.deletions", reason="request")
    erased = Delta("threadkeeper.deletions", reason="erasure")
    retention = Delta("threadkeeper.deletions", reason="retention")
    erasures = Delta("threadkeeper.erasures")
    user = f"erased-{uuid.uuid4().hex[:8]}"
    app = make_app(retention_days=30, retention_sweep_minutes=60)
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update({**auth, "X-User-Id": user})
        for name in ("a", "b", "c", "d"):
            await run(client, name, QUESTIONS[0])
        assert (await client.delete("/v1/threads/a")).status_code == 204
        assert (await client.delete("/v1/threads/a")).status_code == 204  # gone: not counted
        sweeper = app.state.sweeper
        sweeper.older_than = timedelta(0)
        swept = await asyncio.to_thread(client.blocking_portal.call, sweeper.run_once)
        assert swept.deleted.threads >= 3  # b, c, d (and any other idle thread)
        sweeper.older_than = timedelta(days=30)
        await run(client, "e", QUESTIONS[0])
        await run(client, "f", QUESTIONS[0])
        assert (await client.delete(f"/v1/users/{user}")).status_code == 200
    assert requested.added == 1
    assert retention.added == swept.deleted.threads
    assert erased.added == 2
    assert erasures.added == 1


async def test_each_round_records_its_bytes_and_its_threads_storage(
    open_client: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute, "WEIGH_EVERY_SECONDS", 0.0)  # every round
    client = await open_client()
    written = Delta("threadkeeper.round.bytes", profile=profile, kind="run_records")
    weighed = Delta("threadkeeper.thread.bytes", profile=profile, kind="run_records")
    weighed_sum = metrics.values_sum(
        "threadkeeper.thread.bytes", profile=profile, kind="run_records"
    )
    thread = f"weighed-{uuid.uuid4().hex[:8]}"
    await run(client, thread, QUESTIONS[0])
    assert written.added == 1, "the round's own bytes, counted as it committed"
    for _ in range(600):  # weighed once the caller has its answer
        if weighed.added:
            break
        await asyncio.sleep(0.05)
    assert weighed.added == 1
    storage = (await client.get(f"/v1/threads/{thread}/storage")).json()
    sample = metrics.values_sum("threadkeeper.thread.bytes", profile=profile, kind="run_records")
    assert sample - weighed_sum == storage["bytes"]["run_records"] > 0
