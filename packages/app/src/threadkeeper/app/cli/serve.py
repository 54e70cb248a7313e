"""``threadkeeper serve``: the HTTP service on a socket it binds itself, drained on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import math
import socket
import sys
from typing import Any

from threadkeeper.app.cli.common import (
    _fail,
    _models,
    _one_line,
    _schema_problems,
    _settings,
    _storage,
    log,
)
from threadkeeper.app.cli.logs import serve_logging
from threadkeeper.app.config import (
    ConfigError,
    Settings,
)


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a port already in use is one line before anything
    starts (uvicorn would say so only after the service reported ready)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it every response on a kept-alive connection waited ~40 ms for the client's
    # delayed ACK (Nagle's algorithm holding the body behind the headers)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = (
            "is already in use (another server listens there: stop it, or pass --port)"
            if exc.errno == errno.EADDRINUSE
            else f"cannot be used: {exc.strerror or exc}"
        )
        _fail(f"cannot start: {host}:{port} {reason}")
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings()
    problems, server = _schema_problems(settings)
    if problems is None:
        return 2
    if problems:
        print(
            f"threadkeeper: the {server} schema is not ready ({'; '.join(problems)}): "
            "run `threadkeeper migrate` first",
            file=sys.stderr,
        )
        return 2
    sock = _listen(args.host, args.port)
    try:
        with serve_logging(args.log_level, settings):
            return _run_server(settings, args, sock)
    except KeyboardInterrupt:  # as uvicorn.run: Ctrl-C is a normal stop
        return 0
    finally:
        sock.close()


def unguarded_warning(settings: Settings, host: str, where: str) -> str | None:
    """What ``serve`` warns of when it answers anyone who can reach it: no service token (the
    embedded profile's documented default, for a server on its own machine) on ``host``, an
    address beyond loopback (``--host 0.0.0.0``). ``None`` when a token is set or ``host`` is
    a loopback address."""
    import ipaddress

    if settings.service_token or settings.service_tokens:
        return None
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # fe80::1%eth0: the zone
    except ValueError:
        address = None
    if address is not None:
        mapped = getattr(address, "ipv4_mapped", None)
        if address.is_loopback or (mapped is not None and mapped.is_loopback):
            return None
    return (
        f"serving the {settings.profile} profile on {where}, beyond this machine, without a "
        "service token: anyone who can reach it can read, write and erase every tenant's "
        "threads and memory by naming them in X-Tenant-Id and X-User-Id. Set "
        "THREADKEEPER_SERVICE_TOKEN, or listen on 127.0.0.1 (--host)"
    )


def _draining_server_class() -> Any:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """One SIGTERM/SIGINT drains: uvicorn stops accepting and waits for the requests in
        flight, while the service lets its runs finish for ``grace`` seconds and then cancels
        the rest — a cancelled run leaves its thread unchanged and its client gets a 503 or an
        ``error`` event, not a dropped connection."""

        def __init__(self, config: uvicorn.Config, service: Any, grace: float) -> None:
            super().__init__(config)
            self.service = service
            self.grace = grace

        async def shutdown(self, sockets: Any = None) -> None:
            # still listening while the runs finish (issue 29, item 8): a request that
            # arrives meanwhile is answered — a run 503 ``unavailable``, readiness 503
            # "shutting down", reads served — instead of refused; then uvicorn stops
            # accepting and closes what is left
            try:
                await self.service.drain(self.grace)
            finally:
                await super().shutdown(sockets)

    return DrainingServer


def settle_heap() -> int:
    """Exempt what start-up built from the garbage collector's full collections (``gc.freeze``).

    Start-up leaves ~230,000 objects tracked (LangChain, pydantic schemas, the knowledge base);
    a full collection walked them all: 120-200 ms on the CI machine, during which no request
    makes progress, every few hundred runs; after this one takes 8-9 ms
    (``benchmarks/profile_turns.py --gc``; docs/operations.md, "serve"). Frozen objects are
    never collected — they are the process's long-lived state anyway. Returns how many were
    frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _run_server(settings: Settings, args: argparse.Namespace, sock: socket.socket) -> int:
    import uvicorn

    DrainingServer = _draining_server_class()

    from threadkeeper.app.application import create_app, startup_problem
    from threadkeeper.app.container import make_container
    from threadkeeper.app.taskdump import install_task_dump
    from threadkeeper.app.telemetry import configure_metrics, configure_tracing, otlp_protocol

    if configure_tracing(settings.profile):
        log.info("exporting traces over OTLP (%s)", otlp_protocol())
    configure_metrics(settings.profile)

    container = make_container(settings)
    try:
        app = create_app(settings, container=container)
    except (ConfigError, ValueError) as exc:
        print(f"threadkeeper: configuration error: {_one_line(exc, settings)}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    where = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def serve() -> int:
        # Build what the lifespan would (the backend — with its data-dir lock where it has one, held
        # from here on —, model, hooks, agent) in the server's own loop before uvicorn starts:
        # a setting that cannot work is one clear line, not a traceback from the lifespan.
        try:
            service = await container.service()  # type: ignore[misc]  # the lifespan's too
        except Exception as exc:
            await container.shutdown_resources()  # type: ignore[misc]
            print(f"threadkeeper: cannot start: {startup_problem(exc, settings)}", file=sys.stderr)
            if args.log_level in ("debug", "trace"):
                raise
            return 2
        log.info(
            "serving the %s profile on %s (data: %s; model: %s)",
            settings.profile,
            where,
            _storage(settings),
            _models(settings),
        )
        if (warning := unguarded_warning(settings, host, where)) is not None:
            log.warning("%s", warning)
        install_task_dump(asyncio.get_running_loop())  # kill -USR1: where each task waits
        grace = settings.shutdown_grace_seconds
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=args.log_level,
            log_config=None,  # serve_logging: one format for every logger
            lifespan="on",
            # the drain (below) ends every run by ``grace``; uvicorn's own cancellation of
            # requests still open comes a little later, as a last resort
            timeout_graceful_shutdown=math.ceil(grace) + 5,
            # idle connections outlive the client's pool / the load balancer's idle timeout
            timeout_keep_alive=math.ceil(settings.http_keepalive_seconds),
            # past it a request is answered 503 at once (uvicorn's own plain-text answer)
            limit_concurrency=settings.http_max_connections,
        )
        server = DrainingServer(config, service, grace)
        container.knowledge().prepare()  # the search's imports, before the first request
        settle_heap()
        try:
            await server.serve(sockets=[sock])
        finally:
            await container.shutdown_resources()  # type: ignore[misc]  # no-op after lifespan
        return 0 if server.started else 3

    return asyncio.run(serve())
