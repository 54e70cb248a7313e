"""``threadkeeper serve`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` exports its traces over OTLP/HTTP:
a stand-in collector (a plain HTTP server decoding the protobuf requests) receives the run's
spans from the real server process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.e2e.test_server import HEADERS, QUESTION, free_port, serve, wait_ready

RECEIVED: list[ExportTraceServiceRequest] = []


class Collector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            RECEIVED.append(request)
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
