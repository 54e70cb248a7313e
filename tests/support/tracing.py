"""The test process's traces: one SDK ``TracerProvider`` with an in-memory exporter behind a
``SimpleSpanProcessor`` (OpenTelemetry allows the global provider to be set once, so every
module that asserts on spans shares this one)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()


def install() -> InMemorySpanExporter:
    """Install the provider (once) and return the exporter its spans reach."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    return EXPORTER
