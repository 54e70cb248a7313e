"""``create_app()``: the Litestar application for the configured profile."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from litestar import Litestar

from threadkeeper.app.config import ConfigError, Settings, load_settings, redact, secrets_of
from threadkeeper.app.container import Container, make_container
from threadkeeper.app.http import HttpSettings, create_http_app
from threadkeeper.app.http.ratelimit import RunRateLimit
from threadkeeper.app.runs import RunService
from threadkeeper.app.service import Unavailable
from threadkeeper.app.storage import startup_problem as profile_problem
from threadkeeper.app.sweeper import RetentionSweeper
from threadkeeper.app.telemetry import configure_metrics

log = logging.getLogger("threadkeeper")


class ServiceProxy:
    """The ``ThreadService`` the routes call; its target exists once the lifespan opened the
    backend. Before that (and after shutdown) every call answers 503."""

    def __init__(self) -> None:
        self.target: RunService | None = None

    def __getattr__(self, name: str) -> Any:
        target = self.target
        if target is None:
            if name == "ready":

                async def not_ready() -> dict[str, str]:
                    return {"service": "starting"}

                return not_ready
            raise Unavailable("the service is starting or stopping")
        return getattr(target, name)


def startup_problem(exc: BaseException, settings: Settings) -> str:
    """One line saying what keeps the service from starting, and what to do about it
    (credentials of the settings masked: a driver's error may quote its URL)."""
    from threadkeeper.hooks.pipeline import HookConfigError

    text = redact(" ".join(str(exc).split()) or type(exc).__name__, secrets_of(settings))
    if isinstance(exc, ConfigError):
        return f"configuration error: {text}"
    if isinstance(exc, HookConfigError):
        return (
            f"configuration error: THREADKEEPER_HOOKS={settings.hook_names()!r} "
            f"(profile {settings.profile}): {text}"
        )
    own = profile_problem(exc, settings)
    if own is not None:
        return redact(own, secrets_of(settings))
    return f"{type(exc).__name__}: {text}"


def _sweeper(settings: Settings, service: RunService) -> RetentionSweeper | None:
    if not settings.retention_sweep_minutes or settings.retention_days is None:
        return None
    return RetentionSweeper(
        service.retention,
        older_than=timedelta(days=settings.retention_days),
        interval=timedelta(minutes=settings.retention_sweep_minutes),
        memory=service.retention if settings.retention_memory else None,
    )


def _share_rate_limit(rate_limit: RunRateLimit | None, service: RunService) -> None:
    """Count runs where every replica sees them, if the profile has a server for it."""
    if rate_limit is None:
        return
    shared = service.backend.rate_windows
    if shared is not None:
        rate_limit.windows = shared
        where = f"shared by every replica ({type(shared).__name__})"
    else:
        where = "kept in this process (per replica)"
    log.info("rate limit: %d runs per user per minute, %s", rate_limit.per_minute, where)


def create_app(settings: Settings | None = None, *, container: Container | None = None) -> Litestar:
    """The application; the backend, model, hooks and agent are built in its lifespan
    (``threadkeeper serve`` builds them first, so a bad setting is one clear line)."""
    settings = settings or load_settings()
    configure_metrics(settings.profile)  # once per process: /metrics and OTLP (telemetry)
    container = container or make_container(settings)
    proxy = ServiceProxy()
    rate_limit = (
        RunRateLimit(settings.rate_limit_per_minute, profile=settings.profile)
        if settings.rate_limit_per_minute
        else None
    )

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        # the configured profile's backend is opened here, when the service is first built
        try:
            try:
                service: RunService = await container.service()  # type: ignore[misc]
            except Exception as exc:
                log.error("threadkeeper cannot start: %s", startup_problem(exc, settings))
                raise
            _share_rate_limit(rate_limit, service)
            proxy.target = service
            service.start_followups()
            sweeper = _sweeper(settings, service)
            if sweeper is not None:
                sweeper.start()
                app.state.sweeper = sweeper
            log.info(
                "threadkeeper ready: profile %s, model %s%s",
                settings.profile,
                settings.model,
                f" (fallback {settings.model_fallback})" if settings.model_fallback else "",
            )
            yield
            proxy.target = None
            if sweeper is not None:
                await sweeper.stop()
            # uvicorn gave requests in flight up to the grace period already; what is left
            # (JSON runs whose request was cancelled) gets a moment more, then is cancelled
            await service.drain(grace=1.0)  # follow-up work in flight too: done or handed back
        finally:
            proxy.target = None
            await container.shutdown_resources()  # type: ignore[misc]

    http = HttpSettings(
        service_token=settings.service_token,
        service_tokens=settings.service_tokens or {},
        require_token=settings.requires_token,
        lifespan=[lifespan],
        run_rate_limit=rate_limit,
        sse_heartbeat_seconds=settings.sse_heartbeat_seconds,
        body_timeout_seconds=settings.http_body_timeout_seconds,
    )
    app = create_http_app(proxy, http)
    app.state.container = container
    app.state.settings = settings
    return app
