"""threadkeeper's own tables (run records, feedback, run claims) over SQLAlchemy Core, for
every profile.

One implementation runs on SQLite (embedded), PostgreSQL and MySQL/MariaDB. The embedded
profile creates the tables at start; the server profiles get them from ``threadkeeper migrate``.

Each class takes a ``guard``: the embedded profile has one SQLite connection for everything
(``adapters.embedded``), so every use of it holds one lock; the server profiles pass none.
A round's run record is written by the profile's round store inside the transaction that
stores the round (``insert_record``), not by ``SqlRunRecords.save``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import msgspec
from sqlalchemy import (
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
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import TypeDecorator, TypeEngine

from threadkeeper.domain.errors import ClaimLost
from threadkeeper.domain.locks import RunFences, new_token
from threadkeeper.domain.runs import Feedback, RunRecord, RunRecords, UnknownRun, without_memory

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
)

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

REVOKED = "revoked"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RunRecord)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def record_row(record: RunRecord) -> dict[str, Any]:
    return {
        "thread_key": record.thread_key,
        "run_id": record.run_id,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "human_message_id": record.human_message_id,
        "status": record.status,
        "created_at": record.created_at,
        "record": _encoder.encode(record),
    }


async def insert_record(conn: AsyncConnection, record: RunRecord) -> None:
    """Write ``record`` in the caller's transaction (the one that stores its round)."""
    await conn.execute(insert(run_records).values(**record_row(record)))


async def check_claim(conn: AsyncConnection, thread_key: str, token: str) -> None:
    """In the round's transaction: the thread's claim must still be ``token``, and stays so
    until the transaction ends (the row is locked where the database can).

    Raises:
        ClaimLost: another run claimed the thread, or the claim was revoked.
    """
    query = select(run_claims.c.token).where(run_claims.c.thread_key == thread_key)
    if conn.dialect.name != "sqlite":  # SQLite: the write transaction excludes every other
        query = query.with_for_update()
    current = (await conn.execute(query)).scalar()
    if current != token:
        raise ClaimLost(
            "the run lost its claim on the thread before storing its round"
            + (" (the user was erased)" if current == REVOKED else "")
        )


def upsert(conn: AsyncConnection, table: Table, key: dict[str, Any], values: dict[str, Any]) -> Any:
    """``INSERT … ON CONFLICT/DUPLICATE KEY UPDATE`` in the connection's dialect: one
    statement, where an update-then-insert takes gap locks that deadlock on MySQL."""
    name = conn.dialect.name
    if name in ("mysql", "mariadb"):
        return mysql.insert(table).values(**key, **values).on_duplicate_key_update(**values)
    if name == "postgresql":
        on_postgres = postgresql.insert(table).values(**key, **values)
        return on_postgres.on_conflict_do_update(index_elements=list(key), set_=values)
    on_sqlite = sqlite.insert(table).values(**key, **values)
    return on_sqlite.on_conflict_do_update(index_elements=list(key), set_=values)


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


class SqlRunFences(SqlAccess, RunFences):
    """``RunFences`` in ``tk_run_claims`` (every profile: the claims live with the rounds)."""

    async def claim(self, thread_key: str, tenant_id: str, user_id: str, run_id: str) -> str:
        token = new_token()
        values = {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "run_id": run_id,
            "token": token,
            "claimed_at": datetime.now(UTC),
            "released": False,
        }
        async with self.begin() as conn:
            await conn.execute(upsert(conn, run_claims, {"thread_key": thread_key}, values))
        return token

    async def holds(self, thread_key: str, token: str) -> bool:
        async with self.connect() as conn:
            current = (
                await conn.execute(
                    select(run_claims.c.token).where(run_claims.c.thread_key == thread_key)
                )
            ).scalar()
        return bool(current == token)

    async def revoke_user(self, tenant_id: str, user_id: str) -> list[str]:
        mine = (run_claims.c.tenant_id == tenant_id, run_claims.c.user_id == user_id)
        async with self.begin() as conn:
            keys = [
                str(r[0]) for r in await conn.execute(select(run_claims.c.thread_key).where(*mine))
            ]
            await conn.execute(update(run_claims).where(*mine).values(token=REVOKED))
        return keys

    async def forget(self, thread_key: str) -> None:
        async with self.begin() as conn:
            await conn.execute(delete(run_claims).where(run_claims.c.thread_key == thread_key))

    async def forget_user(self, tenant_id: str, user_id: str) -> None:
        """Drop the user's claims (once their erasure deleted the threads)."""
        async with self.begin() as conn:
            await conn.execute(
                delete(run_claims).where(
                    run_claims.c.tenant_id == tenant_id, run_claims.c.user_id == user_id
                )
            )


class SqlRunRecords(SqlAccess, RunRecords):
    """``RunRecords`` on any SQLAlchemy async engine."""

    def __init__(
        self, engine: AsyncEngine, guard: AbstractAsyncContextManager[Any] | None = None
    ) -> None:
        super().__init__(engine, guard)

    async def create_tables(self) -> None:
        """Create the tables if missing (embedded profile only; servers use migrations)."""
        async with self.begin() as conn:
            await conn.run_sync(
                lambda sync: metadata.create_all(sync, tables=[run_records, feedback, run_claims])
            )

    async def save(self, record: RunRecord) -> bool:
        """Store a run record on its own (tests, tools): a run's record is written with its
        round, by the profile's round store (``insert_record``)."""
        try:
            async with self.begin() as conn:
                await insert_record(conn, record)
        except IntegrityError:
            return False
        return True

    async def _one(self, *where: Any) -> RunRecord | None:
        async with self.connect() as conn:
            row = (await conn.execute(select(run_records.c.record).where(*where).limit(1))).first()
        return _decoder.decode(row[0]) if row else None

    async def get(self, thread_key: str, run_id: str) -> RunRecord | None:
        return await self._one(
            run_records.c.thread_key == thread_key, run_records.c.run_id == run_id
        )

    async def by_human_message(self, thread_key: str, message_id: str) -> RunRecord | None:
        return await self._one(
            run_records.c.thread_key == thread_key,
            run_records.c.human_message_id == message_id,
        )

    async def add_feedback(self, item: Feedback) -> None:
        values: dict[str, Any] = {
            "tenant_id": item.tenant_id,
            "user_id": item.user_id,
            "score": item.score,
            "comment": item.comment,
            "at": item.at,
        }
        async with self.begin() as conn:
            known = (
                await conn.execute(
                    select(func.count())
                    .select_from(run_records)
                    .where(
                        run_records.c.thread_key == item.thread_key,
                        run_records.c.run_id == item.run_id,
                    )
                )
            ).scalar_one()
            if not known:
                raise UnknownRun(item.run_id)
            changed = await conn.execute(
                update(feedback)
                .where(feedback.c.thread_key == item.thread_key, feedback.c.run_id == item.run_id)
                .values(**values)
            )
            if not changed.rowcount:
                await conn.execute(
                    insert(feedback).values(
                        thread_key=item.thread_key, run_id=item.run_id, **values
                    )
                )

    async def delete_thread(self, thread_key: str) -> tuple[int, int]:
        async with self.begin() as conn:
            runs = await conn.execute(
                delete(run_records).where(run_records.c.thread_key == thread_key)
            )
            notes = await conn.execute(delete(feedback).where(feedback.c.thread_key == thread_key))
        return runs.rowcount or 0, notes.rowcount or 0

    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        async with self.begin() as conn:
            runs = await conn.execute(
                delete(run_records).where(
                    run_records.c.tenant_id == tenant_id, run_records.c.user_id == user_id
                )
            )
            notes = await conn.execute(
                delete(feedback).where(
                    feedback.c.tenant_id == tenant_id, feedback.c.user_id == user_id
                )
            )
        return runs.rowcount or 0, notes.rowcount or 0

    async def forget_memory(self, tenant_id: str, user_id: str) -> int:
        changed = 0
        async with self.begin() as conn:
            rows = (
                await conn.execute(
                    select(run_records.c.thread_key, run_records.c.run_id, run_records.c.record)
                    .where(run_records.c.tenant_id == tenant_id, run_records.c.user_id == user_id)
                    .with_for_update()
                )
            ).all()
            for thread_key, run_id, raw in rows:
                record = _decoder.decode(raw)
                redacted = without_memory(record)
                if redacted is record:
                    continue
                await conn.execute(
                    update(run_records)
                    .where(run_records.c.thread_key == thread_key, run_records.c.run_id == run_id)
                    .values(record=_encoder.encode(redacted))
                )
                changed += 1
        return changed

    async def thread_newest(self, thread_key: str) -> datetime | None:
        """When the thread's newest run was recorded (None: no run recorded)."""
        query = select(func.max(run_records.c.created_at)).where(
            run_records.c.thread_key == thread_key
        )
        async with self.connect() as conn:
            newest = (await conn.execute(query)).scalar()
        return None if newest is None else _aware(newest)

    async def thread_activity(
        self, before: datetime, *, limit: int
    ) -> list[tuple[str, str, str, datetime]]:
        """Threads whose newest run is older than ``before``: (key, tenant, user, newest)."""
        newest = func.max(run_records.c.created_at)
        query = (
            select(
                run_records.c.thread_key,
                func.min(run_records.c.tenant_id),
                func.min(run_records.c.user_id),
                newest,
            )
            .group_by(run_records.c.thread_key)
            .having(newest < before)
            .order_by(newest, run_records.c.thread_key)
            .limit(limit)
        )
        async with self.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [(r[0], r[1], r[2], _aware(r[3])) for r in rows]

    async def feedback_count(self, thread_key: str) -> int:
        query = (
            select(func.count()).select_from(feedback).where(feedback.c.thread_key == thread_key)
        )
        async with self.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def user_feedback(self, tenant_id: str, user_id: str) -> list[Feedback]:
        query = (
            select(feedback)
            .where(feedback.c.tenant_id == tenant_id, feedback.c.user_id == user_id)
            .order_by(feedback.c.at, feedback.c.run_id)
        )
        async with self.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            Feedback(
                run_id=row["run_id"],
                thread_key=row["thread_key"],
                tenant_id=row["tenant_id"],
                user_id=row["user_id"],
                score=row["score"],
                comment=row["comment"],
                at=_aware(row["at"]),
            )
            for row in rows
        ]

    async def user_threads(self, tenant_id: str, user_id: str) -> list[str]:
        query = (
            select(run_records.c.thread_key)
            .where(run_records.c.tenant_id == tenant_id, run_records.c.user_id == user_id)
            .distinct()
        )
        async with self.connect() as conn:
            return [r[0] for r in (await conn.execute(query)).all()]
