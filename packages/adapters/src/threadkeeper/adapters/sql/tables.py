"""threadkeeper's own tables over SQLAlchemy Core (run records and their texts, feedback,
claims, users' fences, follow-up work, summaries made ahead), the time type every server stores
the same way, one upsert per dialect, and ``SqlAccess``: a connection or a transaction on any of
the three servers (SQLite, PostgreSQL, MySQL/MariaDB), under the embedded profile's one lock.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import TypeDecorator, TypeEngine

metadata = MetaData()


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC ``datetime`` on every dialect.

    PostgreSQL keeps the zone (``timestamptz``); MySQL's ``DATETIME(6)`` has none, so values
    are stored as naive UTC (microseconds kept) and read back aware.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and dialect.name in ("mysql", "mariadb"):
            return _aware(value).astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else _aware(value)


LongBlob = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")
"""A run record grows with the model calls it lists: MySQL's ``BLOB`` stops at 64 KiB."""
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")

run_records = Table(
    "tk_run_records",
    metadata,
    Column("thread_key", String(400), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("human_message_id", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("record", LongBlob, nullable=False),
    Index("ix_tk_run_records_user", "tenant_id", "user_id"),
    Index("ix_tk_run_records_human", "thread_key", "human_message_id"),
    Index("ix_tk_run_records_created", "created_at"),
    Index("ix_tk_run_records_tenant_created", "tenant_id", "created_at"),
)
"""``ix_tk_run_records_created`` and ``ix_tk_run_records_tenant_created`` serve the pages of
``SqlRunRecords.since`` (all tenants, one tenant) as well as retention's activity."""

feedback = Table(
    "tk_feedback",
    metadata,
    Column("thread_key", String(400), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("score", Integer, nullable=False),
    Column("comment", Text, nullable=True),
    Column("at", UtcDateTime(), nullable=False),
    Index("ix_tk_feedback_user", "tenant_id", "user_id"),
)

run_claims = Table(
    "tk_run_claims",
    metadata,
    Column("thread_key", String(400), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("token", String(64), nullable=False),
    Column("claimed_at", UtcDateTime(), nullable=False),
    Column("released", Boolean, nullable=False, default=False),
    Index("ix_tk_run_claims_user", "tenant_id", "user_id"),
)
"""Each thread's current claim (``RunFences``): written when a run takes the thread, checked
by the transaction that stores its round."""

user_fences = Table(
    "tk_user_fences",
    metadata,
    Column("tenant_id", String(128), primary_key=True),
    Column("user_id", String(128), primary_key=True),
    Column("erasing", Boolean, nullable=False, default=False),
)
"""One row per user whose runs claim threads: ``erasing`` while the user's erasure runs. A
claim writes the row (locking it) and is refused while ``erasing``; the erasure sets it
(waiting for claims being made) before revoking the user's claims, and deletes the row when
it is over. So a claim is made before the erasure (and revoked by it) or refused — never
made meanwhile unseen (``RunFences.revoke_user``)."""

run_texts = Table(
    "tk_run_texts",
    metadata,
    Column("thread_key", String(400), primary_key=True),
    Column("user_id", String(128), primary_key=True),
    Column("digest", String(32), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("base", String(32), nullable=True),
    Column("depth", Integer, nullable=False),
    Column("body", LongText, nullable=False),
    Index("ix_tk_run_texts_user", "tenant_id", "user_id"),
)
"""The texts run records name by content address (``domain.compact.text_digest``): each
rolling-summary version, system prompt and memory-key list once per thread and user. A row
holds the text (``base`` null) or its lines as segments of an earlier version's
(``domain.compact.encode_text``, JSON; ``base`` names that version, ``depth`` counts the
deltas down to a whole text). Written in the round's transaction with the record, deleted
with the thread's records and the user's."""

followups = Table(
    "tk_followups",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("kind", String(16), nullable=False),
    Column("thread_key", String(400), nullable=False),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("state", String(10), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("due_at", UtcDateTime(), nullable=False),
    Column("lease", String(64), nullable=True),
    Column("lease_until", UtcDateTime(), nullable=True),
    Column("enqueued_at", UtcDateTime(), nullable=False),
    Column("error", String(120), nullable=True),
    Index("ix_tk_followups_state", "state", "id"),
    Index("ix_tk_followups_user", "tenant_id", "user_id", "id"),
    Index("ix_tk_followups_thread", "thread_key"),
)
"""Follow-up work of stored rounds (``domain.followups``): one row per item, recorded in the
round's transaction (``record_followups``), taken by workers with a lease
(``adapters.followups.SqlFollowUps``), deleted when done. No content: the job reads its run
record."""

summaries_ahead = Table(
    "tk_summaries_ahead",
    metadata,
    Column("thread_key", String(400), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("base_version", Integer, nullable=False),
    Column("through_id", String(200), nullable=False),
    Column("body", LongText, nullable=False),
    Column("at", UtcDateTime(), nullable=False),
    Index("ix_tk_summaries_ahead_user", "tenant_id", "user_id"),
)
"""The newest fold made ahead for each thread (``domain.summary.AheadSummary``), written by
follow-up work after a round and read by the next run's ``summarize`` hook; deleted with the
thread's records and the user's."""


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def upsert(
    conn: AsyncConnection, table: Table, key: dict[str, Any], values: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """``INSERT … ON CONFLICT/DUPLICATE KEY UPDATE`` in the connection's dialect (one
    statement, where an update-then-insert takes gap locks that deadlock on MySQL), and its
    parameters: the statement is built once per dialect, table and columns (``_upsert``)."""
    statement = _upsert(conn.dialect.name, table, tuple(key), tuple(values))
    return statement, {**key, **values}


@functools.cache
def _upsert(dialect: str, table: Table, key: tuple[str, ...], columns: tuple[str, ...]) -> Any:
    """Built once and reused: SQLAlchemy then finds its compiled form by a cache key computed
    once, where a statement made per call (its values as literals) cost ~0.15 ms of CPU each
    time (``benchmarks/sql_statement_cost.py``: issue 12)."""
    binds = {c: bindparam(c, type_=table.c[c].type) for c in (*key, *columns)}
    if dialect in ("mysql", "mariadb"):
        on_mysql = mysql.insert(table).values(binds)
        return on_mysql.on_duplicate_key_update({c: on_mysql.inserted[c] for c in columns})
    if dialect == "postgresql":
        on_postgres = postgresql.insert(table).values(binds)
        return on_postgres.on_conflict_do_update(
            index_elements=list(key), set_={c: on_postgres.excluded[c] for c in columns}
        )
    on_sqlite = sqlite.insert(table).values(binds)
    return on_sqlite.on_conflict_do_update(
        index_elements=list(key), set_={c: on_sqlite.excluded[c] for c in columns}
    )


class SqlAccess:
    """An engine, and the guard every use of it holds (the embedded profile's one
    connection); ``None`` for a pooled server engine."""

    def __init__(self, engine: AsyncEngine, guard: AbstractAsyncContextManager[Any] | None) -> None:
        self.engine = engine
        self.guard = guard

    def _guard(self) -> AbstractAsyncContextManager[Any]:
        return self.guard if self.guard is not None else contextlib.nullcontext()

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction (the embedded profile's starts ``BEGIN IMMEDIATE``)."""
        async with self._guard(), self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        async with self._guard(), self.engine.connect() as conn:
            yield conn
