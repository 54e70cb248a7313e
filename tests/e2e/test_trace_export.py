"""``threadkeeper serve`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` exports its traces and metrics
over OTLP — HTTP by default, gRPC with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``: a stand-in
collector on loopback (a plain HTTP server, or a gRPC server of the OTLP services, decoding the
protobuf requests) receives the run's spans and the process's metrics from the real server
process, under one resource (service name, version, profile)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.e2e.test_server import HEADERS, QUESTION, free_port, serve, wait_ready

RECEIVED: list[ExportTraceServiceRequest] = []
METRICS: list[ExportMetricsServiceRequest] = []


class Collector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            RECEIVED.append(request)
        elif self.path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest()
            metrics.ParseFromString(body)
            METRICS.append(metrics)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class GrpcCollector(
    trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer
):
    def Export(self, request: object, context: object) -> object:
        if isinstance(request, ExportTraceServiceRequest):
            RECEIVED.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()
        assert isinstance(request, ExportMetricsServiceRequest)
        METRICS.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture
def grpc_collector() -> Iterator[str]:
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = GrpcCollector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def metric_names() -> dict[str, set[str]]:
    """Metric names by service name, over everything received."""
    names: dict[str, set[str]] = {}
    for request in METRICS:
        for resource_metrics in request.resource_metrics:
            service = next(
                a.value.string_value
                for a in resource_metrics.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource_metrics.scope_metrics:
                names.setdefault(service, set()).update(m.name for m in scope.metrics)
    return names


def resources() -> list[dict[str, str]]:
    return [
        {a.key: a.value.string_value for a in r.resource.attributes}
        for request in [*RECEIVED, *METRICS]
        for r in getattr(request, "resource_spans", None) or request.resource_metrics  # type: ignore[attr-defined]
    ]


def span_names() -> dict[str, list[str]]:
    """Span names by service name, over everything received."""
    names: dict[str, list[str]] = {}
    for request in RECEIVED:
        for resource_spans in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource_spans.scope_spans:
                names.setdefault(service, []).extend(s.name for s in scope.spans)
    return names


def test_the_server_exports_a_runs_spans(collector: str, tmp_path: Path) -> None:
    RECEIVED.clear()
    port = free_port()
    process = serve(
        tmp_path / "data",
        port,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector,
        OTEL_BSP_SCHEDULE_DELAY="200",
        OTEL_SERVICE_NAME="threadkeeper-e2e",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        response = httpx.post(
            f"{url}/v1/threads/exported/runs",
            json={"message": {"content": QUESTION}},
            headers={**HEADERS, "Accept": "application/json"},
            timeout=60,
        )
        assert response.status_code == 200
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if "invoke_agent threadkeeper" in span_names().get("threadkeeper-e2e", []):
                break
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)
    names = span_names().get("threadkeeper-e2e", [])
    assert "invoke_agent threadkeeper" in names, span_names()
    assert "POST /v1/threads/{thread_id}/runs" in names
    assert any(name.startswith("chat ") for name in names)
    assert "threadkeeper.retrieve" in names
    # the database spans (SQLAlchemy on the embedded profile's engine): serve installs them
    assert any(name.startswith("INSERT ") for name in names), names


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_traces_and_metrics_reach_a_collector_over_http_and_grpc(
    protocol: str, collector: str, grpc_collector: str, tmp_path: Path
) -> None:
    RECEIVED.clear()
    METRICS.clear()
    port = free_port()
    process = serve(
        tmp_path / "data",
        port,
        OTEL_EXPORTER_OTLP_ENDPOINT=grpc_collector if protocol == "grpc" else collector,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_BSP_SCHEDULE_DELAY="200",
        OTEL_METRIC_EXPORT_INTERVAL="300",
        OTEL_SERVICE_NAME="threadkeeper-otlp",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        response = httpx.post(
            f"{url}/v1/threads/exported/runs",
            json={"message": {"content": QUESTION}},
            headers={**HEADERS, "Accept": "application/json"},
            timeout=60,
        )
        assert response.status_code == 200
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            spans = span_names().get("threadkeeper-otlp", [])
            metrics = metric_names().get("threadkeeper-otlp", set())
            if "invoke_agent threadkeeper" in spans and "threadkeeper.runs" in metrics:
                break
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "invoke_agent threadkeeper" in span_names().get("threadkeeper-otlp", [])
    metrics = metric_names().get("threadkeeper-otlp", set())
    assert {"threadkeeper.runs", "gen_ai.client.operation.duration"} <= metrics, metrics
    assert "http.server.duration" in metrics
    for resource in resources():
        assert resource["service.name"] == "threadkeeper-otlp"
        assert resource["threadkeeper.profile"] == "embedded"
        assert resource["service.version"]
