"""The service's log lines: one handler on standard error, plain or JSON, secrets masked,
control characters escaped."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterator

from threadkeeper.app.config import (
    Settings,
    redact,
    secrets_of,
)

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
