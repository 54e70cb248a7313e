"""Ops routes: liveness, readiness and Prometheus metrics. They need no headers."""

from __future__ import annotations

import logging

from litestar import Response, get
from litestar.enums import MediaType

from threadkeeper.app.http.openapi import ContractOperation, problems
from threadkeeper.app.http.problems import http_problem
from threadkeeper.app.http.routes import Service
from threadkeeper.app.http.schemas import LiveOut, ReadyOut
from threadkeeper.app.metrics import metrics_exposition

log = logging.getLogger("threadkeeper.app.http")


@get("/health/live", operation_class=ContractOperation, tags=["ops"])
async def live() -> LiveOut:
    """The process answers."""
    return LiveOut(status="ok")


@get(
    "/health/ready",
    operation_class=ContractOperation,
    tags=["ops"],
    responses=problems(503),
)
async def ready(service: Service) -> ReadyOut:
    """Every storage backend answers; 503 lists the state of each when one does not."""
    try:
        checks = await service.ready()
    except Exception:
        log.exception("readiness check failed")
        checks = {"service": "readiness check failed"}
    failing = sorted(name for name, state in checks.items() if state != "ok")
    if failing:
        raise http_problem(
            503,
            f"Not ready: {', '.join(failing)}.",
            slug="not-ready",
            title="Not ready",
            checks=checks,
        )
    return ReadyOut(status="ok", checks=checks)


@get(
    "/metrics",
    media_type=MediaType.TEXT,
    operation_class=ContractOperation,
    summary="Metrics",
    tags=["ops"],
    sync_to_thread=False,
)
def metrics() -> Response[bytes]:
    """Prometheus metrics: OpenTelemetry's Prometheus reader over the process's
    ``MeterProvider`` — HTTP server, GenAI client and threadkeeper metrics (docs/operations.md
    lists them) — and prometheus-client's process metrics."""
    body, content_type = metrics_exposition()
    return Response(body, media_type=content_type)
