"""Bytes a thread keeps in SQL tables: what ``Backend.storage_usage`` and the storage
benchmarks count, one implementation for every dialect.

A table's bytes for a thread are Σ over the thread's rows of each column's logical size plus
``ROW_OVERHEAD`` per row:

- PostgreSQL: ``octet_length`` of ``bytea``/``text``/``varchar`` columns, of ``jsonb`` as
  text, ``pg_column_size`` of the rest (fixed-width types) — the bytes the application
  stored, before TOAST compresses them;
- MySQL/MariaDB: ``LENGTH`` (bytes) of every column;
- SQLite: ``length(CAST(column AS BLOB))`` (bytes, UTF-8 for text) of every column.

The tables are found, not listed: every table of the current schema with a ``thread_id``
(LangGraph's checkpoint tables, the message ledger) or ``thread_key`` column
(threadkeeper's), read once per process from the catalogue. Each is counted with SQL over
its own columns, so a changed row format (a new column, another table) is weighed as it is.
Every query is by the thread's key on an index whose first column is it (primary keys
``(thread_id, …)``/``(thread_key, …)`` or ``ix_*_thread``): no table is scanned. All the
tables are weighed in one statement (``UNION ALL``).

The logical size (``StorageUsage.logical``) undoes threadkeeper's own compression: the payloads
stored deflated (``DEFLATED``: the ledger's ``tk1z`` bodies, run records starting ``Z``) are
read — only those rows, on the same indexes — and inflated in bounded steps to count their
length; the difference is added to their kind.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection

from threadkeeper.adapters.ledger_codec import COMPRESSED as LEDGER_COMPRESSED
from threadkeeper.adapters.ledger_codec import ZDICT as LEDGER_ZDICT
from threadkeeper.adapters.sql import COMPRESSED_RECORD, RECORD_ZDICT
from threadkeeper.domain.storage import StorageUsage

log = logging.getLogger(__name__)

ROW_OVERHEAD = 28
"""Bytes per row beyond its columns: PostgreSQL's heap tuple header (23, aligned to 24) and
line pointer (4); used on every dialect so that the profiles' figures compare."""

KEY_COLUMNS = ("thread_key", "thread_id")
"""The column a table keys threads by: ``thread_key`` where a table has both (the archive
keeps the caller's ``thread_id`` beside the key)."""

TABLE_KINDS: dict[str, str | None] = {
    # LangGraph's checkpoint savers (postgres; sqlite's ``writes``)
    "checkpoints": "checkpoints",
    "checkpoint_blobs": "checkpoints",
    "checkpoint_writes": "checkpoints",
    "writes": "checkpoints",
    # threadkeeper's own tables
    "tk_run_records": "run_records",
    "tk_run_texts": "run_records",
    "chat_messages": "archive",
    "chat_summaries": "archive",
    "tool_invocations": "audit",
    "tk_feedback": "feedback",
    "tk_run_claims": None,
    "tk_followups": None,
    # the message ledger's (``adapters.ledger``: postgres, embedded)
    "tk_checkpoint_messages": "messages",
}
"""The kind of each known table keyed by thread; ``None``: not counted (the run claim is the
thread's lock row, not something kept for it). A backend may add its own; a keyed table none
names is counted by its key column (``FALLBACK_KINDS``). Follow-up work is not kept either: a
row lives from the round's commit until its memory is written."""

FALLBACK_KINDS = {"thread_id": "checkpoints", "thread_key": "run_records"}
"""A table keyed by ``thread_id`` belongs to the checkpoint state (LangGraph's savers key
rows so) — threadkeeper's own such tables (``tk_*``: the message ledger's) to ``messages``;
one keyed by ``thread_key`` is threadkeeper's record of the thread."""


def fallback_kind(table: KeyedTable) -> str:
    """The kind of a keyed table no map names (``FALLBACK_KINDS``)."""
    if table.key == "thread_id" and table.name.startswith("tk_"):
        return "messages"
    return FALLBACK_KINDS[table.key]


@dataclass(frozen=True)
class Deflated:
    """Where a kind of payload is stored deflated: ``payload`` of ``table`` rows (keyed by
    ``key``) for which ``where`` holds with ``:tag`` bound to ``tag``, raw deflate with
    ``zdict`` after ``skip`` bytes."""

    table: str
    key: str
    payload: str
    where: str
    tag: str | bytes
    zdict: bytes
    skip: int = 0


DEFLATED = (
    Deflated(
        "tk_checkpoint_messages",
        "thread_id",
        "body",
        "type = :tag",
        LEDGER_COMPRESSED,
        LEDGER_ZDICT,
    ),
    Deflated(
        "tk_run_records",
        "thread_key",
        "record",
        "substr(record, 1, 1) = :tag",
        COMPRESSED_RECORD,
        RECORD_ZDICT,
        skip=len(COMPRESSED_RECORD),
    ),
)
"""Every payload threadkeeper stores compressed (``ledger_codec``, ``sql.pack_record``)."""
INFLATE_STEP = 1 << 16
"""Bytes inflated at a time when counting (a payload is never held inflated whole)."""


def inflated_length(body: bytes, zdict: bytes) -> int:
    """The length of raw deflate ``body`` (preset dictionary ``zdict``) once inflated."""
    stream = zlib.decompressobj(-15, zdict)
    length, data = 0, body
    while data:
        length += len(stream.decompress(data, INFLATE_STEP))
        data = stream.unconsumed_tail
    return length + len(stream.flush())


@dataclass(frozen=True)
class KeyedTable:
    name: str
    key: str
    """The column holding the thread's key."""
    columns: tuple[tuple[str, str], ...]
    """(name, type) of every column."""


@dataclass(frozen=True)
class TableWeight:
    rows: int
    bytes: int


def _quote(dialect: str, name: str) -> str:
    if dialect in ("mysql", "mariadb"):
        return f"`{name.replace('`', '``')}`"
    return '"' + name.replace('"', '""') + '"'


def logical_bytes(dialect: str, columns: Sequence[tuple[str, str]], alias: str = "t") -> str:
    """A SQL expression: the logical bytes of one row of a table with ``columns`` ((name,
    type) pairs, as the catalogue names the types), without the row overhead."""
    parts: list[str] = []
    for name, kind in columns:
        column = f"{alias}.{_quote(dialect, name)}"
        if dialect == "postgresql":
            kind = kind.lower()
            if kind in ("json", "jsonb"):
                parts.append(f"coalesce(octet_length({column}::text), 0)")
            elif kind in ("bytea", "text", "character varying", "character"):
                parts.append(f"coalesce(octet_length({column}), 0)")
            else:
                parts.append(f"coalesce(pg_column_size({column}), 0)")
        elif dialect in ("mysql", "mariadb"):
            parts.append(f"coalesce(length({column}), 0)")
        else:
            parts.append(f"coalesce(length(CAST({column} AS BLOB)), 0)")
    return " + ".join(parts) or "0"


async def keyed_tables(conn: AsyncConnection) -> list[KeyedTable]:
    """Every table of the connection's current schema with a ``thread_id`` or
    ``thread_key`` column, with its columns (sorted by name)."""
    dialect = conn.dialect.name
    rows: list[tuple[str, str, str]]
    if dialect == "sqlite":
        names = [
            str(r[0])
            for r in await conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = []
        for name in names:
            info: Any = await conn.exec_driver_sql(f"PRAGMA table_info({_quote(dialect, name)})")
            rows.extend((name, str(r[1]), str(r[2])) for r in info)
    else:
        schema = "current_schema()" if dialect == "postgresql" else "DATABASE()"
        found = await conn.execute(
            text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                f"WHERE table_schema = {schema} ORDER BY table_name, ordinal_position"
            )
        )
        rows = [(str(r[0]), str(r[1]), str(r[2])) for r in found]
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        columns.setdefault(table, []).append((column, kind))
    tables: list[KeyedTable] = []
    for table, cols in sorted(columns.items()):
        present = {c for c, _ in cols}
        key = next((k for k in KEY_COLUMNS if k in present), None)
        if key is not None:
            tables.append(KeyedTable(table, key, tuple(cols)))
    return tables


def weigh_statement(dialect: str, tables: Sequence[KeyedTable]) -> str:
    """The statement ``weigh_tables`` runs (``:key`` the thread's key): one ``SELECT`` per
    table — (its index in ``tables``, rows, bytes) — joined by ``UNION ALL``."""
    return " UNION ALL ".join(
        f"SELECT {index} AS n, count(*) AS row_count, "
        f"coalesce(sum({logical_bytes(dialect, table.columns)} + {ROW_OVERHEAD}), 0) AS size "
        f"FROM {_quote(dialect, table.name)} t WHERE t.{_quote(dialect, table.key)} = :key"
        for index, table in enumerate(tables)
    )


async def weigh_tables(
    conn: AsyncConnection, tables: Sequence[KeyedTable], thread_key: str
) -> dict[str, TableWeight]:
    """(rows, bytes) of the thread in each of ``tables``, in one statement."""
    if not tables:
        return {}
    statement = weigh_statement(conn.dialect.name, tables)
    result = await conn.execute(text(statement), {"key": thread_key})
    weights = {tables[int(r[0])].name: TableWeight(int(r[1]), int(r[2])) for r in result}
    return {table.name: weights[table.name] for table in tables}


def usage_of(
    tables: Sequence[KeyedTable],
    weights: Mapping[str, TableWeight],
    kinds: Mapping[str, str | None],
    extra: Mapping[str, int] | None = None,
) -> StorageUsage:
    """The weights summed by kind (``kinds`` by table; a table it does not name by its key
    column, ``FALLBACK_KINDS``), plus ``extra`` bytes by kind (what is kept outside SQL)."""
    sizes: dict[str, int] = dict(extra or {})
    for table in tables:
        kind = kinds[table.name] if table.name in kinds else fallback_kind(table)
        if kind is None:
            continue
        sizes[kind] = sizes.get(kind, 0) + weights[table.name].bytes
    return StorageUsage.of(sizes)


class ThreadWeigher:
    """Weighs threads in one database: finds the keyed tables once, then one statement per
    thread (``weights``, ``usage``)."""

    def __init__(self, kinds: Mapping[str, str | None] | None = None) -> None:
        self.kinds: dict[str, str | None] = {**TABLE_KINDS, **(kinds or {})}
        self._tables: list[KeyedTable] | None = None

    async def tables(self, conn: AsyncConnection) -> list[KeyedTable]:
        if self._tables is None:
            found = await keyed_tables(conn)
            unknown = [t.name for t in found if t.name not in self.kinds]
            if unknown:
                log.info("storage: tables keyed by thread counted by their key: %s", unknown)
            self._tables = found
        return self._tables

    async def weights(self, conn: AsyncConnection, thread_key: str) -> dict[str, TableWeight]:
        """(rows, bytes) of the thread in every keyed table, by table name."""
        return await weigh_tables(conn, await self.tables(conn), thread_key)

    async def usage(
        self, conn: AsyncConnection, thread_key: str, extra: Mapping[str, int] | None = None
    ) -> StorageUsage:
        tables = await self.tables(conn)
        usage = usage_of(tables, await weigh_tables(conn, tables, thread_key), self.kinds, extra)
        return usage.inflated_by(await self.inflation(conn, tables, thread_key))

    async def inflation(
        self, conn: AsyncConnection, tables: Sequence[KeyedTable], thread_key: str
    ) -> dict[str, int]:
        """Bytes by kind the thread's deflated payloads (``DEFLATED``) take beyond their
        stored length once inflated."""
        present = {t.name: t for t in tables}
        extra: dict[str, int] = {}
        dialect = conn.dialect.name
        for spec in DEFLATED:
            table = present.get(spec.table)
            kind = self.kinds.get(spec.table)
            if table is None or kind is None or table.key != spec.key:
                continue
            statement = text(
                f"SELECT {_quote(dialect, spec.payload)} FROM {_quote(dialect, spec.table)} "
                f"WHERE {_quote(dialect, spec.key)} = :key AND {spec.where}"
            ).bindparams(bindparam("tag", spec.tag))
            result = await conn.execute(statement, {"key": thread_key})
            for (payload,) in result:
                body = bytes(payload)[spec.skip :]
                try:
                    grown = inflated_length(body, spec.zdict) - len(body)
                except zlib.error:  # not what we wrote: counted as stored (reading it refuses)
                    log.warning("storage: a %s payload does not inflate", spec.table)
                    continue
                extra[kind] = extra.get(kind, 0) + grown
        return extra


__all__ = [
    "DEFLATED",
    "FALLBACK_KINDS",
    "ROW_OVERHEAD",
    "TABLE_KINDS",
    "Deflated",
    "KeyedTable",
    "TableWeight",
    "ThreadWeigher",
    "inflated_length",
    "keyed_tables",
    "logical_bytes",
    "usage_of",
    "weigh_statement",
    "weigh_tables",
]
