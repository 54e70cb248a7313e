"""``create_http_app``: the Litestar application of threadkeeper's HTTP contract.

Organised as one ``InitPlugin`` whose small ``_configure_*`` steps each add one concern
(routes, auth, problems, OpenAPI, metrics, lifespan) to the app config.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar, Router
from litestar.config.app import AppConfig
from litestar.connection import ASGIConnection
from litestar.di import Provide
from litestar.handlers import BaseRouteHandler
from litestar.middleware import DefineMiddleware
from litestar.plugins import InitPlugin
from litestar.plugins.opentelemetry import OpenTelemetryConfig
from litestar.plugins.problem_details import ProblemDetailsPlugin
from litestar.types import Guard
from opentelemetry import trace

from threadkeeper.app.http.auth import BEARER_SCHEME, TokenTable, service_token_guard
from threadkeeper.app.http.body_deadline import BodyDeadline
from threadkeeper.app.http.openapi import ClosedStructSchemaPlugin, openapi_config
from threadkeeper.app.http.ops import live, metrics, ready
from threadkeeper.app.http.problems import problem_details_config
from threadkeeper.app.http.ratelimit import RunRateLimit
from threadkeeper.app.http.request_problems import request_problems
from threadkeeper.app.http.routes import SERVICE_STATE, V1_HANDLERS, provide_caller
from threadkeeper.app.http.settings import HttpSettings
from threadkeeper.app.service import ThreadService


class ThreadkeeperHttpPlugin(InitPlugin):
    """Adds the threadkeeper HTTP contract over ``service`` to a Litestar app."""

    def __init__(self, service: ThreadService, settings: HttpSettings) -> None:
        self._service = service
        self._settings = settings

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        self._configure_routes(app_config)
        self._configure_problems(app_config)
        self._configure_openapi(app_config)
        self._configure_metrics(app_config)
        self._configure_lifespan(app_config)
        app_config.debug = self._settings.debug
        return app_config

    def _provide_service(self) -> ThreadService:
        return self._service

    def _provide_run_rate_limit(self) -> RunRateLimit | None:
        return self._settings.run_rate_limit

    def _provide_sse_heartbeat(self) -> float:
        return self._settings.sse_heartbeat_seconds

    def _configure_routes(self, app_config: AppConfig) -> None:
        settings = self._settings
        guards: list[Guard] = [name_server_span]  # first: a refused request's span is named too
        if settings.auth_enabled:
            guards.append(service_token_guard(TokenTable(settings.tokens())))
        guards.append(request_problems)  # every problem of the request at once (422)
        v1 = Router(
            path="/v1",
            route_handlers=V1_HANDLERS,
            dependencies={"caller": Provide(provide_caller)},
            guards=guards,
            security=[{BEARER_SCHEME: []}] if settings.auth_enabled else None,
            tags=["v1"],
            request_max_body_size=settings.max_body_bytes,
        )
        app_config.route_handlers.extend([v1, live, ready])
        app_config.dependencies["service"] = Provide(self._provide_service, sync_to_thread=False)
        app_config.state[SERVICE_STATE] = self._service
        app_config.dependencies["run_rate_limit"] = Provide(
            self._provide_run_rate_limit, sync_to_thread=False
        )
        app_config.dependencies["sse_heartbeat"] = Provide(
            self._provide_sse_heartbeat, sync_to_thread=False
        )

    def _configure_problems(self, app_config: AppConfig) -> None:
        ProblemDetailsPlugin(problem_details_config(debug=self._settings.debug)).on_app_init(
            app_config
        )

    def _configure_openapi(self, app_config: AppConfig) -> None:
        app_config.openapi_config = openapi_config(
            self._settings.openapi_title,
            self._settings.openapi_version,
            bearer=self._settings.auth_enabled,
        )
        # Before Litestar's own schema plugins (appended last), which would otherwise build the
        # request bodies' schemas. Inserted after this plugin, never before it: Litestar is
        # iterating over the list to call each plugin's on_app_init.
        plugins = app_config.plugins
        if not any(isinstance(p, ClosedStructSchemaPlugin) for p in plugins):
            at = plugins.index(self) + 1 if self in plugins else 0
            plugins.insert(at, ClosedStructSchemaPlugin())

    def _configure_metrics(self, app_config: AppConfig) -> None:
        app_config.route_handlers.append(metrics)
        # the server span of each API request (a no-op until a TracerProvider is installed:
        # threadkeeper.app.telemetry) — runs, model and tool calls are its children — and the
        # HTTP server metrics (http.server.duration, http.server.active_requests) on the
        # process's MeterProvider, labelled by route (``name_server_span``), never by path;
        # that provider's view keeps only attributes of bounded sets — not the Host header's
        # http.server_name (threadkeeper.app.telemetry.HTTP_METRIC_ATTRIBUTES)
        app_config.middleware.append(
            OpenTelemetryConfig(
                exclude=["^/metrics$", "^/health/", "^/schema"],
                exclude_spans=["send", "receive"],
                scope_span_details_extractor=unrouted_span_details,
                server_request_hook_handler=without_path,
            ).middleware
        )
        # inside the server span: its status and the HTTP metrics show the 408
        app_config.middleware.append(
            DefineMiddleware(BodyDeadline, seconds=self._settings.body_timeout_seconds)
        )

    def _configure_lifespan(self, app_config: AppConfig) -> None:
        app_config.on_startup.extend(self._settings.on_startup)
        app_config.on_shutdown.extend(self._settings.on_shutdown)
        app_config.lifespan.extend(self._settings.lifespan)


def unrouted_span_details(scope: Any) -> tuple[str, dict[str, Any]]:
    """The server span's name before routing: the method alone (``name_server_span`` names it
    by route once one matches; a request that matches none keeps this name)."""
    return str(scope.get("method", "")).strip() or "HTTP", {}


def without_path(span: trace.Span, scope: dict[str, Any]) -> None:
    """Keep the request path — it holds thread and user ids — out of the server span."""
    if span.is_recording():
        span.set_attribute("http.target", "")
        span.set_attribute("http.url", f"{scope.get('scheme', 'http')}://")


class _Route:
    """What the ASGI instrumentation reads a request's route from (Starlette's route shape)."""

    __slots__ = ("path_format",)

    def __init__(self, path_format: str) -> None:
        self.path_format = path_format


def name_server_span(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Name the request's server span by route, not by path, and keep the path's ids out of
    it: ``POST /v1/threads/{thread_id:str}/runs``. The OpenTelemetry middleware starts the span
    before routing; a guard of the ``/v1`` router runs once the route is known (hooks would be
    overridden by a handler's own ``before_request``). Paths hold thread and user ids:
    unbounded cardinality, and user ids are not for traces."""
    template = str(connection.scope.get("path_template") or "")
    if not template:
        return
    # the ASGI instrumentation labels its HTTP metrics with ``scope["route"].path_format``
    # (``http.target``) when there is one, and with no path at all otherwise
    connection.scope["route"] = _Route(template)  # type: ignore[typeddict-unknown-key]
    span = trace.get_current_span()
    if not span.is_recording():
        return
    method = str(connection.scope.get("method", ""))
    span.update_name(f"{method} {template}")
    span.set_attribute("http.route", template)
    span.set_attribute("http.target", template)
    span.set_attribute("http.url", f"{connection.url.scheme}://{connection.url.netloc}{template}")


def create_http_app(service: ThreadService, settings: HttpSettings) -> Litestar:
    """The HTTP API over ``service`` (see DESIGN "HTTP contract" and docs/api.md).

    The app does not configure logging (Litestar's default would install its own handler and
    format on the root logger): the process does — ``threadkeeper serve`` sends every logger
    through one handler in one format (``threadkeeper.app.cli.logs.serve_logging``)."""
    return Litestar(plugins=[ThreadkeeperHttpPlugin(service, settings)], logging_config=None)
