"""No client-chosen value reaches a metric label: a thousand requests with distinct Host
headers, user agents, paths and methods — unauthenticated (401), unrouted (404), of an unknown
method (405) or authenticated — add no series to ``GET /metrics`` beyond the fixed set the
first few requests of each kind made (security review: 300 distinct Host values had grown
``/metrics`` from 93 KB to 4.6 MB through ``http_server_name``)."""

from __future__ import annotations

import random
import re
import string
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry.metrics import NoOpMeter

from tests.api.conftest import HEADERS, USER, settings_for
from tests.support import metrics
from threadkeeper.app.application import create_app
from threadkeeper.app.telemetry import HTTP_DROPPED_INSTRUMENTS, HTTP_KEPT_INSTRUMENTS

TOKEN = "cardinality-token"
REQUESTS = 1_000
SERIES = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{.*\})?\s")


def series(exposition: str, prefix: str) -> set[str]:
    """The distinct series (name and label set) of the families whose name has ``prefix``."""
    found: set[str] = set()
    for line in exposition.splitlines():
        match = SERIES.match(line)
        if match and match["name"].startswith(prefix):
            found.add(match["name"] + (match["labels"] or ""))
    return found


def http_points() -> set[tuple[str, frozenset[tuple[str, object]]]]:
    """The distinct (metric, attributes) of the HTTP server metrics (in-memory reader)."""
    return {
        (name, frozenset(dict(point.attributes or {}).items()))
        for name in metrics.names()
        if name.startswith("http.server")
        for point in metrics.points(name)
    }


def word(rng: random.Random, size: int = 12) -> str:
    return "".join(rng.choices(string.ascii_lowercase + string.digits, k=size))


def requests(rng: random.Random, count: int) -> Iterator[tuple[str, str, dict[str, str]]]:
    """``count`` requests (method, path, headers), every value a client chooses fresh each
    time, in a cycle of kinds so any prefix longer than the cycle covers every kind."""
    kinds = 7
    for i in range(count):
        host = f"{word(rng)}.example"
        agent = f"probe/{word(rng)} ({word(rng, 30)})"
        headers = {"Host": host, "User-Agent": agent}
        kind = i % kinds
        if kind == 0:  # no token: 401 on a route
            yield "GET", f"/v1/threads/{word(rng)}/messages", headers
        elif kind == 1:  # no route: 404
            yield "GET", f"/{word(rng)}/{word(rng)}?{word(rng)}={word(rng)}", headers
        elif kind == 2:  # an unknown method on an unknown path
            yield word(rng, 8).upper(), f"/v1/{word(rng)}", headers
        elif kind == 3:  # an unknown method on a route: 405
            yield word(rng, 8).upper(), f"/v1/threads/{word(rng)}/messages", headers
        elif kind == 4:  # a wrong token: 401
            yield "DELETE", f"/v1/users/{word(rng)}", {**headers, "Authorization": "Bearer x"}
        elif kind == 5:  # authenticated, an unknown thread: 404 on a route
            authed = {**headers, **HEADERS, "Authorization": f"Bearer {TOKEN}"}
            yield "GET", f"/v1/threads/{word(rng)}/messages", authed
        else:  # authenticated: 200
            authed = {**headers, **HEADERS, "Authorization": f"Bearer {TOKEN}"}
            yield "GET", f"/v1/users/{USER}/memory", authed


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient[Litestar]]:
    app = create_app(settings_for("embedded", tmp_path, None, service_token=TOKEN))
    async with AsyncTestClient(app, timeout=30) as client:
        yield client


async def send(
    client: AsyncTestClient[Litestar], batch: Iterator[tuple[str, str, dict[str, str]]]
) -> set[int]:
    statuses: set[int] = set()
    for method, path, headers in batch:
        response = await client.request(method, path, headers=headers)
        statuses.add(response.status_code)
    return statuses


async def test_client_chosen_values_add_no_series(client: AsyncTestClient[Litestar]) -> None:
    rng = random.Random(20240613)
    # the fixed set: every kind of request, twice
    warm = await send(client, requests(rng, 14))
    assert {200, 401, 404, 405} <= warm, warm
    before = (await client.get("/metrics")).text
    points_before = http_points()

    probes = list(requests(rng, REQUESTS))
    hosts = [headers["Host"] for _, _, headers in probes]
    statuses = await send(client, iter(probes))
    assert statuses == warm

    after = (await client.get("/metrics")).text
    assert series(after, "http_") == series(before, "http_"), "new HTTP series"
    assert series(after, "threadkeeper_") == series(before, "threadkeeper_")
    assert http_points() == points_before
    assert len(series(after, "")) == len(series(before, "")), "no family grew"
    for method, path, headers in probes[:60]:  # nothing the client chose is printed
        for value in (headers["Host"], headers["User-Agent"], path.split("?")[0], method):
            if value not in ("GET", "DELETE", f"/v1/users/{USER}/memory"):
                assert value not in after, value
    assert not any(host in after for host in hosts)
    # a bounded exposition: the Prometheus text did not grow with the requests
    assert len(after) < len(before) * 1.1


async def test_unknown_methods_are_other(client: AsyncTestClient[Litestar]) -> None:
    """An unknown HTTP method labels the HTTP metrics ``_OTHER`` (semantic conventions)."""
    await client.request("BREW", "/v1/threads/pot/messages")
    await client.request("PROPFIND", "/nowhere")
    methods = {
        dict(attributes).get(key)
        for _, attributes in http_points()
        for key in ("http.method", "http.request.method")  # OTEL_SEMCONV_STABILITY_OPT_IN=http
    } - {None}
    assert "BREW" not in methods
    assert "PROPFIND" not in methods
    assert "_OTHER" in methods


class _RecordingMeter:
    """Records the name of every instrument made through it (what the instrumentation makes)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def _make(self, name: str, **_: object) -> object:
        self.names.append(name)
        return NoOpMeter("recording").create_histogram(name)

    create_histogram = create_counter = create_up_down_counter = _make


@pytest.mark.parametrize("opt_in", ["", "http", "http/dup"])
def test_the_instrumentation_makes_no_instrument_the_views_do_not_name(
    opt_in: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every View matching several instruments would also make a stream for those it should
    drop: the views name each instrument, so a new one in an upgrade must be named too."""
    from opentelemetry.instrumentation import _semconv
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    stability = _semconv._OpenTelemetrySemanticConventionStability
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    # the mode is read once per process: read it again here, and put the process's back after
    monkeypatch.setattr(stability, "_initialized", False)
    monkeypatch.setattr(
        stability, "_OTEL_SEMCONV_STABILITY_SIGNAL_MAPPING", {}
    )  # a new dict: the process's is left as it was
    meter = _RecordingMeter()
    OpenTelemetryMiddleware(lambda *_: None, meter=meter)  # type: ignore[arg-type]
    assert meter.names
    assert set(meter.names) <= set(HTTP_KEPT_INSTRUMENTS) | set(HTTP_DROPPED_INSTRUMENTS)


async def test_metrics_carry_what_dashboards_read_and_no_more(
    client: AsyncTestClient[Litestar],
) -> None:
    """No request- or response-size histograms (read by nothing, two thirds of ``/metrics``),
    and HTTP series labelled by method, status and route only — not by what every request of
    the process shares (scheme, HTTP version, port)."""
    await send(client, requests(random.Random(7), 14))
    exposition = (await client.get("/metrics")).text
    assert "http_server_duration_milliseconds_bucket" in exposition
    for family in ("http_server_request_size", "http_server_response_size", "body_size"):
        assert family not in exposition
    labels = {
        label
        for line in series(exposition, "http_server_")
        for label in re.findall(r'([a-z_]+)="', line)
    }
    scope = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}
    assert labels - scope <= {"http_method", "http_status_code", "http_target", "le"}
