"""The test process's traces: one SDK ``TracerProvider`` with an in-memory exporter behind a
``SimpleSpanProcessor`` (OpenTelemetry allows the global provider to be set once, so every
module that asserts on spans shares this one — or, if a module installed the provider first,
this exporter is added to it)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
_attached: list[TracerProvider] = []


def install() -> InMemorySpanExporter:
    """Make sure the process's SDK provider sends its spans to ``EXPORTER`` (once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if provider not in _attached:
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _attached.append(provider)
    return EXPORTER
