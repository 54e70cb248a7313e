"""Domain metrics, on the Prometheus registry ``GET /metrics`` serves (beside Litestar's
HTTP metrics, ``threadkeeper_http_*``)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter

MEMORY_REFUSALS = Counter(
    "threadkeeper_memory_refusals",
    "Memory candidates refused by MemoryRules, by reason (values are never stored or logged).",
    ["reason"],
)


def count_refusals(refused: Mapping[str, int]) -> None:
    """Add a write plan's refusal counts (``personal_data:health``, ``too_long``, …)."""
    for reason, count in refused.items():
        MEMORY_REFUSALS.labels(reason=reason).inc(count)


MEMORY_WRITE_FAILURES = Counter(
    "threadkeeper_memory_write_failures",
    "Memory writes after a stored round that failed (the round stays acknowledged), by what "
    "happened next: retried (once, in the background) then ok, or lost.",
    ["outcome"],
)
