"""The MySQL archive: the permanent transcript of the redis-mysql profile (blog design).

Tables (Alembic revision 0002, ``threadkeeper migrate``):

- ``chat_messages`` — one row per human message and per final AI answer (with its citations),
  the blog's "conversation bubbles"; a round's two rows are written in one transaction and
  ``UNIQUE (thread_key, run_id, role)`` makes a retried round a no-op (``run_id`` is unique per
  thread only: the same id in another thread is another round). Tool calls and tool results
  never land here.
- ``chat_summaries`` — the thread's latest rolling summary, upserted with the round that
  produced it, so a cold start does not lose a long conversation's beginning.
- ``tool_invocations`` — the audit trail of tool calls (tool, SHA-256 of the arguments,
  duration, status, run_id), written in the same transaction as the round they belong to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from threadkeeper.adapters.sql import UtcDateTime, metadata
from threadkeeper.domain.errors import UnknownMessage, UnknownThread
from threadkeeper.domain.transcript import (
    MAX_PAGE,
    Citation,
    Round,
    ToolInvocation,
    TranscriptArchive,
    TranscriptMessage,
    TranscriptPage,
)

LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
Serial = BigInteger().with_variant(Integer(), "sqlite")

chat_messages = Table(
    "chat_messages",
    metadata,
    Column("seq", Serial, primary_key=True, autoincrement=True),
    Column("thread_key", String(400), nullable=False),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("thread_id", String(128), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("role", String(8), nullable=False),
    Column("message_id", String(200), nullable=False),
    Column("content", LongText, nullable=False),
    Column("citations", LongText, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("status", String(16), nullable=True),
    UniqueConstraint("thread_key", "run_id", "role", name="uq_chat_messages_thread_run_role"),
    Index("ix_chat_messages_thread", "thread_key", "seq"),
    Index("ix_chat_messages_message", "thread_key", "message_id"),
    Index("ix_chat_messages_user", "tenant_id", "user_id"),
    Index("ix_chat_messages_created", "thread_key", "created_at"),
)

chat_summaries = Table(
    "chat_summaries",
    metadata,
    Column("thread_key", String(400), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("summary", LongText, nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
)

tool_invocations = Table(
    "tool_invocations",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("thread_key", String(400), nullable=False),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("call_id", String(128), nullable=False),
    Column("arguments_digest", String(64), nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("status", String(16), nullable=False),
    Column("at", UtcDateTime(), nullable=False),
    Index("ix_tool_invocations_thread_run", "thread_key", "run_id"),
    Index("ix_tool_invocations_thread", "thread_key"),
    Index("ix_tool_invocations_user", "tenant_id", "user_id"),
)


def _citations(raw: str) -> tuple[Citation, ...]:
    return tuple(Citation(c["chunk_id"], c["doc_id"], c["title"]) for c in json.loads(raw))


def _message(row: Any) -> TranscriptMessage:
    return TranscriptMessage(
        id=row.message_id,
        role=row.role,
        content=row.content,
        created_at=row.created_at,
        citations=_citations(row.citations),
        status=row.status,
    )


def _row(round_: Round, message: TranscriptMessage) -> dict[str, Any]:
    return {
        "thread_key": round_.thread_key,
        "tenant_id": round_.tenant_id,
        "user_id": round_.user_id,
        "thread_id": round_.thread_id,
        "run_id": round_.run_id,
        "role": message.role,
        "message_id": message.id,
        "content": message.content,
        "citations": json.dumps(
            [msgspec.structs.asdict(c) for c in message.citations], ensure_ascii=False
        ),
        "created_at": message.created_at,
        "status": message.status,
    }


_COLUMNS = (
    chat_messages.c.seq,
    chat_messages.c.message_id,
    chat_messages.c.role,
    chat_messages.c.content,
    chat_messages.c.citations,
    chat_messages.c.created_at,
    chat_messages.c.status,
)


class SqlTranscriptArchive(TranscriptArchive):
    """``TranscriptArchive`` on MySQL/MariaDB (any SQLAlchemy async engine, in fact)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def append_round(self, round_: Round, tools: Sequence[ToolInvocation] = ()) -> bool:
        try:
            async with self.engine.begin() as conn:
                await self.append_in(conn, round_, tools)
        except IntegrityError:
            if await self._has_run(round_.thread_key, round_.run_id):
                return False  # the round is already archived: a retry changes nothing
            raise
        return True

    async def append_in(
        self, conn: AsyncConnection, round_: Round, tools: Sequence[ToolInvocation] = ()
    ) -> None:
        """Write the round in the caller's transaction (the round store's, which also checks
        the run's claim and writes its run record)."""
        await conn.execute(
            insert(chat_messages),
            [_row(round_, round_.human), _row(round_, round_.ai)],
        )
        if round_.summary:
            await self._put_summary(conn, round_)
        if tools:
            await conn.execute(
                insert(tool_invocations),
                [
                    {
                        "run_id": round_.run_id,
                        "thread_key": round_.thread_key,
                        "tenant_id": round_.tenant_id,
                        "user_id": round_.user_id,
                        **msgspec.structs.asdict(tool),
                    }
                    for tool in tools
                ],
            )

    async def _put_summary(self, conn: AsyncConnection, round_: Round) -> None:
        assert round_.summary is not None
        values = {
            "run_id": round_.run_id,
            "summary": round_.summary,
            "updated_at": round_.ai.created_at,
        }
        changed = await conn.execute(
            update(chat_summaries)
            .where(chat_summaries.c.thread_key == round_.thread_key)
            .values(**values)
        )
        if not changed.rowcount:
            await conn.execute(
                insert(chat_summaries).values(thread_key=round_.thread_key, **values)
            )

    async def _has_run(self, thread_key: str, run_id: str) -> bool:
        async with self.engine.connect() as conn:
            found = await conn.execute(
                select(chat_messages.c.seq)
                .where(chat_messages.c.thread_key == thread_key, chat_messages.c.run_id == run_id)
                .limit(1)
            )
            return found.first() is not None

    async def page(
        self, thread_key: str, *, limit: int, before: str | None = None
    ) -> TranscriptPage:
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be within 1..{MAX_PAGE}")
        async with self.engine.connect() as conn:
            query = select(*_COLUMNS).where(chat_messages.c.thread_key == thread_key)
            if before is not None:
                cursor = (
                    await conn.execute(
                        select(func.max(chat_messages.c.seq)).where(
                            chat_messages.c.thread_key == thread_key,
                            chat_messages.c.message_id == before,
                        )
                    )
                ).scalar()
                if cursor is None:
                    if not await self._exists(conn, thread_key):
                        raise UnknownThread(thread_key)
                    raise UnknownMessage(before)
                query = query.where(chat_messages.c.seq < cursor)
            rows = (
                await conn.execute(query.order_by(chat_messages.c.seq.desc()).limit(limit + 1))
            ).all()
            if not rows and before is None:
                raise UnknownThread(thread_key)
        more = len(rows) > limit
        page = [_message(r) for r in reversed(rows[:limit])]
        return TranscriptPage(page, next_before=page[0].id if more and page else None)

    async def _exists(self, conn: AsyncConnection, thread_key: str) -> bool:
        found = await conn.execute(
            select(chat_messages.c.seq).where(chat_messages.c.thread_key == thread_key).limit(1)
        )
        return found.first() is not None

    async def recent(self, thread_key: str, limit: int) -> list[TranscriptMessage]:
        if limit <= 0:
            return []
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(*_COLUMNS)
                    .where(chat_messages.c.thread_key == thread_key)
                    .order_by(chat_messages.c.seq.desc())
                    .limit(limit)
                )
            ).all()
        return [_message(r) for r in reversed(rows)]

    async def find(self, thread_key: str, ids: Sequence[str]) -> list[TranscriptMessage]:
        if not ids:
            return []
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(*_COLUMNS)
                    .where(
                        chat_messages.c.thread_key == thread_key,
                        chat_messages.c.message_id.in_(list(dict.fromkeys(ids))),
                    )
                    .order_by(chat_messages.c.seq)
                )
            ).all()
        return [_message(r) for r in rows]

    async def latest_summary(self, thread_key: str) -> str | None:
        async with self.engine.connect() as conn:
            found = await conn.execute(
                select(chat_summaries.c.summary).where(chat_summaries.c.thread_key == thread_key)
            )
            return found.scalar()

    async def count(self, thread_key: str) -> int:
        query = (
            select(func.count())
            .select_from(chat_messages)
            .where(chat_messages.c.thread_key == thread_key)
        )
        async with self.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def delete_thread(self, thread_key: str) -> int:
        async with self.engine.begin() as conn:
            messages = await conn.execute(
                delete(chat_messages).where(chat_messages.c.thread_key == thread_key)
            )
            await conn.execute(
                delete(chat_summaries).where(chat_summaries.c.thread_key == thread_key)
            )
            await conn.execute(
                delete(tool_invocations).where(tool_invocations.c.thread_key == thread_key)
            )
        return messages.rowcount or 0

    async def thread_rows(self, thread_key: str) -> int:
        """The thread's rows in every archive table (an erasure's verification)."""
        async with self.engine.connect() as conn:
            total = 0
            for table in (chat_messages, chat_summaries, tool_invocations):
                query = (
                    select(func.count()).select_from(table).where(table.c.thread_key == thread_key)
                )
                total += int((await conn.execute(query)).scalar_one())
            return total

    async def user_threads(self, tenant_id: str, user_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(chat_messages.c.thread_key)
                .where(chat_messages.c.tenant_id == tenant_id, chat_messages.c.user_id == user_id)
                .distinct()
            )
            return sorted(r[0] for r in rows)

    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        threads = messages = 0
        for key in await self.user_threads(tenant_id, user_id):
            deleted = await self.delete_thread(key)
            threads += 1
            messages += deleted
        async with self.engine.begin() as conn:  # audit rows of rounds no longer archived
            await conn.execute(
                delete(tool_invocations).where(
                    tool_invocations.c.tenant_id == tenant_id,
                    tool_invocations.c.user_id == user_id,
                )
            )
        return threads, messages

    async def newest(self, thread_key: str) -> datetime | None:
        """When the thread's newest archived message was written (None: nothing archived)."""
        query = select(func.max(chat_messages.c.created_at)).where(
            chat_messages.c.thread_key == thread_key
        )
        async with self.engine.connect() as conn:
            value: datetime | None = (await conn.execute(query)).scalar()
        if value is None:
            return None
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    async def idle_threads(self, before: datetime, *, limit: int) -> list[str]:
        """Threads whose newest archived message is older than ``before``, oldest first."""
        newest = func.max(chat_messages.c.created_at)
        query = (
            select(chat_messages.c.thread_key)
            .group_by(chat_messages.c.thread_key)
            .having(newest < before)
            .order_by(newest, chat_messages.c.thread_key)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [r[0] for r in await conn.execute(query)]

    async def invocations(self, thread_key: str, run_id: str) -> list[ToolInvocation]:
        """The audit rows of one run of the thread, in call order."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(
                    tool_invocations.c.tool,
                    tool_invocations.c.call_id,
                    tool_invocations.c.arguments_digest,
                    tool_invocations.c.duration_ms,
                    tool_invocations.c.status,
                    tool_invocations.c.at,
                )
                .where(
                    tool_invocations.c.thread_key == thread_key,
                    tool_invocations.c.run_id == run_id,
                )
                .order_by(tool_invocations.c.id)
            )
            return [ToolInvocation(*r) for r in rows]
