"""``threadkeeper`` — serve, chat, tokens, replay, migrate, retention, export, export-runs,
doctor.

Each command builds only what it uses: ``replay``, ``export``, ``export-runs``,
``retention`` and ``doctor``
open the profile's backend alone (no model, hooks, agent or knowledge-base index: a run's
documents are rendered from the knowledge base only when its prompt had some), and import
nothing else — start-up, mostly imports, is most of what a command takes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import json
import logging
import math
import os
import re
import select
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from threadkeeper.app.config import (
    ConfigError,
    Settings,
    describe,
    load_settings,
    mask_url,
    redact,
    secrets_of,
)

if TYPE_CHECKING:
    from threadkeeper.domain.followups import FollowUpCounts

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TENANT = "demo"
DEFAULT_USER = "demo-user"
TOKEN_VARIABLE = "THREADKEEPER_SERVICE_TOKEN"
TENANT_OR_USER = (
    r"(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,126}"
    r"|\.\.[A-Za-z0-9._-]{1,126})"
)
"""``threadkeeper.domain.threads.TENANT_OR_USER_ID`` (checked equal by the unit tests; the
domain module is not imported for ``--help``)."""
THREAD = (
    r"(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,126}"
    r"|\.\.[A-Za-z0-9._:-]{1,126})"
)
"""``threadkeeper.domain.threads.THREAD_ID``."""
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

log = logging.getLogger("threadkeeper")


def _fail(message: str, code: int = 2) -> NoReturn:
    """One line on standard error, then exit (status 2: the command was given something that
    cannot work)."""
    print(f"threadkeeper: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(code)


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        _fail(f"configuration error: {exc}")


def _one_line(exc: BaseException, settings: Settings | None = None) -> str:
    """An exception as one line, credentials masked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text, secrets_of(settings) if settings is not None else set())


# -- arguments ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (and exit status 2), not the usage text and a line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _matching(pattern: str, what: str, rule: str) -> Any:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}: {rule}")
        return value

    return check


_tenant_or_user_arg = _matching(
    TENANT_OR_USER,
    "a tenant id",
    "1 to 128 of the letters A-Z and a-z, digits and . _ - (not . or ..)",
)


def _user_arg(value: str) -> str:
    """A user id as the backend sends it (``domain.threads.user_id_problem``)."""
    from threadkeeper.domain.threads import user_id_problem

    problem = user_id_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _stored_user(user_id: str) -> str:
    from threadkeeper.domain.threads import stored_user_id

    return stored_user_id(user_id)


_thread_arg = _matching(
    THREAD,
    "a thread id",
    "1 to 128 of the letters A-Z and a-z, digits and . _ : - (not . or ..)",
)


def _run_id(value: str) -> str:
    """A run id in any letter case, canonical (lower case) as the API stores it."""
    if not re.fullmatch(UUID, value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a run id (a UUID)")
    return str(uuid.UUID(value))


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def _counter_name(value: str) -> str:
    from threadkeeper.app.counters import NAMED

    if value in NAMED:
        return value
    if not value.endswith(".json"):
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(NAMED)} or a tokenizer.json path, not {value!r}"
        )
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"{value} is not a file")
    return value


# -- backends ----------------------------------------------------------------------------


def _storage_failure(exc: BaseException, settings: Settings) -> NoReturn:
    """A storage server out of reach: one line, exit status 1."""
    _fail(f"cannot reach the {settings.profile} storage: {_one_line(exc, settings)}", code=1)


def _run_on_storage(settings: Settings, work: Any) -> Any:
    """``asyncio.run(work)``; a schema not ready or a storage server out of reach is one line
    (credentials masked), not a traceback."""
    try:
        return asyncio.run(work)
    except ConfigError as exc:
        _fail(f"configuration error: {_one_line(exc, settings)}")
    except Exception as exc:
        from threadkeeper.app.service import storage_unreachable

        if storage_unreachable(exc):
            _storage_failure(exc, settings)
        raise


# -- serve -------------------------------------------------------------------------------


def _schema_problems(settings: Settings) -> tuple[list[str] | None, str | None]:
    """The profile's schema problems (``None``: its database cannot be reached) and the
    server holding its schema (``None``: the profile sets its tables up at start)."""
    from threadkeeper.app.storage import schema_problems, schema_server

    server = schema_server(settings)
    if server is None:
        return [], None
    try:
        return asyncio.run(schema_problems(settings)), server
    except Exception as exc:
        print(f"threadkeeper: cannot reach {server}: {_one_line(exc, settings)}", file=sys.stderr)
        return None, server


def _storage(settings: Settings) -> str:
    """Where the profile keeps its data, credentials masked (the start-up line)."""
    from threadkeeper.app.storage import storage_of

    return mask_url(storage_of(settings))


def _models(settings: Settings) -> str:
    if settings.model_fallback:
        return f"{settings.model}, fallback {settings.model_fallback}"
    return settings.model


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
THIRD_PARTY_LOG_LEVEL = logging.WARNING
"""Libraries' own loggers (httpx's line per request, bm25s's index building, …) below
``--log-level debug``."""


class LogFormatter(logging.Formatter):
    """The one log format of ``serve`` (threadkeeper, uvicorn, Litestar and libraries alike),
    every credential of the settings masked — also in tracebacks."""

    def __init__(self, secrets: set[str]) -> None:
        super().__init__(LOG_FORMAT)
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        if record.name == "uvicorn.error":  # uvicorn's general logger, not only errors
            record = logging.makeLogRecord({**record.__dict__, "name": "uvicorn"})
        return redact(super().format(record), self.secrets)

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The message on one line: a line break or other control character in it is written
        escaped, so text a message quotes (a library naming what a stored row named) cannot
        start a line of its own that reads like the service's. A traceback, appended after,
        keeps its lines."""
        record.message = one_line(record.message)
        return super().formatMessage(record)


_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with every control character and line separator escaped (``\\n``, …)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


OWN_LOGGERS = ("threadkeeper", "uvicorn", "litestar")


class _LibraryLevel(logging.Filter):
    """Other libraries' records below ``level`` are dropped, whatever level a library gave
    its own logger (bm25s sets DEBUG on its own)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or record.name.split(".", 1)[0] in OWN_LOGGERS


class _Stderr:
    """Whatever ``sys.stderr`` is when a line is written (a test may have replaced it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@contextlib.contextmanager
def serve_logging(level: str, settings: Settings) -> Iterator[None]:
    """Route every logger through one handler on standard error in ``LOG_FORMAT`` (or one
    JSON object per line: ``THREADKEEPER_LOG_FORMAT=json``, ``app.logs``):
    threadkeeper's and uvicorn's at ``level``, other libraries' at WARNING (unless
    ``level`` is debug or trace). Undone afterwards (``serve`` may run inside a test)."""
    from uvicorn.config import LOG_LEVELS

    numeric = LOG_LEVELS[level]
    libraries = numeric if numeric < logging.INFO else max(numeric, THIRD_PARTY_LOG_LEVEL)
    from threadkeeper.app.logs import AccessPaths, JsonFormatter, TraceIds

    handler = logging.StreamHandler(_Stderr())
    json_lines = settings.log_format == "json"
    secrets = secrets_of(settings)
    handler.setFormatter(JsonFormatter(secrets) if json_lines else LogFormatter(secrets))
    handler.addFilter(_LibraryLevel(libraries))
    handler.addFilter(TraceIds())  # each record's trace_id and span_id
    handler.addFilter(AccessPaths())  # no ids of a request's path in uvicorn's access lines
    root = logging.getLogger()
    own = [*OWN_LOGGERS, "uvicorn", "uvicorn.error", "uvicorn.access"]
    loggers = [logging.getLogger(name) for name in own]
    # uvicorn's own logging configuration (applied by any uvicorn.Config built with its
    # default ``log_config`` in this process) gives "uvicorn" a handler and stops it from
    # propagating: for the server's lifetime every line goes through the one handler
    saved = (root.level, [(x, x.level, x.propagate, x.handlers[:], x.disabled) for x in loggers])
    root.addHandler(handler)
    root.setLevel(libraries)
    for logger in loggers:
        logger.setLevel(numeric)
        logger.propagate, logger.handlers, logger.disabled = True, [], False
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        for logger, previous, propagate, handlers, disabled in saved[1]:
            logger.setLevel(previous)
            logger.propagate, logger.handlers, logger.disabled = propagate, handlers, disabled


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


# -- chat --------------------------------------------------------------------------------


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers = {"X-Tenant-Id": args.tenant, "X-User-Id": args.user}
    token = os.environ.get(TOKEN_VARIABLE)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


_OPTION_OF = {"X-Tenant-Id": "--tenant", "X-User-Id": "--user", "thread_id": "--thread"}


def _refusal(status: int, problem: dict[str, Any], args: argparse.Namespace) -> tuple[str, bool]:
    """What to tell the user about a refused message, and whether every message would be
    refused the same way (then ``chat`` ends)."""
    detail = problem.get("detail") or problem.get("title") or ""
    if status == 401:
        if os.environ.get(TOKEN_VARIABLE):
            return f"the service refused the token in {TOKEN_VARIABLE} ({detail})", True
        return f"the service wants a token: set {TOKEN_VARIABLE} to its service token", True
    if status == 403:
        return f"[403] {detail} (tenant {args.tenant}, user {args.user})", True
    if status == 422:
        fields = []
        fatal = True
        for error in problem.get("errors") or [{"message": detail}]:
            key = error.get("key")
            source = error.get("source")
            option = _OPTION_OF.get(str(key))
            where = f"{key} ({source}{', set by ' + option if option else ''})" if key else ""
            fields.append(f"{where}: {error.get('message')}" if where else error.get("message"))
            fatal = fatal and source in ("header", "path")
        return f"[422] {'; '.join(str(f) for f in fields)}", fatal
    return f"[{status}] {detail}", False


STOPPED_RUN_WAIT_SECONDS = 5.0
"""How long a message waits for the run the user just stopped to let go of the thread (the
service sees the closed stream at its next event, then cancels the run: well within 1 s)."""


class ChatSession:
    """The terminal client's state: the thread, and the run being streamed or just stopped."""

    def __init__(self, client: Any, thread: str, args: argparse.Namespace) -> None:
        self.client = client
        self.thread = thread
        self.args = args
        self.streaming: str | None = None
        """The run whose answer is being streamed (from its ``metadata`` event)."""
        self.stopped: str | None = None
        """The run the user stopped with Ctrl-C last."""

    def stop(self) -> None:
        self.stopped, self.streaming = self.streaming, None

    def send(self, line: str) -> int | None:
        """One message and its streamed answer; an exit status when ``chat`` should end."""
        deadline = time.monotonic() + STOPPED_RUN_WAIT_SECONDS
        while time.monotonic() < deadline:
            outcome = self._round(line, may_wait=True)
            if outcome != "wait":
                return outcome if isinstance(outcome, int) else None
            time.sleep(0.1)
        outcome = self._round(line, may_wait=False)
        return outcome if isinstance(outcome, int) else None

    def _round(self, line: str, *, may_wait: bool) -> int | str | None:
        from urllib.parse import quote

        from httpx_sse import connect_sse

        body = {"message": {"content": line}}
        path = f"/v1/threads/{quote(self.thread, safe='')}/runs"
        with connect_sse(self.client, "POST", path, json=body) as source:
            response = source.response
            if response.status_code != 200:
                response.read()
                try:
                    problem = response.json()
                except ValueError:
                    problem = {"detail": response.text[:200]}
                if may_wait and response.status_code == 409 and self.stopped is not None:
                    running = problem.get("running_run_id")
                    if running in (None, self.stopped):  # the stopped run is still ending
                        return "wait"
                message, fatal = _refusal(response.status_code, problem, self.args)
                if fatal:
                    print(f"threadkeeper: {message}", file=sys.stderr)
                    return 2
                print(message)
                return None
            print("bot> ", end="", flush=True)
            for event in source.iter_sse():
                data = json.loads(event.data)
                if event.event == "metadata":
                    self.streaming = data.get("run_id")
                elif event.event == "messages":
                    print(data["delta"], end="", flush=True)
                elif event.event == "end":
                    cites = ", ".join(c["title"] for c in data["message"]["citations"])
                    print(f"\n     [{data['status']}{'; ' + cites if cites else ''}]")
                elif event.event == "error":
                    print(f"\n[error] {data.get('detail')}")
            self.streaming = None
        return None


class PromptReader:
    """``chat``'s prompt. On a terminal, ``input()`` (with line editing). Otherwise — a pipe, a
    script, a test — the prompt is written and the line read through ``select``, so that a
    Ctrl-C (SIGINT) arriving just after the prompt still ends the read: ``input()`` writes the
    prompt and blocks in ``read()`` with no Python in between, and the signal's handler, which
    runs only when Python next runs, would wait for the next line. The window is microseconds
    unless the client is descheduled right after the prompt, as on a loaded machine: the e2e
    test of Ctrl-C at the prompt timed out that way once, and a harness signalling as soon as
    the prompt was out hung 4 of 5 times in one run (none in later runs)."""

    POLL_SECONDS = 0.2
    """A signal that lands between the check and the ``select`` is seen this late."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stdin
        self.pending = b""

    def read(self, prompt: str) -> str:
        """One line without its end; ``EOFError`` at the end of the input."""
        if self.stream.isatty():
            return input(prompt)
        print(prompt, end="", flush=True)
        fd = self.stream.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], self.POLL_SECONDS)  # SIGINT raises here
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                if not self.pending:
                    raise EOFError
                self.pending += b"\n"
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(self.stream.encoding or "utf-8", "replace").rstrip("\r")


def cmd_chat(args: argparse.Namespace) -> int:
    import httpx

    # Ctrl-C must reach the client even where its parent ignored SIGINT (a background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = args.thread or f"chat-{uuid.uuid4().hex[:8]}"
    print(
        f"thread {thread} on {args.url} (tenant {args.tenant}, user {args.user}) — type a "
        "message; Ctrl-C stops an answer, Ctrl-D or Ctrl-C at the prompt quits",
        file=sys.stderr,
    )
    try:
        with httpx.Client(base_url=args.url, headers=_headers(args), timeout=None) as client:
            session = ChatSession(client, thread, args)
            prompt = PromptReader()
            while True:
                try:
                    line = prompt.read("you> ").strip()
                except (EOFError, KeyboardInterrupt):
                    print(file=sys.stderr)
                    return 0
                if not line:
                    continue
                try:
                    ended = session.send(line)
                except KeyboardInterrupt:
                    # leaving the stream closed the connection: the service cancels the run,
                    # and nothing of this round is stored
                    session.stop()
                    print("\n     [stopped: this round is not stored]", flush=True)
                    continue
                except httpx.HTTPError as exc:
                    print(f"threadkeeper: cannot reach {args.url}: {exc}", file=sys.stderr)
                    return 1
                if ended is not None:
                    return ended
    except KeyboardInterrupt:  # a second Ctrl-C while the first one was being handled
        print(file=sys.stderr)
        return 0


# -- tokens ------------------------------------------------------------------------------


def cmd_tokens(args: argparse.Namespace) -> int:
    from threadkeeper.app.counters import counter_from_name

    name = args.counter or _settings().tokenizer
    try:
        counter = counter_from_name(name)
    except ConfigError as exc:
        _fail(f"configuration error: {exc}")
    except Exception as exc:  # a tokenizer.json that does not load
        option = "--counter" if args.counter else "THREADKEEPER_TOKENIZER"
        _fail(f"{option}: cannot load {name}: {_one_line(exc)}")
    for line in sys.stdin:
        print(counter.count_text(line.rstrip("\n")))
    return 0


# -- replay ------------------------------------------------------------------------------


async def _replay(settings: Settings, args: argparse.Namespace) -> int:
    from threadkeeper.app.service import Caller
    from threadkeeper.app.storage import open_stored

    async with open_stored(settings) as stored:
        replay = await stored.replay(
            Caller(args.tenant, _stored_user(args.user)), args.thread, args.run
        )
    if replay is None:
        print(
            f"threadkeeper: no run {args.run} in thread {args.thread} of user {args.user} "
            f"in tenant {args.tenant} (--user and --tenant say whose thread to look in)",
            file=sys.stderr,
        )
        return 1
    for line in _replay_lines(replay.record, replay.messages):
        print(line)
    return 0


def _replay_lines(record: Any, by_id: dict[str, Any]) -> Iterator[str]:
    yield json.dumps(
        {
            "run_id": record.run_id,
            "status": record.status,
            "prompt_version": record.prompt_version,
            "chunk_ids": list(record.chunk_ids),
            "memory_keys": list(record.memory_keys),
        },
        ensure_ascii=False,
    )
    for call in _model_call_windows(record, by_id):
        yield json.dumps(call, ensure_ascii=False, default=str)


def _model_call_windows(record: Any, by_id: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """What each model call of a run was sent (``replay``'s lines, ``export-runs``'s
    ``model_calls``): the system prompt (its documents rendered again), the summary, the
    window's messages by id, a message no longer kept as ``{"role": "missing"}``."""
    from langchain_core.messages import AIMessage

    from threadkeeper.domain.compaction import shown_message

    prompt = _with_documents(record)
    for index, call in enumerate(record.model_calls):
        system = prompt
        if call.summary:
            system = f"{system}\n\n{call.summary}"
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for message_id in call.message_ids:
            message = shown_message(message_id, by_id)
            if message is None:
                messages.append({"role": "missing", "id": message_id})
                continue
            item: dict[str, Any] = {
                "role": message.type,
                "id": message_id,
                "content": message.content,
            }
            if isinstance(message, AIMessage) and message.tool_calls:
                item["tool_calls"] = message.tool_calls
            messages.append(item)
        yield {
            "model_call": index,
            "tokens": call.tokens,
            "budget": call.budget,
            "counter": call.counter,
            "messages": messages,
        }


_loaded: dict[str, Any] = {}


def _knowledge() -> Any:
    """The knowledge base's documents, loaded once per command (the search index is lazy)."""
    if "knowledge" not in _loaded:
        from threadkeeper.adapters.knowledge import KnowledgeBase

        _loaded["knowledge"] = KnowledgeBase.from_directory()
    return _loaded["knowledge"]


def _with_documents(record: Any) -> str:
    """The run's system prompt with its documents block rendered again from the knowledge base
    (the record stores their ``chunk_ids``, not their text); a chunk the knowledge base no
    longer has is shown as missing. The knowledge base is loaded only for such a prompt."""
    from threadkeeper.app.stored import chunk_lookup
    from threadkeeper.domain.prompt import DOCUMENTS_REF, prompt_as_sent

    prompt: str = record.system_prompt
    if not prompt.endswith(DOCUMENTS_REF):
        return prompt
    return prompt_as_sent(prompt, record.chunk_ids, chunk_lookup(_knowledge(), record.tenant_id))


def cmd_replay(args: argparse.Namespace) -> int:
    settings = _settings()
    return int(_run_on_storage(settings, _replay(settings, args)))


# -- retention ---------------------------------------------------------------------------


def _counts(receipt: Any) -> dict[str, int]:
    return {
        "threads": receipt.threads,
        "messages": receipt.messages,
        "memory_items": receipt.memory_items,
        "feedback": receipt.feedback,
    }


async def _retention(settings: Settings, args: argparse.Namespace) -> int:
    from threadkeeper.domain.errors import InvalidDuration
    from threadkeeper.domain.retention import parse_duration, sweep, sweep_memory

    if args.older_than:
        try:
            older_than = parse_duration(args.older_than)
        except InvalidDuration as exc:
            _fail(f"--older-than: {exc}")
    elif settings.retention_days:
        older_than = parse_duration(f"{settings.retention_days}d")
    else:
        _fail("no retention window: pass --older-than or set THREADKEEPER_RETENTION_DAYS")
    now = datetime.now(UTC)
    cutoff = now - older_than
    # Deleting opens the backend as the server does (on a profile whose run locks live in
    # one process, that refuses beside a running server: a run in flight could commit into a
    # thread being deleted). Counting only reads: it works beside a server.
    from threadkeeper.app.storage import open_stored, startup_problem

    try:
        async with open_stored(settings, read_only=args.dry_run) as stored:
            if args.dry_run:
                # the threads the sweep would find now (it pages by ``batch``), and what
                # deleting them would delete
                preview = await stored.retention_preview(cutoff)
                report: dict[str, Any] = {
                    "cutoff": cutoff.isoformat(),
                    "dry_run": True,
                    "batches": math.ceil(len(preview.thread_keys) / args.batch),
                    "would_delete": _counts(preview.would_delete),
                }
                if settings.retention_memory:
                    idle = await stored.backend.retention.idle_memory(cutoff, limit=10**6)
                    report["would_delete"]["memory_users"] = len(idle)
            else:
                swept = await sweep(
                    stored.backend.retention, now=now, older_than=older_than, batch=args.batch
                )
                report = {
                    "cutoff": swept.cutoff.isoformat(),
                    "dry_run": False,
                    "batches": swept.batches,
                    "deleted": _counts(swept.deleted),
                }
                if settings.retention_memory:
                    memory = await sweep_memory(
                        stored.backend.retention, now=now, older_than=older_than, batch=args.batch
                    )
                    report["deleted"]["memory_users"] = memory.users
                    report["deleted"]["memory_items"] += memory.memory_items
    except Exception as exc:
        busy = startup_problem(exc, settings)
        if busy is None:
            raise
        _fail(
            f"a threadkeeper server is running on this data ({busy}); retention cannot delete "
            "beside it (its runs lock threads in its own process): stop it first, or let it sweep "
            "(THREADKEEPER_RETENTION_DAYS with THREADKEEPER_RETENTION_SWEEP_MINUTES); "
            "--dry-run works beside it"
        )
    print(json.dumps(report))
    return 0


def cmd_retention(args: argparse.Namespace) -> int:
    settings = _settings()
    return int(_run_on_storage(settings, _retention(settings, args)))


# -- export ------------------------------------------------------------------------------


async def _export(settings: Settings, tenant_id: str, user_id: str) -> dict[str, Any]:
    """Everything kept about the user in the tenant, read as the HTTP API reads it (bodies
    shaped as its responses)."""
    from threadkeeper.app.http.schemas import memory_out, message_out
    from threadkeeper.app.storage import open_stored

    async with open_stored(settings) as stored:
        export = await stored.export(tenant_id, user_id)
    memory = memory_out(export.memory)  # what is kept (whether work is pending is not)
    return {
        "tenant_id": export.tenant_id,
        "user_id": export.user_id,
        "exported_at": export.exported_at,
        "profile": settings.profile,
        "thread_scope": settings.thread_scope,
        "threads": [
            {"thread_id": thread_id, "messages": [message_out(m) for m in messages]}
            for thread_id, messages in export.threads
        ],
        "memory": {"profile": memory.profile, "facts": memory.facts},
        "feedback": [
            {
                "thread_id": thread_id,
                "run_id": item.run_id,
                "score": item.score,
                "comment": item.comment,
                "at": item.at,
            }
            for thread_id, item in export.feedback
        ],
    }


PRIVATE_FILE = 0o600
"""An export's mode: it holds a user's messages (``export``) or every tenant's runs."""
OUTPUT_HELP = (
    "a file to write, readable by its owner alone (0600); an existing file is overwritten, "
    "a symbolic link refused (default: standard output)"
)
_SYMLINK = (
    "--output: {output} is a symbolic link; an export is written only to a regular file, "
    "never through a link (remove the link, or name the file itself)"
)
_NOT_REGULAR = (
    "--output: {output} is not a regular file (a FIFO or a device cannot be made private): "
    "name a file, or write to standard output with --output -"
)


def _output(value: str | None) -> Path | None:
    """``--output``: ``None`` for standard output (none given, or ``-``), else the file,
    checked before any work (``_open_output`` checks it again as it opens it)."""
    if value in (None, "-"):
        return None
    output = Path(value)
    if output.is_symlink():
        _fail(_SYMLINK.format(output=output))
    if not output.parent.is_dir():
        _fail(f"--output: the folder {output.parent} does not exist")
    if output.is_dir():
        _fail(f"--output: {output} is a folder, not a file")
    return output


def _open_output(output: Path) -> Any:
    """``--output`` open to write (a text file), its owner's alone (0600): a new file is made
    so; an existing regular file of this user is overwritten, as before, and made 0600. Refused
    — left as it was — when the name is a symbolic link (even to a file: ``O_NOFOLLOW``), a
    FIFO or a device (they cannot be made private: ``--output -`` writes to standard output),
    a file of another user (who could read it) or one with other hard links."""
    import stat

    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(output, flags, PRIVATE_FILE)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: the BSDs' word for it
            _fail(_SYMLINK.format(output=output))
        if exc.errno == errno.ENXIO:  # a FIFO no one reads
            _fail(_NOT_REGULAR.format(output=output))
        _fail(f"--output: cannot write {output}: {exc.strerror or exc}")
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            _fail(_NOT_REGULAR.format(output=output))
        if found.st_uid != os.geteuid():
            _fail(f"--output: {output} belongs to another user, who could read the export")
        if found.st_nlink > 1:
            _fail(f"--output: {output} has other hard links, which would show the export")
        os.fchmod(descriptor, PRIVATE_FILE)
        os.ftruncate(descriptor, 0)
        os.set_blocking(descriptor, True)
    except OSError as exc:
        os.close(descriptor)
        _fail(f"--output: cannot write {output}: {exc.strerror or exc}")
    except SystemExit:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "w", encoding="utf-8")


def cmd_export(args: argparse.Namespace) -> int:
    import msgspec

    output = _output(args.output)
    settings = _settings()
    document = msgspec.to_builtins(
        _run_on_storage(settings, _export(settings, args.tenant, _stored_user(args.user)))
    )
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        with _open_output(output) as out:
            out.write(text)
    except OSError as exc:
        _fail(f"--output: cannot write {output}: {exc.strerror or exc}")
    threads, memory = document["threads"], document["memory"]
    print(
        f"threadkeeper: exported {len(threads)} threads, "
        f"{sum(len(t['messages']) for t in threads)} messages, "
        f"{len(memory['profile']) + len(memory['facts'])} memory items and "
        f"{len(document['feedback'])} feedback of user {args.user} to {args.output}",
        file=sys.stderr,
    )
    return 0


# -- export-runs -------------------------------------------------------------------------


def _since(value: str) -> datetime:
    """A date (``2026-11-01``: midnight UTC) or an ISO 8601 time (no zone: UTC)."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a date (YYYY-MM-DD) or an ISO 8601 time "
            "(YYYY-MM-DDTHH:MM[:SS][+HH:MM])"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _pseudonym(key: bytes, tenant_id: str, user_id: str) -> str:
    """The user as ``export-runs`` names them: HMAC-SHA256 under the export's own random key,
    so the same user within one export, and neither their id nor a link between exports."""
    import hashlib
    import hmac

    message = f"{tenant_id}\0{user_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:24]


def _conversation_id(trace_id_key: str | None, thread_key: str) -> str | None:
    """The thread's ``gen_ai.conversation.id`` in traces
    (``threadkeeper.app.telemetry.ConversationIds``, checked equal by the unit tests; that
    module imports the agent's middleware, which a command that reads storage does not)."""
    import hashlib
    import hmac

    if not trace_id_key:
        return None
    digest = hmac.new(trace_id_key.encode("utf-8"), thread_key.encode("utf-8"), hashlib.sha256)
    return digest.hexdigest()[:32]


def _run_line(run: Any, key: bytes, trace_id_key: str | None) -> dict[str, Any]:
    """One ``export-runs`` line (the schema is in ``docs/operations.md``)."""
    from threadkeeper.domain.transcript import stamp_of

    record, by_id = run.replay.record, run.replay.messages
    response = record.response
    human = by_id.get(record.human_message_id)
    started = stamp_of(human).get("at") if human is not None else None
    message = response.get("message") if isinstance(response.get("message"), dict) else {}
    answer = by_id.get(str(message.get("id", "")))
    model = answer.response_metadata.get("model_name") if answer is not None else None
    note = run.feedback
    return {
        "tenant_id": record.tenant_id,
        "thread_id": record.thread_id,
        "conversation": _conversation_id(trace_id_key, record.thread_key),
        "user": _pseudonym(key, record.tenant_id, record.user_id),
        "run_id": record.run_id,
        "started_at": started,
        "finished_at": record.created_at.isoformat(),
        "status": record.status,
        "model": model,
        "prompt_version": record.prompt_version,
        "chunk_ids": list(record.chunk_ids),
        "memory_keys": list(record.memory_keys),
        "model_calls": list(_model_call_windows(record, by_id)),
        "answer": {
            "id": message.get("id"),
            "content": message.get("content", ""),
            "citations": message.get("citations", []),
        },
        "handoff_context": response.get("handoff_context"),
        "usage": response.get("usage"),
        "feedback": None
        if note is None
        else {"score": note.score, "comment": note.comment, "at": note.at.isoformat()},
    }


class _ReaderGone(Exception):
    """The reader of standard output closed it (``export-runs … | head``)."""


async def _export_runs(settings: Settings, args: argparse.Namespace, out: Any) -> int:
    """Write each run's line to ``out`` (a text file) as soon as it is built, a page of
    records held at a time; how many were written.

    Raises:
        _ReaderGone: ``out`` is a pipe whose reader went away.
    """
    import secrets

    from threadkeeper.app.storage import open_stored

    key = secrets.token_bytes(32)
    written = 0
    async with open_stored(settings) as stored:
        async for run in stored.runs_since(args.since, tenant_id=args.tenant, page=args.page):
            line = _run_line(run, key, settings.trace_id_key)
            try:
                out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
                out.flush()
            except BrokenPipeError:
                break  # raised below, outside the handler: not an OSError of the storage's
            written += 1
        else:
            return written
    raise _ReaderGone(written)


def cmd_export_runs(args: argparse.Namespace) -> int:
    output = _output(args.output)
    settings = _settings()
    if output is None:
        try:
            _run_on_storage(settings, _export_runs(settings, args, sys.stdout))
        except _ReaderGone as gone:
            # no traceback, and none at exit either: what is left to flush goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print(f"threadkeeper: output closed after {gone.args[0]} runs", file=sys.stderr)
            return 1
        return 0
    out = _open_output(output)
    with out:
        written = _run_on_storage(settings, _export_runs(settings, args, out))
    scope = f"tenant {args.tenant}" if args.tenant else "every tenant"
    print(
        f"threadkeeper: exported {written} runs of {scope} since {args.since.isoformat()} "
        f"to {args.output}",
        file=sys.stderr,
    )
    return 0


# -- migrate -----------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    from threadkeeper.app.storage import migrate, schema_server

    settings = _settings()
    if schema_server(settings) is None:
        print(f"{settings.profile} profile: nothing to migrate (its tables are set up at start)")
        return 0
    steps = _run_on_storage(settings, migrate(settings))
    for step in steps:
        print(step)
    return 0


# -- doctor ------------------------------------------------------------------------------


def followup_line(counts: FollowUpCounts, now: datetime | None = None) -> str:
    """``doctor``'s line on follow-up work: what is pending by kind, the oldest's age, what
    was given up (the workers of ``serve`` do the work; none pending is the normal state)."""
    pending = sum(counts.pending.values())
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.pending.items()))
    line = f"follow-up work: {pending} pending" + (f" ({kinds})" if kinds else "")
    if counts.oldest is not None:
        age = ((now or datetime.now(UTC)) - counts.oldest).total_seconds()
        line += f", oldest {max(0.0, age):.0f} s"
    given_up = sum(counts.given_up.values())
    return line + f", {given_up} given up"


async def _doctor(settings: Settings) -> int:
    """Each check on its own line; building only what a check needs."""
    print(describe(settings))
    ok = True

    def failed(what: str, exc: BaseException) -> None:
        nonlocal ok
        ok = False
        print(f"{what}: error: {type(exc).__name__}: {_one_line(exc, settings)}")

    from threadkeeper.app.storage import open_stored

    try:
        async with open_stored(settings) as stored:
            for name, state in (await stored.ready()).items():
                print(f"{name}: {redact(state, secrets_of(settings))}")
                ok = ok and state == "ok"
            print(followup_line(await stored.backend.followups.counts()))
    except Exception as exc:  # doctor reports whatever fails
        failed(f"{settings.profile} storage", exc)
    counter = None
    try:
        from threadkeeper.app.counters import counter_from_name

        counter = counter_from_name(settings.tokenizer)
        print(f"tokenizer {counter.name}: ok")
    except Exception as exc:
        failed(f"tokenizer {settings.tokenizer}", exc)
    try:
        from threadkeeper.adapters.knowledge import KnowledgeBase

        tenants = ", ".join(KnowledgeBase.from_directory().tenants())
        print(f"knowledge base tenants: {tenants}")
    except Exception as exc:
        failed("knowledge base", exc)
    models: list[tuple[str, str | None]] = [
        ("MODEL", settings.model),
        ("MODEL_FALLBACK", settings.model_fallback),
    ]
    for variable, model_name in models:
        if model_name is None:
            continue
        if model_name == "builtin":  # nothing to check (and nothing worth importing)
            print(f"model {model_name}: ok")
            continue
        try:
            from threadkeeper.app.container import build_model

            build_model(model_name, 0.0, settings.model_timeout_seconds, variable=variable)
            print(f"model {model_name}: ok (not called)")
        except Exception as exc:
            failed(f"model {model_name}", exc)
    if settings.hooks is None:
        print("hooks: the profile's default")
    elif counter is not None:
        try:
            from threadkeeper.hooks import HookSettings, build_pipeline

            build_pipeline(
                settings.hooks,
                HookSettings(
                    budget=settings.token_budget,
                    counter=counter,
                    summary_after_turns=settings.summary_after_turns,
                    tool_result_max_chars=settings.tool_result_max_chars,
                ),
                allow_destructive=not settings.history_in_checkpoints,
            )
            print(f"hooks {settings.hooks}: ok")
        except Exception as exc:
            failed(f"hooks {settings.hooks}", exc)
    return 0 if ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(_settings()))


# -- the command line --------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="threadkeeper", description=__doc__.split("\n\n")[0])
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (%(default)s)")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="threadkeeper's and uvicorn's log level (%(default)s); other libraries log "
        "warnings and errors only, unless debug or trace",
    )
    serve.set_defaults(func=cmd_serve)

    chat = commands.add_parser(
        "chat",
        help="talk to a running service in the terminal",
        description="An interactive client of a running service: type a message, the answer "
        "streams as it arrives. Ctrl-C stops the answer being streamed (the service cancels "
        "the run: nothing of that round is stored); Ctrl-D, or Ctrl-C at the prompt, quits.",
        epilog=f"environment: {TOKEN_VARIABLE} — the service token, sent as "
        "'Authorization: Bearer …' (every profile that serves a network asks for it)",
    )
    chat.add_argument("--url", default=DEFAULT_URL, help="the service (default: %(default)s)")
    chat.add_argument(
        "--thread",
        type=_thread_arg,
        help="the thread to talk in (default: a new chat-… thread)",
    )
    chat.add_argument("--tenant", default=DEFAULT_TENANT, help="X-Tenant-Id (default: %(default)s)")
    chat.add_argument("--user", default=DEFAULT_USER, help="X-User-Id (default: %(default)s)")
    chat.set_defaults(func=cmd_chat)

    tokens = commands.add_parser("tokens", help="count tokens, one stdin line per message")
    tokens.add_argument(
        "--counter",
        type=_counter_name,
        help="o200k_base, cl100k_base, estimate or a tokenizer.json path "
        "(default: THREADKEEPER_TOKENIZER)",
    )
    tokens.set_defaults(func=cmd_tokens)

    replay = commands.add_parser(
        "replay",
        help="print exactly what the model saw in a run",
        description="What the model was sent in each model call of a run, one JSON line per "
        "call after a line about the run. Works beside a running server.",
    )
    replay.add_argument("--thread", required=True, type=_thread_arg, help="the thread id")
    replay.add_argument(
        "--run", required=True, type=_run_id, help="the run_id (a UUID, any letter case)"
    )
    replay.add_argument(
        "--tenant",
        default=DEFAULT_TENANT,
        type=_tenant_or_user_arg,
        help="the thread's tenant (default: %(default)s)",
    )
    replay.add_argument(
        "--user",
        default=DEFAULT_USER,
        type=_user_arg,
        help="the thread's user (default: %(default)s)",
    )
    replay.set_defaults(func=cmd_replay)

    migrate = commands.add_parser("migrate", help="create or upgrade the schema")
    migrate.set_defaults(func=cmd_migrate)

    retention = commands.add_parser(
        "retention",
        help="delete threads idle past the window",
        description="Delete the threads idle longer than the window, in batches; print what "
        "was deleted. --dry-run prints what would be (under would_delete), and works beside "
        "a running server.",
    )
    retention.add_argument(
        "--older-than", help="e.g. 90d, 12h, 30m (default: THREADKEEPER_RETENTION_DAYS)"
    )
    retention.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    retention.add_argument(
        "--batch", type=_positive, default=500, help="threads per batch (default: %(default)s)"
    )
    retention.set_defaults(func=cmd_retention)

    export = commands.add_parser(
        "export",
        help="write everything kept about one user as JSON (threads, memory, feedback)",
        description="Everything threadkeeper keeps about one user in one tenant, as JSON: "
        "their threads with the messages as GET /v1/threads/{id}/messages serves them, their "
        "memory with provenance, their feedback. Works beside a running server.",
    )
    export.add_argument("--tenant", required=True, type=_tenant_or_user_arg)
    export.add_argument("--user", required=True, type=_user_arg)
    export.add_argument("--output", help=OUTPUT_HELP)
    export.set_defaults(func=cmd_export)

    export_runs = commands.add_parser(
        "export-runs",
        help="write the runs since a date as JSON lines (an eval dataset)",
        description="One JSON line per run stored since --since (inclusive), oldest first: its "
        "tenant, thread id, the user as a pseudonym of this export, times, status, model, "
        "what each model call was sent (as replay rebuilds it), the answer with its "
        "citations, usage and feedback. Streams (a page of runs at a time). Works beside a "
        "running server. The lines hold what users wrote: personal data.",
    )
    export_runs.add_argument(
        "--since",
        required=True,
        type=_since,
        help="a date (YYYY-MM-DD, midnight UTC) or an ISO 8601 time (no zone: UTC)",
    )
    export_runs.add_argument(
        "--tenant", type=_tenant_or_user_arg, help="one tenant's runs (default: every tenant's)"
    )
    export_runs.add_argument("--output", help=OUTPUT_HELP)
    export_runs.add_argument(
        "--page", type=_positive, default=200, help="runs read at a time (default: %(default)s)"
    )
    export_runs.set_defaults(func=cmd_export_runs)

    doctor = commands.add_parser("doctor", help="check configuration and backends")
    doctor.set_defaults(func=cmd_doctor)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or a usage error (2): its line is printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"threadkeeper: configuration error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # _fail: the line is printed
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
