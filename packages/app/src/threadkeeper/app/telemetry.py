"""OpenTelemetry traces: one span per run, per model call, per tool call, per retrieval, and
the HTTP server span around them (Litestar's ``OpenTelemetryPlugin``).

Spans are made through the OpenTelemetry API, which is a no-op until a ``TracerProvider`` is
installed. ``threadkeeper serve`` installs one when the standard variables ask for export:
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (OTLP over HTTP;
``OTEL_SERVICE_NAME`` defaults to ``threadkeeper``), unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. A process that embeds the app may install its own provider.

Model-call spans follow the GenAI semantic conventions (``chat {model}``,
``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
``output_tokens``). Message content — what the model was sent and answered — is recorded only
when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (DESIGN: off by default); user
ids are never recorded, tenant and thread ids are.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import langsmith
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langsmith.utils import tracing_is_enabled
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from threadkeeper.domain.tokens import message_text

TRACER_NAME = "threadkeeper"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SEMCONV_VERSION = "1.44.0"
"""The OpenTelemetry semantic conventions (GenAI) the spans follow: the version
``opentelemetry-semantic-conventions`` ships (``opentelemetry.semconv.schemas``)."""
AGENT_NAME = "threadkeeper"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
COMPACTED = "threadkeeper.compacted"
"""The call's history was summarized or compacted (1.44.0 has no ``gen_ai`` attribute for it)."""


class ConversationIds:
    """A thread's name in traces: ``HMAC-SHA256(THREADKEEPER_TRACE_ID_KEY, thread key)``, 32 hex
    digits — stable per thread on every replica sharing the key, and no way back to the key
    (``tenant:user:thread``: a user id) without it. ``None`` without a key."""

    def __init__(self, key: str | None) -> None:
        self._key = key.encode("utf-8") if key else None

    def of(self, thread_key: str) -> str | None:
        if self._key is None:
            return None
        return hmac.new(self._key, thread_key.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


async def _inline_unless_traced(
    default: Callable[..., Awaitable[Any]],
    ctx: contextvars.Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """LangSmith's hop to a worker thread, taken only when LangSmith tracing is on.

    ``create_agent`` wraps every middleware's ``awrap_model_call`` in ``langsmith.traceable``,
    which sets a run up and ends it in the default executor — two thread hops per middleware
    per model call (about 7% of a run's CPU on the embedded profile, measured with py-spy).
    With LangSmith tracing off (threadkeeper traces with OpenTelemetry) that work is a few
    dictionary reads, so it runs inline in the context LangSmith gave it.
    """
    if ctx.run(tracing_is_enabled):
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def untraced_langsmith_inline() -> None:
    """Install :func:`_inline_unless_traced` (``langsmith.set_runtime_overrides``, the hook
    LangSmith offers for runtimes that must not hop threads). Process-wide and idempotent."""
    langsmith.set_runtime_overrides(aio_to_thread=_inline_unless_traced)


_TRACER = trace.get_tracer(TRACER_NAME)
"""The API's proxy tracer: it creates no-op spans until a ``TracerProvider`` is installed and
the installed provider's spans from then on. Made once: ``get_tracer`` per span cost 2.6% of a
run's CPU (py-spy)."""


def tracer() -> trace.Tracer:
    """threadkeeper's tracer (of whichever provider is installed, now or later)."""
    return _TRACER


def capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT, "false").strip().lower() == "true"


def export_requested(env: dict[str, str] | None = None) -> bool:
    """Whether the standard OpenTelemetry variables ask for traces to be exported."""
    values = os.environ if env is None else env
    if values.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if values.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        values.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or values.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_tracing() -> bool:
    """Install an SDK provider exporting over OTLP/HTTP when ``export_requested``; whether it
    did. Called once by ``threadkeeper serve``."""
    if not export_requested():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or "threadkeeper"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


def model_name(model: BaseChatModel) -> str:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return model._llm_type


def _messages_json(messages: list[BaseMessage]) -> str:
    return json.dumps(
        [{"role": m.type, "content": message_text(m)} for m in messages], ensure_ascii=False
    )


class ModelCallTracing(AgentMiddleware[Any]):
    """The innermost middleware: one ``chat {model}`` span per model call, around exactly
    what the model is sent (after the history hooks) and what it answers."""

    def __init__(self, model: BaseChatModel, run: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.model_name = model_name(model)
        self.provider = model._llm_type
        self.run = run
        """The run's ``RunTrace`` (its conversation id, the windows the hooks made), if any."""

    @property
    def name(self) -> str:
        return "model_call_tracing"

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        with tracer().start_as_current_span(
            f"chat {self.model_name}",
            kind=trace.SpanKind.CLIENT,
            record_exception=False,  # messages can hold content: record_failure instead
            set_status_on_exception=False,
            attributes={
                GEN_AI_OPERATION_NAME: "chat",
                "gen_ai.request.model": self.model_name,
                "gen_ai.provider.name": self.provider,
                "threadkeeper.window.messages": len(request.messages),
            },
        ) as span:
            run = self.run() if self.run is not None else None
            if run is not None:
                if run.conversation_id is not None:
                    span.set_attribute(GEN_AI_CONVERSATION_ID, run.conversation_id)
                if run.windows:  # the window the history hooks made for this call
                    window = run.windows[-1]
                    span.set_attribute("threadkeeper.window.tokens", window.tokens)
                    span.set_attribute(COMPACTED, window.summary is not None)
                    span.set_attribute("threadkeeper.window.dropped", window.start)
            if capture_content():
                sent: list[BaseMessage] = [request.system_message] if request.system_message else []
                sent.extend(request.messages)
                span.set_attribute("gen_ai.input.messages", _messages_json(sent))
            try:
                response = await handler(request)
            except BaseException as exc:
                record_failure(span, exc)
                raise
            answers = [m for m in response.result if isinstance(m, AIMessage)]
            usage = answers[-1].usage_metadata if answers else None
            if usage:
                span.set_attribute("gen_ai.usage.input_tokens", usage["input_tokens"])
                span.set_attribute("gen_ai.usage.output_tokens", usage["output_tokens"])
            if answers:
                metadata = answers[-1].response_metadata or {}
                served = metadata.get("model_name") or metadata.get("model")
                span.set_attribute(
                    "gen_ai.response.model", served if isinstance(served, str) else self.model_name
                )
                reason = metadata.get("finish_reason")
                if not isinstance(reason, str):
                    reason = "tool_calls" if answers[-1].tool_calls else "stop"
                span.set_attribute("gen_ai.response.finish_reasons", [reason])
            if capture_content() and answers:
                span.set_attribute("gen_ai.output.messages", _messages_json(list(answers)))
            return response


def record_failure(span: trace.Span, exc: BaseException) -> None:
    """Mark ``span`` failed with the exception's type only: messages can hold thread keys
    (``tenant:user:thread``) and content."""
    span.add_event("exception", {"exception.type": type(exc).__name__})
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
