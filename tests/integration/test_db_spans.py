"""Database spans of a real run on each profile, against the real servers: the psycopg,
SQLAlchemy and redis instrumentations' spans sit under the run's span, and a secret used as
the user id, in the thread id and in the message is in none of them (nor in any other span of
the trace: the export is searched whole)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.api.conftest import TENANT, TOKEN, Servers, run, settings_for
from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import private_redis
from threadkeeper.app import instrumentation
from threadkeeper.app.application import create_app

SECRET = "zq7-secret-user-4411"
"""The user id, part of the thread id and of the message: a thread key is
``tenant:user:thread``, so it reaches every statement's parameters and every Redis key."""
THREAD = f"thread-{SECRET}"
EXPORTER = InMemorySpanExporter()
PROFILES = [
    "embedded",
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("redis-mysql", marks=pytest.mark.integration),
]
EXPECTED = {
    "embedded": {"opentelemetry.instrumentation.sqlalchemy"},
    "postgres": {"opentelemetry.instrumentation.psycopg"},
    "redis-mysql": {
        "opentelemetry.instrumentation.sqlalchemy",
        "opentelemetry.instrumentation.redis",
    },
}
"""The instrumentations whose spans a run makes (on postgres the engine's driver is psycopg:
its statements are psycopg's spans, not a second SQLAlchemy span each)."""


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    """The process's SDK provider (set once per process) with this module's exporter."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    sdk = trace.get_tracer_provider()
    assert isinstance(sdk, TracerProvider)
    sdk.add_span_processor(SimpleSpanProcessor(EXPORTER))
    yield
    instrumentation.uninstrument_storage()


@pytest.fixture
def servers(profile: str) -> Iterator[Servers | None]:
    if profile == "postgres":
        with fresh_schema() as url:
            yield Servers(postgres_url=url)
    elif profile == "redis-mysql":
        with private_redis() as redis, fresh_database() as url:
            yield Servers(redis_url=redis.url, mysql_url=url)
    else:
        yield None


def scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


def under(span: ReadableSpan, ancestor: ReadableSpan, by_id: dict[int, ReadableSpan]) -> bool:
    parent = span.parent
    while parent is not None:
        if parent.span_id == ancestor.context.span_id:
            return True
        above = by_id.get(parent.span_id)
        parent = above.parent if above is not None else None
    return False


@pytest.mark.parametrize("profile", PROFILES)
async def test_database_spans_under_the_run_without_values(
    profile: str, servers: Servers | None, tmp_path: Path
) -> None:
    instrumentation.uninstrument_storage()  # the app installs them (the global provider)
    EXPORTER.clear()
    app = create_app(settings_for(profile, tmp_path, servers))
    headers = {"X-Tenant-Id": TENANT, "X-User-Id": SECRET}
    if profile != "embedded":
        headers["Authorization"] = f"Bearer {TOKEN}"
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(headers)
        for turn in range(2):  # the second reads the first's checkpoint (FT.SEARCH on Redis)
            await run(client, THREAD, f"Is dental covered? my id is {SECRET} ({turn})")
        messages = await client.get(f"/v1/threads/{THREAD}/messages")
        assert SECRET in messages.text  # the secret was stored, and read back
    spans = EXPORTER.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    runs = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(runs) == 2
    database = [s for s in spans if scope(s).startswith("opentelemetry.instrumentation.")]
    database = [s for s in database if scope(s) != "opentelemetry.instrumentation.asgi"]
    in_runs = {scope(s) for s in database if any(under(s, r, by_id) for r in runs)}
    assert in_runs >= EXPECTED[profile], {scope(s) for s in database}
    for span in database:
        attributes = dict(span.attributes or {})
        assert set(attributes) <= instrumentation.ALLOWED, span.name
        assert span.kind is trace.SpanKind.CLIENT
        assert "db.statement.parameters" not in attributes
        statement = str(attributes.get("db.statement", attributes.get("db.query.text", "")))
        assert statement, span.name
        if scope(span) == "opentelemetry.instrumentation.redis":
            assert all(w == "?" for line in statement.split("\n") for w in line.split()[1:])
    if profile == "postgres":  # the round's own statements, on its transaction's connection
        commits = [s for s in spans if s.name == "threadkeeper.commit"]
        in_commits = [
            str((s.attributes or {}).get("db.statement", (s.attributes or {}).get("db.query.text")))
            for s in database
            if any(under(s, c, by_id) for c in commits)
        ]
        for wanted in ("INSERT INTO checkpoints", "tk_checkpoint_messages", "checkpoints_pruned"):
            assert any(wanted in st for st in in_commits), (wanted, in_commits)
    exported = json.dumps([json.loads(s.to_json()) for s in spans])
    assert SECRET not in exported
    assert "dental" not in json.dumps([json.loads(s.to_json()) for s in database])


@pytest.fixture
def own() -> Iterator[InMemorySpanExporter]:
    """The instrumentations on a provider of the test's own (not the global one)."""
    instrumentation.uninstrument_storage()
    exporter = InMemorySpanExporter()
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    assert instrumentation.instrument_storage(sdk)
    yield exporter
    instrumentation.uninstrument_storage()


def search(exporter: InMemorySpanExporter, *secrets: str) -> list[ReadableSpan]:
    spans = list(exporter.get_finished_spans())
    assert spans
    exported = json.dumps([json.loads(s.to_json()) for s in spans])
    for secret in secrets:
        assert secret not in exported
    return spans


def test_no_sdk_provider_installs_nothing() -> None:
    import psycopg
    import redis.asyncio

    instrumentation.uninstrument_storage()
    assert not instrumentation.instrument_storage(trace.NoOpTracerProvider())
    assert not hasattr(psycopg.AsyncConnection.connect, "__wrapped__")
    assert not hasattr(redis.asyncio.Redis.execute_command, "__wrapped__")
    assert instrumentation.instrument_backend(object()) == ()


@pytest.mark.integration
async def test_a_postgres_failure_is_its_type(own: InMemorySpanExporter) -> None:
    """A unique violation's message quotes the key (``DETAIL: Key (k)=(…) already exists``):
    the span says ``UniqueViolation``, nothing more."""
    import psycopg

    with fresh_schema(migrate=False) as url:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("CREATE TEMPORARY TABLE t (k text PRIMARY KEY)")
            await conn.execute("INSERT INTO t VALUES (%s)", (SECRET,))
            with pytest.raises(psycopg.errors.UniqueViolation):
                await conn.execute("INSERT INTO t VALUES (%s)", (SECRET,))
    (failed,) = [s for s in search(own, SECRET) if s.status.status_code is trace.StatusCode.ERROR]
    assert failed.status.description == "UniqueViolation"
    assert [dict(e.attributes or {}) for e in failed.events] == [
        {"exception.type": "UniqueViolation"}
    ]
    assert (failed.attributes or {})["db.statement"] == "INSERT INTO t VALUES (%s)"


@pytest.mark.integration
async def test_a_mysql_failure_is_its_type(own: InMemorySpanExporter) -> None:
    """MySQL's duplicate-key message quotes the value (``Duplicate entry '…'``)."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError
    from sqlalchemy.ext.asyncio import create_async_engine

    from threadkeeper.adapters.redis_mysql.backend import mysql_url

    with fresh_database(migrate=False) as url:
        engine = create_async_engine(mysql_url(url))
        assert instrumentation.instrument_engine(engine)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("CREATE TABLE t (k VARCHAR(64) PRIMARY KEY)"))
                await conn.execute(text("INSERT INTO t VALUES (:k)"), {"k": SECRET})
            with pytest.raises(IntegrityError):
                async with engine.begin() as conn:
                    await conn.execute(text("INSERT INTO t VALUES (:k)"), {"k": SECRET})
        finally:
            await engine.dispose()
    (failed,) = [s for s in search(own, SECRET) if s.status.status_code is trace.StatusCode.ERROR]
    assert failed.status.description == "IntegrityError"
    assert [dict(e.attributes or {}) for e in failed.events] == [
        {"exception.type": "IntegrityError"}
    ]
    assert (failed.attributes or {})["db.statement"] == "INSERT INTO t VALUES (%s)"


@pytest.mark.integration
def test_redis_search_keeps_neither_query_nor_documents(own: InMemorySpanExporter) -> None:
    """The instrumentation records a sync ``FT.SEARCH``'s query (``redis.search.query``) and
    each document found (``redis.search.xdoc_{key}.{field}``): all dropped."""
    import redis

    word = SECRET.replace("-", "")
    with private_redis() as server:
        client = redis.Redis.from_url(server.url)
        try:
            client.execute_command(
                "FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "body", "TEXT"
            )
            client.hset(f"doc:{word}", mapping={"body": word})
            pipe = client.pipeline()
            pipe.set(f"k:{word}", word)
            pipe.get(f"k:{word}")
            pipe.execute()
            # the instrumentation's own parsing of a RESP3 reply (a map) would raise KeyError
            # here: the redacted span keeps it from running
            found = client.execute_command("FT.SEARCH", "idx", word)
            assert (found[b"total_results"] if isinstance(found, dict) else found[0]) == 1
        finally:
            client.close()
    spans = search(own, word)
    names = [s.name for s in spans]
    assert "redis.search" in names
    assert "SET GET" in names  # the pipeline: its commands' names
    for span in spans:
        assert set(span.attributes or {}) <= instrumentation.ALLOWED


def test_the_standard_variable_leaves_instrumentations_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg
    import redis.asyncio
    from sqlalchemy.ext.asyncio import create_async_engine

    instrumentation.uninstrument_storage()
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "psycopg, sqlalchemy")
    try:
        assert instrumentation.instrument_storage(TracerProvider())
        assert not hasattr(psycopg.AsyncConnection.connect, "__wrapped__")
        assert hasattr(redis.asyncio.Redis.execute_command, "__wrapped__")
        assert not instrumentation.instrument_engine(create_async_engine("sqlite+aiosqlite://"))
    finally:
        instrumentation.uninstrument_storage()
