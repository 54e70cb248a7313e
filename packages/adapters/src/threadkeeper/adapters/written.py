"""Bytes a round writes, by kind (``RoundWork.written``), counted from what it sends.

While a round store commits, ``tally()`` holds a count for the running task (a context
variable: concurrent rounds never mix). The drivers' own hooks add to it the parameters of
each statement the round sends, by the table it writes (``adapters.weigh.TABLE_KINDS``):

- SQLAlchemy's ``before_cursor_execute`` on the profile's engine (``watch_engine``): every
  statement the round runs through SQLAlchemy (embedded's checkpoints, every profile's run
  record, the redis-mysql archive and audit);
- ``count_statement`` from a driver's cursor (the postgres saver's and ledger's statements
  on the round's psycopg connection) or a Redis connection (the redis-mysql checkpoints,
  ``kind`` given).

The size of a parameter is its bytes (``bytes``; text as UTF-8); numbers, times and the like
count 8. Nothing is read back, serialized again or queried: the count is of the payloads the
round already sends. Statements that write nothing (``SELECT``, ``DELETE``) add nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from threadkeeper.adapters.weigh import TABLE_KINDS

_TALLY: ContextVar[dict[str, int] | None] = ContextVar("threadkeeper_written", default=None)

_WRITE = re.compile(
    r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE)\s+[`\"]?(\w+)",
    re.IGNORECASE,
)
FIXED_SIZE = 8
"""What a parameter that is not text or bytes counts (an integer, a float, a time)."""


@contextmanager
def tally() -> Iterator[dict[str, int]]:
    """Count what the current task writes until the block ends; the count by kind."""
    counts: dict[str, int] = {}
    token = _TALLY.set(counts)
    try:
        yield counts
    finally:
        _TALLY.reset(token)


def counting() -> bool:
    """Whether a round's writes are being counted in this task."""
    return _TALLY.get() is not None


def value_bytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, Mapping):
        return sum(value_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(value_bytes(v) for v in value)
    obj = getattr(value, "obj", None)  # psycopg's Json/Jsonb wrappers: the wrapped text
    if isinstance(obj, str | bytes):
        return value_bytes(obj)
    return FIXED_SIZE


def add(kind: str, size: int) -> None:
    counts = _TALLY.get()
    if counts is not None and size:
        counts[kind] = counts.get(kind, 0) + size


def kind_of(
    statement: str, kinds: Mapping[str, str | None] = TABLE_KINDS, unknown: str | None = None
) -> str | None:
    """The kind a statement writes (``None``: it writes nothing counted); ``unknown``: the
    kind of a table ``kinds`` does not name."""
    found = _WRITE.match(statement)
    if found is None:
        return None
    table = found.group(1).lower()
    return kinds.get(table, unknown)


def count_statement(
    statement: str,
    parameters: Any,
    *,
    many: bool = False,
    kinds: Mapping[str, str | None] = TABLE_KINDS,
    unknown: str | None = None,
) -> None:
    """Add a statement's parameters to the running count (``many``: a sequence of
    parameter sets; ``unknown``: the kind of a table ``kinds`` does not name)."""
    if not counting():
        return
    kind = kind_of(statement, kinds, unknown)
    if kind is None:
        return
    rows: Iterable[Any] = parameters if many else (parameters,)
    add(kind, sum(value_bytes(row) for row in rows))


def watch_engine(engine: AsyncEngine, kinds: Mapping[str, str | None] = TABLE_KINDS) -> None:
    """Count every statement a round sends through ``engine`` (``before_cursor_execute``)."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _count(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        if _TALLY.get() is not None:
            count_statement(statement, parameters, many=executemany, kinds=kinds)


__all__ = [
    "FIXED_SIZE",
    "add",
    "count_statement",
    "counting",
    "kind_of",
    "tally",
    "value_bytes",
    "watch_engine",
]
