"""OpenTelemetry, one stack for traces and metrics: one span per run, per model call, per tool
call, per retrieval, under the HTTP server span (Litestar's ``OpenTelemetryPlugin``) and over the
database spans (``app.instrumentation``); the process's ``MeterProvider`` (``app.metrics``
holds the instruments).

Spans and metrics are made through the OpenTelemetry API, a no-op until a provider is
installed. ``configure_metrics`` installs the ``MeterProvider`` once per process (every app
does, so ``GET /metrics`` always has it): OpenTelemetry's Prometheus reader, plus OTLP when the
standard variables ask for it. ``configure_tracing`` (``threadkeeper serve``) installs a
``TracerProvider`` exporting over OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. OTLP goes over HTTP (``http/protobuf``, the default) or gRPC
(``OTEL_EXPORTER_OTLP_PROTOCOL``); the resource is ``telemetry_resource``. A process that embeds
the app may install its own providers first; they are kept.

Model-call spans and metrics follow the GenAI semantic conventions (``SEMCONV_VERSION``):
``chat {model}``, ``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``, time
to first chunk. Message content — what the model was sent and answered — is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (DESIGN: off by default); user ids
and thread keys are never recorded (a thread is ``gen_ai.conversation.id``, an HMAC), tenant
ids are.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import langsmith
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langsmith.utils import tracing_is_enabled
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from threadkeeper.app.metrics import (
    GEN_AI_OPERATION_DURATION,
    GEN_AI_TIME_TO_FIRST_CHUNK,
    GEN_AI_TOKEN_USAGE,
)
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


def _disabled(values: Mapping[str, str]) -> bool:
    return values.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def export_requested(env: Mapping[str, str] | None = None, signal: str = "TRACES") -> bool:
    """Whether the standard OpenTelemetry variables ask for ``signal`` (``TRACES`` or
    ``METRICS``) to be exported over OTLP."""
    values = os.environ if env is None else env
    if _disabled(values):
        return False
    if values.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        values.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or values.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    )


def otlp_protocol(env: Mapping[str, str] | None = None, signal: str = "TRACES") -> str:
    """``grpc`` or ``http/protobuf`` (the default) by ``OTEL_EXPORTER_OTLP_{signal}_PROTOCOL``,
    then ``OTEL_EXPORTER_OTLP_PROTOCOL``.

    Raises:
        ValueError: another protocol is asked for (``http/json`` has no Python exporter).
    """
    values = os.environ if env is None else env
    protocol = (
        values.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or values.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in ("grpc", "http/protobuf"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: threadkeeper exports OTLP over "
            "'grpc' or 'http/protobuf'"
        )
    return protocol


def telemetry_resource(profile: str) -> Any:
    """The process as every signal names it: ``service.name`` (``OTEL_SERVICE_NAME``, default
    ``threadkeeper``), ``service.version`` (the app's), ``threadkeeper.profile``, and whatever
    ``OTEL_RESOURCE_ATTRIBUTES`` adds."""
    from importlib.metadata import PackageNotFoundError, version

    from opentelemetry.sdk.resources import Resource

    try:
        app_version = version("threadkeeper-app")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        app_version = "0"
    attributes: dict[str, str] = {
        "service.name": os.environ.get("OTEL_SERVICE_NAME") or "threadkeeper",
        "service.version": app_version,
    }
    if profile:
        attributes["threadkeeper.profile"] = profile
    return Resource.create(attributes)


def _span_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter()


def _metric_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter()


def configure_tracing(profile: str = "") -> bool:
    """Install an SDK tracer provider exporting over OTLP (``otlp_protocol``) when
    ``export_requested``, unless the process has one already; whether it did."""
    if not export_requested():
        return False
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return False  # the embedding process installed its own
    provider = TracerProvider(resource=telemetry_resource(profile))
    provider.add_span_processor(BatchSpanProcessor(_span_exporter(otlp_protocol())))
    trace.set_tracer_provider(provider)
    return True


_meter_provider: Any = None
"""The ``MeterProvider`` ``configure_metrics`` installed (one per process), if any."""

ASGI_METER = "opentelemetry.instrumentation.asgi"
"""The meter of the ASGI instrumentation (Litestar's ``OpenTelemetryConfig``): the HTTP
server metrics."""
HTTP_METRIC_ATTRIBUTES = frozenset(
    {
        # the instrumentation's default (pre-1.21) conventions: http.server.duration and
        # .active_requests
        "http.method",  # an unknown method is "_OTHER" (opentelemetry.util.http.sanitize_method)
        "http.status_code",
        "http.target",  # the route template (http.app.name_server_span), none when unrouted
        # OTEL_SEMCONV_STABILITY_OPT_IN=http or http/dup: http.server.request.duration and
        # .active_requests
        "http.request.method",
        "http.response.status_code",
        "http.route",
        "error.type",  # the status code of a 5xx, as text
    }
)
"""The only attributes the HTTP server metrics keep, every one of a bounded set. Dropped:
``http.server_name`` — the ``Host`` header as the client sent it, on every request, 401s and
404s too (a series per value: unbounded memory and ``/metrics``) — and ``http.host``, the
listening socket's address (the scrape's own ``instance``), with whatever attribute a later
instrumentation adds; and what is the same on every request of a process — the scheme, the
HTTP version, the port (``http.scheme``, ``http.flavor``, ``net.host.port`` and their newer
names) — which only lengthened every line. What stays: the route's template, the status, and
the method as the conventions normalise it."""

HTTP_KEPT_INSTRUMENTS = (
    "http.server.duration",
    "http.server.request.duration",
    "http.server.active_requests",
)
"""The ASGI instrumentation's instruments that ``/metrics`` shows, with ``HTTP_METRIC_ATTRIBUTES``
only (every instrument it makes is here or in ``HTTP_DROPPED_INSTRUMENTS``: a View matching
several instruments would also match these, and every matching View makes a stream; a test
checks the instrumentation makes no other)."""

HTTP_DROPPED_INSTRUMENTS = (
    "http.server.request.size",
    "http.server.response.size",
    "http.server.request.body.size",
    "http.server.response.body.size",
)
"""The ASGI instrumentation's size histograms: read by no dashboard or alert (docs/dashboards.md),
they were two thirds of ``/metrics`` (a 15-bucket series per route and status each)."""


def metric_views() -> list[Any]:
    """The ``View`` s of threadkeeper's ``MeterProvider``: the ASGI instrumentation's HTTP
    server metrics keep only ``HTTP_METRIC_ATTRIBUTES``, and its size histograms
    (``HTTP_DROPPED_INSTRUMENTS``) are not aggregated at all. A process that installs its own
    ``MeterProvider`` before the app is built should pass these to it."""
    from opentelemetry.sdk.metrics.view import DropAggregation, View

    dropped = [
        View(meter_name=ASGI_METER, instrument_name=name, aggregation=DropAggregation())
        for name in HTTP_DROPPED_INSTRUMENTS
    ]
    kept = [
        View(
            meter_name=ASGI_METER, instrument_name=name, attribute_keys=set(HTTP_METRIC_ATTRIBUTES)
        )
        for name in HTTP_KEPT_INSTRUMENTS
    ]
    return [*dropped, *kept]


def configure_metrics(profile: str = "", readers: Sequence[Any] = ()) -> Any:
    """Install the process's ``MeterProvider`` once: OpenTelemetry's Prometheus reader (what
    ``GET /metrics`` serves), an OTLP exporter when ``export_requested(signal="METRICS")``,
    and ``readers`` (tests pass an in-memory reader), with ``metric_views``. Returns the
    provider — the one installed before if there is one, or ``None`` when
    ``OTEL_SDK_DISABLED=true`` or an embedding process installed its own (whose readers and
    views decide what ``/metrics`` shows)."""
    global _meter_provider
    if _meter_provider is not None:
        return _meter_provider
    if _disabled(os.environ):
        return None
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if isinstance(otel_metrics.get_meter_provider(), MeterProvider):
        return None
    all_readers = [PrometheusMetricReader(), *readers]
    if export_requested(signal="METRICS"):
        exporter = _metric_exporter(otlp_protocol(signal="METRICS"))
        all_readers.append(PeriodicExportingMetricReader(exporter))
    provider = MeterProvider(
        metric_readers=all_readers, resource=telemetry_resource(profile), views=metric_views()
    )
    otel_metrics.set_meter_provider(provider)
    _meter_provider = provider
    return provider


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


class ModelCallTiming:
    """One model call in progress: when it started, and its span and metric attributes, so
    that whoever sees its first streamed chunk (the run's stream loop) can time it."""

    __slots__ = ("attributes", "first_chunk", "span", "started")

    def __init__(self, span: trace.Span, attributes: dict[str, Any]) -> None:
        self.started = time.perf_counter()
        self.span = span
        self.attributes = attributes
        self.first_chunk: float | None = None

    def chunk_seen(self) -> None:
        """The call's first chunk reached the run: ``gen_ai.client.operation.time_to_first_chunk``
        and the span's ``gen_ai.response.time_to_first_chunk`` (later chunks: nothing)."""
        if self.first_chunk is not None:
            return
        self.first_chunk = elapsed = time.perf_counter() - self.started
        GEN_AI_TIME_TO_FIRST_CHUNK.record(elapsed, self.attributes)
        if self.span.is_recording():
            self.span.set_attribute("gen_ai.response.time_to_first_chunk", elapsed)


class ModelCallTracing(AgentMiddleware[Any]):
    """The innermost middleware: one ``chat {model}`` span per model call, around exactly
    what the model is sent (after the history hooks) and what it answers, and the GenAI
    client metrics of the call (duration, token usage; time to first chunk where the run
    streams: ``ModelCallTiming``)."""

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
            metric: dict[str, Any] = {
                GEN_AI_OPERATION_NAME: "chat",
                "gen_ai.provider.name": self.provider,
                "gen_ai.request.model": self.model_name,
            }
            timing = ModelCallTiming(span, metric)
            if run is not None:
                run.model_call = timing
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
                GEN_AI_OPERATION_DURATION.record(
                    time.perf_counter() - timing.started,
                    {**metric, "error.type": type(exc).__name__},
                )
                raise
            finally:
                if run is not None and run.model_call is timing:
                    run.model_call = None
            answers = [m for m in response.result if isinstance(m, AIMessage)]
            if answers:
                metadata = answers[-1].response_metadata or {}
                served = metadata.get("model_name") or metadata.get("model")
                metric["gen_ai.response.model"] = (
                    served if isinstance(served, str) else self.model_name
                )
                span.set_attribute("gen_ai.response.model", metric["gen_ai.response.model"])
                reason = metadata.get("finish_reason")
                if not isinstance(reason, str):
                    reason = "tool_calls" if answers[-1].tool_calls else "stop"
                span.set_attribute("gen_ai.response.finish_reasons", [reason])
            GEN_AI_OPERATION_DURATION.record(time.perf_counter() - timing.started, metric)
            usage = answers[-1].usage_metadata if answers else None
            if usage:
                span.set_attribute("gen_ai.usage.input_tokens", usage["input_tokens"])
                span.set_attribute("gen_ai.usage.output_tokens", usage["output_tokens"])
                GEN_AI_TOKEN_USAGE.record(
                    usage["input_tokens"], {**metric, "gen_ai.token.type": "input"}
                )
                GEN_AI_TOKEN_USAGE.record(
                    usage["output_tokens"], {**metric, "gen_ai.token.type": "output"}
                )
            if capture_content() and answers:
                span.set_attribute("gen_ai.output.messages", _messages_json(list(answers)))
            return response


def record_failure(span: trace.Span, exc: BaseException) -> None:
    """Mark ``span`` failed with the exception's type only: messages can hold thread keys
    (``tenant:user:thread``) and content."""
    span.add_event("exception", {"exception.type": type(exc).__name__})
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
