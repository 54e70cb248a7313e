"""Ops routes: liveness, readiness and Prometheus metrics. They need no headers."""

from __future__ import annotations

import logging

from litestar import Response, get
from litestar.enums import MediaType
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController

from threadkeeper.app.http.openapi import ContractOperation, problems
from threadkeeper.app.http.problems import http_problem
from threadkeeper.app.http.routes import Service
from threadkeeper.app.http.schemas import LiveOut, ReadyOut

log = logging.getLogger("threadkeeper.app.http")

METRICS_PREFIX = "threadkeeper_http"


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


class MetricsController(PrometheusController):
    """``GET /metrics``: Prometheus text exposition (Litestar's controller, documented as
    ``text/plain`` rather than its inferred JSON)."""

    path = "/metrics"
    tags = ["ops"]  # noqa: RUF012 (Litestar's own attribute)

    @get(media_type=MediaType.TEXT, operation_class=ContractOperation, summary="Metrics")
    async def get(self) -> Response[bytes]:
        """Prometheus metrics of the HTTP API (requests, durations, in progress)."""
        response: Response[bytes] = await PrometheusController.get.fn(self)
        return response


def prometheus_config() -> PrometheusConfig:
    return PrometheusConfig(
        app_name="threadkeeper",
        prefix=METRICS_PREFIX,
        group_path=True,
        exclude=["^/metrics$", "^/health/"],
    )
