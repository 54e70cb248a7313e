"""The test process's metrics: threadkeeper's ``MeterProvider`` with an in-memory reader beside
its Prometheus reader (``tests/conftest.py`` installs it before any app is built; OpenTelemetry
allows one global provider per process). Counters and histograms are cumulative over the
process, so tests compare a value before and after what they do."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)

from threadkeeper.app.telemetry import configure_metrics

READER = InMemoryMetricReader()


def install() -> None:
    configure_metrics("", readers=[READER])


def _metrics() -> Iterator[Metric]:
    data = READER.get_metrics_data()
    if data is None:
        return
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            yield from scope.metrics


def points(name: str) -> list[Any]:
    """Every data point of the metric ``name`` (its OpenTelemetry name)."""
    return [p for m in _metrics() if m.name == name for p in m.data.data_points]


def _matches(point: Any, attributes: Mapping[str, Any]) -> bool:
    held = dict(point.attributes or {})
    return all(held.get(k) == v for k, v in attributes.items())


def total(name: str, **attributes: Any) -> float:
    """A counter's sum, or a histogram's count, over the points with ``attributes``."""
    found = 0.0
    for point in points(name):
        if not _matches(point, attributes):
            continue
        if isinstance(point, HistogramDataPoint):
            found += point.count
        elif isinstance(point, NumberDataPoint):
            found += point.value
    return found


def values_sum(name: str, **attributes: Any) -> float:
    """A histogram's sum over the points with ``attributes``."""
    return sum(
        p.sum for p in points(name) if isinstance(p, HistogramDataPoint) and _matches(p, attributes)
    )


def names() -> set[str]:
    return {m.name for m in _metrics()}


def all_attributes() -> list[dict[str, Any]]:
    """The attributes of every point of every metric (a leak check searches them)."""
    return [dict(p.attributes or {}) for m in _metrics() for p in m.data.data_points]
