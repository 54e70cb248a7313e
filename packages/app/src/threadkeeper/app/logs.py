"""``serve``'s log records with the trace they belong to, and the JSON log format.

``TraceIds`` gives every record through ``serve``'s handler the ids of the span current where
it was logged (``trace_id``: 32 hex digits, ``span_id``: 16; ``None`` outside a span) — the
same ids the exported spans carry, so a line leads to its trace. ``THREADKEEPER_LOG_FORMAT=json``
writes each record as one JSON object on one line (``JsonFormatter``): ``time``, ``level``,
``logger``, ``message``, ``trace_id`` / ``span_id`` inside a span, ``exception_type`` for a
record with an exception — its type only: neither its message nor the traceback, which can
quote a value (a driver's duplicate key) or message content. Credentials of the settings are
masked as in the text format.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from threadkeeper.app.config import redact


class TraceIds(logging.Filter):
    """Sets ``record.trace_id`` and ``record.span_id`` from the current span (``None``
    outside one). A filter on the handler: records reaching only other handlers are left as
    they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = trace.format_trace_id(context.trace_id)
            record.span_id = trace.format_span_id(context.span_id)
        else:
            record.trace_id = record.span_id = None
        return True


def _logger(record: logging.LogRecord) -> str:
    return "uvicorn" if record.name == "uvicorn.error" else record.name  # as the text format


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module docstring)."""

    def __init__(self, secrets: set[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": _logger(record),
            "message": redact(record.getMessage(), self.secrets),
        }
        trace_id = getattr(record, "trace_id", None)
        if trace_id:
            line["trace_id"] = trace_id
            line["span_id"] = getattr(record, "span_id", None)
        if record.exc_info and record.exc_info[0] is not None:
            line["exception_type"] = record.exc_info[0].__name__
        return json.dumps(line, ensure_ascii=False)


_ID_SEGMENT = re.compile(r"(/(?:threads|users|runs|messages)/)[^/?#]+")


def route_of(path: str) -> str:
    """A request path as access lines show it: every id in it (thread, user, run, message)
    replaced by ``{id}``, the query string dropped — paths hold user ids and thread ids, which
    may not reach a log line. ``/v1/threads/t-1/runs?x=1`` → ``/v1/threads/{id}/runs``."""
    bare = path.split("?", 1)[0].split("#", 1)[0]
    return _ID_SEGMENT.sub(r"\1{id}", bare)


class AccessPaths(logging.Filter):
    """uvicorn's access lines with ``route_of`` their path (``%s - "%s %s HTTP/%s" %d``: the
    path is the third argument)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) >= 3:
            record.args = (*args[:2], route_of(str(args[2])), *args[3:])
        return True
