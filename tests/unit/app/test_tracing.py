"""OpenTelemetry traces of a run through the real embedded app: the request's server span, the
run under it, retrieval, each model call (GenAI conventions) and tool call, the commit — and
message content only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from tests.api.conftest import HEADERS, TENANT, USER, settings_for
from tests.support import tracing
from threadkeeper.app.application import create_app
from threadkeeper.app.telemetry import (
    CAPTURE_CONTENT,
    ConversationIds,
    configure_tracing,
    export_requested,
)

EXPORTER = tracing.EXPORTER
QUESTION = "Please give me the full details of the dental cover"


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """One SDK provider for the process (OpenTelemetry allows the global to be set once)."""
    tracing.install()
    current = trace.get_tracer_provider()
    assert isinstance(current, TracerProvider)


TRACE_ID_KEY = "trace-id-key-shared-by-replicas"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient[Litestar]]:
    settings = msgspec.structs.replace(
        settings_for("embedded", tmp_path, None), trace_id_key=TRACE_ID_KEY
    )
    async with AsyncTestClient(create_app(settings)) as client:
        client.headers.update(HEADERS)
        EXPORTER.clear()
        yield client


async def run(client: AsyncTestClient[Litestar], content: str) -> dict[str, object]:
    response = await client.post(
        "/v1/threads/traced/runs",
        json={"message": {"content": content}},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def spans(name_prefix: str) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name.startswith(name_prefix)]


async def test_a_run_is_traced_under_its_request(client: AsyncTestClient[Litestar]) -> None:
    body = await run(client, QUESTION)
    (server,) = [s for s in EXPORTER.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
    assert server.name == "POST /v1/threads/{thread_id}/runs"  # by route, not by path
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/v1/threads/{thread_id}/runs"
    assert "traced" not in str(server.attributes["http.target"])
    (run_span,) = spans("invoke_agent")
    assert run_span.name == "invoke_agent threadkeeper"
    assert run_span.kind is trace.SpanKind.INTERNAL
    assert run_span.parent is not None
    assert run_span.parent.span_id == server.context.span_id
    assert run_span.attributes is not None
    assert run_span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run_span.attributes["gen_ai.agent.name"] == "threadkeeper"
    conversation = ConversationIds(TRACE_ID_KEY).of(f"{TENANT}:{USER}:traced")
    assert run_span.attributes["gen_ai.conversation.id"] == conversation
    assert "threadkeeper.thread_id" not in run_span.attributes, "the thread by its HMAC only"
    assert run_span.attributes["threadkeeper.run_id"] == body["run_id"]
    assert run_span.attributes["threadkeeper.status"] == body["status"]
    assert run_span.attributes["threadkeeper.profile"] == "embedded"

    inside = [
        s for s in EXPORTER.get_finished_spans() if s.context.trace_id == run_span.context.trace_id
    ]
    names = [s.name for s in inside]
    assert "threadkeeper.retrieve" in names
    assert "threadkeeper.commit" in names
    assert "execute_tool fetch_faq_document" in names  # asked for details: the tool ran
    chats = spans("chat ")
    assert len(chats) == 2  # the tool call, then the answer
    for chat in chats:
        attributes = chat.attributes or {}
        assert chat.kind is trace.SpanKind.CLIENT
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"]
        assert attributes["gen_ai.response.model"] == attributes["gen_ai.request.model"]
        assert attributes["gen_ai.conversation.id"] == conversation
        assert int(str(attributes["gen_ai.usage.input_tokens"])) > 0
        assert attributes["threadkeeper.compacted"] is False, "two messages: nothing folded"
        assert chat.context.trace_id == run_span.context.trace_id
    reasons = [tuple((c.attributes or {})["gen_ai.response.finish_reasons"]) for c in chats]
    assert sorted(reasons) == [("stop",), ("tool_calls",)]
    (retrieve,) = spans("threadkeeper.retrieve")
    assert retrieve.attributes is not None
    assert retrieve.attributes["threadkeeper.retrieve.chunk_ids"]


async def test_no_content_and_no_user_id_by_default(
    client: AsyncTestClient[Litestar], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT, raising=False)
    await run(client, QUESTION)
    assert (await client.get(f"/v1/users/{USER}/memory")).status_code == 200
    servers = [s.name for s in EXPORTER.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
    assert "GET /v1/users/{user_id}/memory" in servers
    for span in EXPORTER.get_finished_spans():
        values = " ".join(str(v) for v in (span.attributes or {}).values())
        assert QUESTION not in values, span.name
        assert USER not in values, span.name
        assert "traced" not in values, span.name  # the thread id (and so its key)
        assert "gen_ai.input.messages" not in (span.attributes or {})


async def test_no_path_of_any_request_reaches_a_span(client: AsyncTestClient[Litestar]) -> None:
    """Paths hold user and thread ids: matched routes are named by their template, unmatched
    ones by the method alone, and the path attributes are emptied."""
    assert (await client.patch(f"/v1/users/{USER}/memory")).status_code == 405
    assert (await client.get(f"/v1/users/{USER}/nothing-here")).status_code == 404
    assert (await client.get(f"/v1/users/{USER}/memory")).status_code == 200
    servers = [s for s in EXPORTER.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
    assert len(servers) == 3
    assert sorted(s.name for s in servers) == ["GET", "GET /v1/users/{user_id}/memory", "PATCH"]
    for span in servers:
        assert USER not in span.name
        assert all(USER not in str(v) for v in (span.attributes or {}).values()), span.attributes


async def test_content_is_recorded_when_asked_for(
    client: AsyncTestClient[Litestar], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT, "true")
    body = await run(client, QUESTION)
    first, answer = spans("chat ")
    assert QUESTION in str((first.attributes or {})["gen_ai.input.messages"])
    output = str((answer.attributes or {})["gen_ai.output.messages"])
    content = body["message"]
    assert isinstance(content, dict)
    assert str(content["content"])[:40] in output


def test_export_follows_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert export_requested(endpoint)
    assert export_requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not export_requested({})
    assert not export_requested({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not export_requested({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert configure_tracing() is False  # nothing asked: the provider is left alone


async def test_a_thread_keeps_its_conversation_id_and_another_thread_has_another(
    client: AsyncTestClient[Litestar],
) -> None:
    """Stable per thread (an HMAC, not a random id), different per thread, and the same on
    every replica that shares ``THREADKEEPER_TRACE_ID_KEY``."""
    for thread in ("traced", "traced", "other"):
        response = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": "hello"}},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 200, response.text
    ids = [(s.attributes or {})["gen_ai.conversation.id"] for s in spans("invoke_agent")]
    assert ids[0] == ids[1] != ids[2]
    replica = ConversationIds(TRACE_ID_KEY)
    assert ids == [replica.of(f"{TENANT}:{USER}:{t}") for t in ("traced", "traced", "other")]
    assert ConversationIds(None).of(f"{TENANT}:{USER}:traced") is None
    assert ConversationIds("another key").of(f"{TENANT}:{USER}:traced") != ids[0]


def test_the_trace_id_key_is_a_secret() -> None:
    from threadkeeper.app.config import Settings, describe, redact, secrets_of

    settings = Settings.of(trace_id_key="hmac-key-for-traces")
    assert "hmac-key-for-traces" not in describe(settings)
    assert "hmac-key-for-traces" in secrets_of(settings)
    assert "hmac-key-for-traces" not in redact("key=hmac-key-for-traces", secrets_of(settings))
