"""The docs name only what the code has: every ``THREADKEEPER_*`` setting is in the README's
table, and every metric and label the docs name exists (issue 29, item 7: api.md listed
``threadkeeper_http_*`` metrics that were gone, the runs counter's help and dashboards.md named
an ``escalated`` status the code never reports, the README lacked a setting).

Metric names are checked against what the service can export: its own instruments
(``app.metrics``, each exported once through a private Prometheus registry to get the name the
exporter gives it), what ``/metrics`` shows after a workload on the embedded profile (the
instrumentations' families), and the names the installed OpenTelemetry instrumentations
declare (a pool metric only a server profile's engine emits). Label names are checked on the
series ``/metrics`` shows.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.semconv.metrics import MetricInstruments
from prometheus_client import CollectorRegistry, generate_latest

from threadkeeper.adapters.builtin_model import ReplyStatus
from threadkeeper.app import metrics
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings
from threadkeeper.app.telemetry import telemetry_resource

ROOT = Path(__file__).resolve().parents[3]
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if "benchmarks" not in p.parts),
]
"""Every page a person wrote (the benchmarks' result pages are generated from their runs)."""
METRIC = re.compile(
    r"\b((?:threadkeeper|http_server|gen_ai_client|db_client)_[a-z0-9_]*[a-z0-9])\b"
)
SUFFIXES = ("_bucket", "_sum", "_count", "_created")
FAMILY = re.compile(r"^# TYPE (\S+) ", re.M)
SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", re.M)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')
CONDITIONAL = {
    ("gen_ai_client_operation_duration_seconds", "error_type"): "on failed model calls only",
}
"""Labels a series carries only in a case the workload does not make (and why)."""
DROPPED = {
    "http_server_name": "the ASGI instrumentation's Host-header label, which is dropped",
    "http_server_request_size_bytes": "the ASGI instrumentation's size histogram, not aggregated",
    "http_server_response_size_bytes": "the ASGI instrumentation's size histogram, not aggregated",
}
"""Names the docs mention as removed: they must not be exported."""
HEADERS = {"X-Tenant-Id": "acme-insurance", "X-User-Id": "u1", "Accept": "application/json"}


def doc_text() -> Iterator[tuple[str, str]]:
    for path in DOCS:
        yield path.name, path.read_text(encoding="utf-8")


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def declared_families() -> set[str]:
    """The Prometheus family of every instrument of ``app.metrics``: each made again on a
    private provider and registry, given one value, exported."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("docs")
    for value in vars(metrics).values():
        kind = type(value).__name__
        name, unit = getattr(value, "_name", None), getattr(value, "_unit", "")
        if name is None or kind == "_ProxyMeter":
            continue
        if kind == "_ProxyCounter":
            meter.create_counter(name, unit=unit).add(1)
        elif kind == "_ProxyHistogram":
            meter.create_histogram(name, unit=unit).record(1)
        elif kind == "_ProxyUpDownCounter":
            meter.create_up_down_counter(name, unit=unit).add(1)
        elif kind == "_ProxyGauge":
            meter.create_gauge(name, unit=unit).set(1)
        else:  # pragma: no cover - a new kind of instrument: teach this test
            raise AssertionError(f"{name}: an instrument of kind {kind}")
    try:
        return set(FAMILY.findall(generate_latest(registry).decode()))
    finally:
        provider.shutdown()


def instrumentation_declares(name: str) -> bool:
    """Whether an instrumentation the service installs creates the metric: its source names it
    (dotted) or uses the semantic conventions' constant for it (``MetricInstruments.<NAME>``,
    whose value is that dotted name)."""
    dotted = name.replace("_", ".")
    constant = f"MetricInstruments.{name.upper()}"
    if getattr(MetricInstruments, name.upper(), None) != dotted:
        constant = ""  # no such constant: the source must name the metric itself
    for package in ("sqlalchemy", "asgi", "dbapi", "psycopg", "redis"):
        spec = importlib.util.find_spec(f"opentelemetry.instrumentation.{package}")
        if spec is None or spec.submodule_search_locations is None:
            continue
        for folder in spec.submodule_search_locations:
            for source in Path(folder).rglob("*.py"):
                text = source.read_text(encoding="utf-8")
                if f'"{dotted}"' in text or (constant and constant in text):
                    return True
    return False


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``/metrics`` after a workload on embedded: runs (JSON and SSE), memory, a refusal, a
    thread deleted and a user erased."""
    data = tmp_path_factory.mktemp("docs-metrics") / "data"

    async def workload() -> str:
        app = create_app(Settings.of(data_dir=str(data), tokenizer="estimate"))
        async with AsyncTestClient(app, timeout=60) as client:
            for thread, text in (
                ("t-1", "Is dental treatment covered by my health insurance?"),
                ("t-1", "My name is Sara and I have diabetes; is insulin covered?"),
                ("t-2", "I want to talk to a person, please"),
            ):
                answered = await client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": text}},
                    headers=HEADERS,
                )
                assert answered.status_code == 200, answered.text
            streamed = await client.post(
                "/v1/threads/t-3/runs",
                json={"message": {"content": "How do I file a claim?"}},
                headers={**HEADERS, "Accept": "text/event-stream"},
            )
            assert streamed.status_code == 200
            for _ in range(200):  # the memory written after the answers
                memory = await client.get("/v1/users/u1/memory", headers=HEADERS)
                if not memory.json()["pending"]:
                    break
                await asyncio.sleep(0.05)
            assert (await client.delete("/v1/threads/t-2", headers=HEADERS)).status_code < 300
            erased = await client.delete("/v1/users/u2", headers={**HEADERS, "X-User-Id": "u2"})
            assert erased.status_code < 300, erased.text
            page = await client.get("/metrics")
            assert page.status_code == 200
            return page.text

    return asyncio.run(workload())


def test_every_setting_is_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in readme.splitlines() if line.startswith("| `THREADKEEPER_"))
    fields = [f for f in Settings.__struct_fields__ if f not in ("storage", "unused")]
    missing = [
        f"THREADKEEPER_{f.upper()}" for f in fields if f"`THREADKEEPER_{f.upper()}`" not in table
    ]
    assert missing == [], f"settings the README's table does not list: {missing}"


def test_every_metric_named_in_the_docs_exists(exported: str) -> None:
    """... as a metric, or as a label of one (``threadkeeper_profile`` on ``target_info``);
    what the docs call dropped is nowhere."""
    known = declared_families() | set(FAMILY.findall(exported))
    resource = telemetry_resource("embedded").attributes  # target_info's labels under serve
    labels = set(LABEL.findall(exported)) | {key.replace(".", "_") for key in resource}
    for name in DROPPED:
        assert name not in labels | known, f"{name} is exported: {DROPPED[name]}"
    unknown: dict[str, list[str]] = {}
    for doc, text in doc_text():
        for name in sorted(set(METRIC.findall(text))):
            family = base(name)
            if family in known or name in known or name in labels or name in DROPPED:
                continue
            if instrumentation_declares(family):
                continue
            unknown.setdefault(family, []).append(doc)
    assert unknown == {}, f"metrics the docs name that the service does not export: {unknown}"


def _labels_by_family(exported: str) -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for name, inside in SERIES.findall(exported):
        labels.setdefault(base(name), set()).update(LABEL.findall(inside))
    return labels


def test_every_label_named_in_the_docs_exists_on_its_metric(exported: str) -> None:
    """The labels of dashboards.md's tables (``| `metric` | type | `label` (`value`, …), … |``)
    and of every ``metric{label=…}`` selector in the docs, on the series ``/metrics`` shows."""
    seen = _labels_by_family(exported)
    wrong: list[str] = []
    dashboards = (ROOT / "docs" / "dashboards.md").read_text(encoding="utf-8")
    for row in dashboards.splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) < 5 or not METRIC.fullmatch(cells[1].strip("`")):
            continue
        family = base(cells[1].strip("`"))
        named = re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cells[3]))
        if family in seen:
            wrong += [
                f"dashboards.md: {family}{{{n}}}"
                for n in named
                if n not in seen[family] and (family, n) not in CONDITIONAL
            ]
    for doc, text in doc_text():
        for name, inside in re.findall(METRIC.pattern + r"\{([^}]*)\}", text):
            family = base(name)
            for label in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", inside):
                if family in seen and label not in seen[family]:
                    wrong.append(f"{doc}: {family}{{{label}}}")
    assert wrong == [], f"labels the docs name that the metric does not have: {wrong}"
    assert {"threadkeeper_runs_total", "threadkeeper_run_duration_seconds"} <= set(seen)


def test_the_runs_status_values_in_the_docs_and_help_are_the_codes() -> None:
    """A stored run's ``status`` label is its outcome's status: the help text of the counter
    and dashboards.md name exactly those (they said ``escalated``; the status is
    ``escalate``)."""
    statuses = set(typing.get_args(ReplyStatus))
    described = metrics.RUNS._description  # type: ignore[attr-defined]
    row = next(
        line
        for line in (ROOT / "docs" / "dashboards.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `threadkeeper_runs_total`")
    )
    outcomes = re.search(r"stored outcome's \(([^)]*)\)", row)
    assert outcomes is not None, row
    assert set(re.findall(r"`([a-z_-]+)`", outcomes.group(1))) == statuses
    named = re.search(r"outcome's status \(([^)]*)\)", " ".join(described.split()))
    assert named is not None, described
    assert {s.strip() for s in named.group(1).split(",")} == statuses
