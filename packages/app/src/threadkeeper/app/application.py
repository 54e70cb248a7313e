"""``create_app()``: the Litestar application for the configured profile."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from litestar import Litestar

from threadkeeper.app.config import Settings, load_settings
from threadkeeper.app.container import Container, make_container
from threadkeeper.app.http import HttpSettings, create_http_app
from threadkeeper.app.runs import RunService
from threadkeeper.app.service import Unavailable
from threadkeeper.app.sweeper import RetentionSweeper

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


def _sweeper(settings: Settings, service: RunService) -> RetentionSweeper | None:
    if not settings.retention_sweep_minutes or settings.retention_days is None:
        return None
    return RetentionSweeper(
        service.retention,  # type: ignore[arg-type]
        older_than=timedelta(days=settings.retention_days),
        interval=timedelta(minutes=settings.retention_sweep_minutes),
    )


def create_app(settings: Settings | None = None, *, container: Container | None = None) -> Litestar:
    settings = settings or load_settings()
    container = container or make_container(settings)
    proxy = ServiceProxy()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        # only the selected profile's backend is opened (Selector), when first asked for
        try:
            service: RunService = await container.service()  # type: ignore[misc]
            proxy.target = service
            sweeper = _sweeper(settings, service)
            if sweeper is not None:
                sweeper.start()
                app.state.sweeper = sweeper
            log.info("threadkeeper ready: profile %s", settings.profile)
            yield
            proxy.target = None
            if sweeper is not None:
                await sweeper.stop()
            await service.wait_idle()
        finally:
            proxy.target = None
            await container.shutdown_resources()  # type: ignore[misc]

    http = HttpSettings(
        service_token=settings.service_token,
        service_tokens=settings.service_tokens or {},
        require_token=settings.profile != "embedded",
        lifespan=[lifespan],
    )
    app = create_http_app(proxy, http)
    app.state.container = container
    app.state.settings = settings
    return app
