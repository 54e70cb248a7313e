"""No value of a statement in an exception's text or in a log line, on every SQLAlchemy engine
the profiles open (``hide_values``; docs/pii.md).

A statement's values are thread keys (tenant and user ids in them), user ids, messages and
feedback. They reached text that gets logged by three ways:

- SQLAlchemy's error message (``[parameters: …]``) and its statement log lines (at INFO on
  ``sqlalchemy.engine``, which ``serve --log-level debug`` enables): every engine is made with
  ``hide_parameters=True``.
- the driver's own message, which SQLAlchemy's error repeats and a traceback prints again as
  its cause: PostgreSQL's ``DETAIL`` (``Key (thread_key, run_id)=(…) already exists``, a
  constraint's failing row) and a data error quoting its input; MySQL's ``Duplicate entry '…'``
  and ``Incorrect … value: '…'``. ``hide_values`` rewrites them in the engine's ``handle_error``
  event (``scrub``), before anything sees the exception: the exception's type, the driver's
  error code and SQLSTATE (``diag`` keeps the whole report) are what the service decides on,
  and they stay. SQLite's messages name tables and columns only.
- at DEBUG, SQLAlchemy logs each row fetched (``Row (…)``) and LangGraph's SQLite store each
  search's parameters (``Search params: [namespace…]``): ``hide_values`` puts a filter on those
  two loggers that drops their DEBUG records (statements, without their parameters, are still
  logged at INFO).

Statements that do not go through SQLAlchemy (LangGraph's PostgreSQL saver and store, the
PostgreSQL ledger, lock and rate limit on psycopg; LangGraph's MySQL store on asyncmy) raise the
driver's exception as it is: psycopg and asyncmy never put parameters in a message, and those
statements are upserts or inserts of generated keys (no unique violation to report a key of).
"""

from __future__ import annotations

import logging
import re

from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine

HIDDEN = "…"

QUIET_AT_DEBUG = ("sqlalchemy.engine.Engine", "langgraph.store.sqlite.base")
"""Loggers whose DEBUG records carry what statements read or were given (rows fetched, a
search's parameters)."""

_MYSQL_VALUES = (
    # ER_DUP_ENTRY (1062), ER_DUP_ENTRY_WITH_KEY_NAME (1586): up to the last "' for key"
    re.compile(r"(Duplicate entry ')(.*)(' for key)", re.S),
    # ER_TRUNCATED_WRONG_VALUE_FOR_FIELD (1366), ER_TRUNCATED_WRONG_VALUE (1292), …
    re.compile(r"(value: ')(.*)('(?: for (?:column|function) |$))", re.S),
)
_QUOTED = re.compile(r'"[^"]*"')


class _NoDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


_NO_DEBUG = _NoDebug()


def hide_values(engine: AsyncEngine) -> None:
    """What an engine made with ``hide_parameters=True`` needs besides (module docstring)."""
    event.listen(engine.sync_engine, "handle_error", _scrub_error)
    for name in QUIET_AT_DEBUG:
        logger = logging.getLogger(name)
        if _NO_DEBUG not in logger.filters:
            logger.addFilter(_NO_DEBUG)


def _scrub_error(context: ExceptionContext) -> None:
    seen: set[int] = set()
    current: BaseException | None = context.original_exception
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        scrub(current)
        current = current.__cause__ or current.__context__
    wrapped = context.sqlalchemy_exception
    original = context.original_exception
    if isinstance(wrapped, StatementError) and wrapped.orig is original:
        # built from str(original) when it was raised: again, from the scrubbed text
        kind = type(original)
        wrapped.args = (f"({kind.__module__}.{kind.__name__}) {original}",)


def scrub(exc: BaseException) -> None:
    """Rewrite ``exc``'s message (its ``args``) without the values a driver quotes in it."""
    module = type(exc).__module__.split(".", 1)[0]
    if module == "psycopg":
        message = _postgres_message(exc)
        if message is not None:
            exc.args = (message,)
    elif module in ("asyncmy", "pymysql") and len(exc.args) == 2:
        code, message = exc.args
        if isinstance(message, str):
            for pattern in _MYSQL_VALUES:
                message = pattern.sub(rf"\g<1>{HIDDEN}\g<3>", message)
            exc.args = (code, message)


def _postgres_message(exc: BaseException) -> str | None:
    """The server's primary message alone (``DETAIL``, ``CONTEXT`` and ``HINT`` dropped: the
    first two quote keys, rows and input), a data exception's (SQLSTATE class 22) quoted input
    hidden; ``None`` for psycopg's own error (no server's report: no value in it)."""
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    if not isinstance(primary, str):
        return None
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if sqlstate.startswith("22"):
        primary = _QUOTED.sub(f'"{HIDDEN}"', primary)
    return primary
