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


def tracer() -> trace.Tracer:
    """The tracer of the provider installed now (the API's no-op one until then)."""
    return trace.get_tracer(TRACER_NAME)


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

    def __init__(self, model: BaseChatModel) -> None:
        super().__init__()
        self.model_name = model_name(model)
        self.provider = model._llm_type

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
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self.model_name,
                "gen_ai.provider.name": self.provider,
                "threadkeeper.window.messages": len(request.messages),
            },
        ) as span:
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
            if answers and answers[-1].tool_calls:
                span.set_attribute("gen_ai.response.finish_reasons", ["tool_calls"])
            if capture_content() and answers:
                span.set_attribute("gen_ai.output.messages", _messages_json(list(answers)))
            return response


def record_failure(span: trace.Span, exc: BaseException) -> None:
    """Mark ``span`` failed with the exception's type only: messages can hold thread keys
    (``tenant:user:thread``) and content."""
    span.add_event("exception", {"exception.type": type(exc).__name__})
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
