"""Database spans: the psycopg, SQLAlchemy and redis instrumentations, with the statement's
text but never its parameters, and nothing of a Redis command but its name.

Installed only when tracing is on (an SDK ``TracerProvider``: the global one, or the one
given); without one nothing is patched and nothing is paid.
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` (``psycopg``, ``redis``, ``sqlalchemy``, or ``*``)
leaves some or all of them out. Per profile:

- postgres: ``PsycopgInstrumentor`` (process-wide, before the pool opens: it patches
  ``AsyncConnection.connect``, so a connection opened earlier is not traced). It covers the
  saver's and the store's pool, the advisory-lock session and the SQLAlchemy engine (whose
  driver is psycopg): the engine gets no second, SQLAlchemy span per statement.
- redis-mysql: ``RedisInstrumentor`` (process-wide: it patches the client classes) and the
  SQLAlchemy engine over asyncmy, instrumented once the backend is open (``engine.sync_engine``).
  The memory store's own asyncmy pool has no instrumentation (there is none for asyncmy).
- embedded: the SQLAlchemy engine over aiosqlite (run records, claims, rounds); the saver and
  the store share its raw aiosqlite connection, which no instrumentation sees.

What a span may carry is an allowlist (``ALLOWED``): the statement text (placeholders only:
parameters are never captured, the sqlcommenter is off), the operation, the system, the
database, the server and the user the service connects as. Everything else an instrumentation
sets is dropped — the redis instrumentation's ``redis.search.query`` (an ``FT.SEARCH``
query holds thread keys, ``tenant:user:thread``) and ``redis.search.xdoc_*`` (documents
found, named by their keys) among them. A Redis statement is its command names and one ``?``
per argument, whatever the instrumentation's version does. A failure is its exception's type
(event ``exception`` with ``exception.type``, and the status' description): a driver's message
can quote a value (a duplicate key).

The spans are children of the current span (the run's): the instrumentations start them in
the caller's context (SQLAlchemy's greenlet carries the asyncio task's context).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util import types

ALLOWED = frozenset(
    {
        "db.system",
        "db.system.name",
        "db.name",
        "db.namespace",
        "db.statement",
        "db.query.text",
        "db.operation",
        "db.operation.name",
        "db.user",
        "db.redis.database_index",
        "db.redis.args_length",
        "db.redis.pipeline_length",
        "net.peer.name",
        "net.peer.port",
        "net.transport",
        "network.transport",
        "server.address",
        "server.port",
    }
)
"""The attributes a database span keeps; any other is dropped."""
STATEMENTS = ("db.statement", "db.query.text")


def _command_only(statement: str) -> str:
    """``SET ? ? ?`` for ``SET k v x`` (each line of a pipeline alike): a Redis command's
    name and one ``?`` per argument."""
    lines = []
    for line in statement.split("\n"):
        words = line.split(" ")
        lines.append(" ".join([words[0], *("?" * (len(words) - 1))]))
    return "\n".join(lines)


class RedactedSpan(Span):
    """A database span that records only the ``ALLOWED`` attributes and a failure's type."""

    __slots__ = ("_failure", "_redis", "_span")

    def __init__(self, span: Span, *, redis: bool) -> None:
        self._span = span
        self._redis = redis
        self._failure: str | None = None

    @property
    def name(self) -> str:
        """Empty: only the redis instrumentation reads it, to decide whether to add the
        ``FT.CREATE`` / ``FT.SEARCH`` attributes — dropped anyway, and its parsing of a RESP3
        ``FT.SEARCH`` reply (a map) raises ``KeyError`` into the caller's command."""
        return ""

    def _value(self, key: str, value: types.AnyValue) -> types.AnyValue:
        if self._redis and key in STATEMENTS and isinstance(value, str):
            return _command_only(value)
        return value

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if key in ALLOWED:
            self._span.set_attribute(key, self._value(key, value))

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        self._span.set_attributes(
            {k: self._value(k, v) for k, v in attributes.items() if k in ALLOWED}
        )

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        """Dropped: no instrumentation adds events but through ``record_exception``."""

    def update_name(self, name: str) -> None:
        """Kept as started (the operation, or the Redis command)."""

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self._failure = type(exception).__name__
        self._span.add_event("exception", {"exception.type": self._failure}, timestamp)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        code = status.status_code if isinstance(status, Status) else status
        # the description an instrumentation gives is the driver's message: the type instead
        self._span.set_status(Status(code, self._failure if code is StatusCode.ERROR else None))

    def fail(self, exception: BaseException) -> None:
        self.record_exception(exception)
        self.set_status(StatusCode.ERROR)

    def end(self, end_time: int | None = None) -> None:
        self._span.end(end_time)

    def get_span_context(self) -> SpanContext:
        return self._span.get_span_context()

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        self._span.add_link(context, attributes)


class RedactingTracer(trace.Tracer):
    """The tracer an instrumentation gets: its spans are ``RedactedSpan``s, and an exception
    is recorded by its type only (never the SDK's message and stack trace)."""

    def __init__(self, tracer: trace.Tracer, *, redis: bool) -> None:
        self._tracer = tracer
        self._redis = redis

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        span = self._tracer.start_span(
            name,
            context,
            kind,
            None,
            links,
            start_time,
            record_exception=False,
            set_status_on_exception=False,
        )
        redacted = RedactedSpan(span, redis=self._redis)
        if attributes:
            redacted.set_attributes(attributes)
        return redacted

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            name,
            context,
            kind,
            None,
            links,
            start_time,
            record_exception=False,
            set_status_on_exception=False,
            end_on_exit=end_on_exit,
        ) as span:
            redacted = RedactedSpan(span, redis=self._redis)
            if attributes:
                redacted.set_attributes(attributes)
            try:
                yield redacted
            except Exception as exc:
                if span.is_recording():
                    redacted.fail(exc)
                raise


class RedactingTracerProvider(trace.TracerProvider):
    """``provider``'s tracers, as ``RedactingTracer``s."""

    def __init__(self, provider: trace.TracerProvider, *, redis: bool = False) -> None:
        self._provider = provider
        self._redis = redis

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace.Tracer:
        tracer = self._provider.get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
        return RedactingTracer(tracer, redis=self._redis)


_provider: trace.TracerProvider | None = None
"""The provider ``instrument_storage`` installed the instrumentations with (``None``: off)."""
_engines: weakref.WeakSet[Any] = weakref.WeakSet()
"""The engines ``instrument_engine`` traced."""


def _sdk_provider(provider: trace.TracerProvider | None) -> trace.TracerProvider | None:
    provider = provider if provider is not None else trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # no SDK installed: tracing is off
    return provider


DISABLED = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
"""The standard variable: a comma-separated list of instrumentations (``psycopg``, ``redis``,
``sqlalchemy``) not to install, or ``*`` for none of them."""


def disabled(name: str) -> bool:
    """Whether ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` turns instrumentation ``name`` off."""
    names = {n.strip() for n in os.environ.get(DISABLED, "").split(",")}
    return name in names or "*" in names


def instrument_storage(tracer_provider: trace.TracerProvider | None = None) -> bool:
    """Install the process-wide database instrumentations (psycopg, redis) on
    ``tracer_provider`` (default: the global one), if it is an SDK provider; whether they are
    installed. Call it before the backend opens (psycopg traces only connections opened
    after it). Idempotent: a second call changes nothing."""
    global _provider
    if _provider is not None:
        return True
    provider = _sdk_provider(tracer_provider)
    if provider is None:
        return False
    if not disabled("psycopg"):
        with contextlib.suppress(ImportError):  # the postgres extra
            from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

            PsycopgInstrumentor().instrument(
                tracer_provider=RedactingTracerProvider(provider),
                enable_commenter=False,
                capture_parameters=False,
            )
    if not disabled("redis"):
        with contextlib.suppress(ImportError):  # the redis-mysql extra
            from opentelemetry.instrumentation.redis import RedisInstrumentor

            RedisInstrumentor().instrument(
                tracer_provider=RedactingTracerProvider(provider, redis=True)
            )
    _provider = provider
    return True


def _psycopg_traced() -> bool:
    try:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    except ImportError:
        return False
    return bool(PsycopgInstrumentor().is_instrumented_by_opentelemetry)


def instrument_engine(engine: Any) -> bool:
    """SQLAlchemy spans for ``engine`` (an ``AsyncEngine`` or an ``Engine``), once
    ``instrument_storage`` has installed the instrumentations; whether it is traced now. An
    engine whose driver psycopg traces already is left alone (one span per statement)."""
    if _provider is None or disabled("sqlalchemy"):
        return False
    from opentelemetry import metrics
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.instrumentation.sqlalchemy.version import __version__
    from opentelemetry.semconv.metrics import MetricInstruments
    from sqlalchemy import event

    sync = getattr(engine, "sync_engine", engine)
    if sync.dialect.driver == "psycopg" and _psycopg_traced():
        return True
    if sync in _engines:
        return True
    tracer = RedactingTracerProvider(_provider).get_tracer(
        "opentelemetry.instrumentation.sqlalchemy", __version__
    )
    usage = metrics.get_meter("opentelemetry.instrumentation.sqlalchemy", __version__)
    # first of the engine's error listeners: the failure by its type, before the
    # instrumentation sets the driver's message as the status and ends the span
    event.listen(sync, "handle_error", _failed, insert=True)
    EngineTracer(  # type: ignore[no-untyped-call]
        tracer,
        sync,
        usage.create_up_down_counter(
            name=MetricInstruments.DB_CLIENT_CONNECTIONS_USAGE,
            unit="connections",
            description="The number of connections that are currently in state described by "
            "the state attribute.",
        ),
        enable_commenter=False,
    )
    _engines.add(sync)
    return True


def _failed(context: Any) -> None:
    span = getattr(context.execution_context, "_otel_span", None)
    if isinstance(span, RedactedSpan):
        span.record_exception(context.original_exception)


def instrument_backend(backend: Any) -> Sequence[Any]:
    """``instrument_engine`` on each SQLAlchemy engine the opened ``backend`` holds (its
    fields); the engines traced."""
    if _provider is None:
        return ()
    from sqlalchemy.ext.asyncio import AsyncEngine

    engines = [v for v in vars(backend).values() if isinstance(v, AsyncEngine)]
    return [e for e in engines if instrument_engine(e)]


def uninstrument_storage() -> None:
    """Undo ``instrument_storage`` and ``instrument_engine`` (tests)."""
    global _provider
    if _provider is None:
        return
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from sqlalchemy import event

    with contextlib.suppress(ImportError):
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        PsycopgInstrumentor().uninstrument()
    with contextlib.suppress(ImportError):
        from opentelemetry.instrumentation.redis import RedisInstrumentor

        RedisInstrumentor().uninstrument()
    EngineTracer.remove_all_event_listeners()  # type: ignore[no-untyped-call]
    for engine in list(_engines):
        with contextlib.suppress(Exception):
            event.remove(engine, "handle_error", _failed)
    _engines.clear()
    _provider = None
