"""Run records and feedback (``SqlRunRecords``): a record written inside its round's
transaction (``insert_record``, with its follow-up work: ``record_followups``), read back whole
(``decode_record``), listed, exported, deleted with its thread and its user.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from threadkeeper.adapters.sql.tables import (
    SqlAccess,
    _aware,
    feedback,
    followups,
    metadata,
    run_claims,
    run_records,
    run_texts,
    summaries_ahead,
    upsert,
    user_fences,
)
from threadkeeper.adapters.sql.texts import (
    STORED_SHAPE,
    _decoder,
    _refs,
    _stored,
    _texts,
    stored_form,
    unpack_record,
)
from threadkeeper.domain.compact import text_digest
from threadkeeper.domain.followups import FollowUps
from threadkeeper.domain.runs import (
    EXPORT_PAGE,
    Feedback,
    ModelCall,
    RunCursor,
    RunRecord,
    RunRecords,
    UnknownRun,
    without_memory,
)

CANCEL_WAIT_SECONDS = 60.0
"""How long a deletion waits for a follow-up write under way (a worker bounds its write well
inside this; see ``app.followups``)."""


_INSERT_RECORD = insert(run_records)


async def record_row(conn: AsyncConnection, record: RunRecord) -> dict[str, Any]:
    return {
        "thread_key": record.thread_key,
        "run_id": record.run_id,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "human_message_id": record.human_message_id,
        "status": record.status,
        "created_at": record.created_at,
        "record": await stored_form(conn, record),
    }


async def insert_record(conn: AsyncConnection, record: RunRecord) -> None:
    """Write ``record`` in the caller's transaction (the one that stores its round), its
    texts with it."""
    await conn.execute(_INSERT_RECORD, await record_row(conn, record))


_ROW = (
    run_records.c.thread_key,
    run_records.c.run_id,
    run_records.c.tenant_id,
    run_records.c.user_id,
    run_records.c.human_message_id,
    run_records.c.status,
    run_records.c.created_at,
    run_records.c.record,
)
"""The columns a stored record is read from."""


async def decode_record(conn: AsyncConnection, row: Any) -> RunRecord:
    """A stored record (a row of ``_ROW``), of either shape, with its texts."""
    raw = unpack_record(bytes(row.record))
    if not raw.startswith(b"["):
        return _decoder.decode(raw)
    stored = _stored.decode(raw)
    if stored.shape != STORED_SHAPE:
        raise ValueError(f"a run record of an unknown shape ({stored.shape})")
    texts = await _texts(conn, row.thread_key, row.user_id, _refs(stored))
    response = stored.response
    if not stored.response_whole:
        response = {"run_id": row.run_id, "thread_id": stored.thread_id, "status": row.status}
        response.update(stored.response)
    return RunRecord(
        run_id=row.run_id,
        thread_key=row.thread_key,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        thread_id=stored.thread_id,
        human_message_id=row.human_message_id,
        status=row.status,
        created_at=_aware(row.created_at),
        response=response,
        system_prompt=texts[stored.prompt],
        prompt_version=stored.prompt_version,
        chunk_ids=stored.chunk_ids,
        memory_keys=() if stored.memory is None else tuple(texts[stored.memory].split("\n")),
        model_calls=tuple(
            ModelCall(
                c.message_ids,
                None if c.summary is None else texts[c.summary],
                c.tokens,
                c.budget,
                c.counter,
                window=c.window,
            )
            for c in stored.model_calls
        ),
        checkpoint_id=stored.checkpoint_id,
        content_digest=stored.content_digest,
        message_id_given=stored.message_id_given,
    )


def _feedback_of(row: Any) -> Feedback:
    """A ``tk_feedback`` row (a mapping) read back."""
    return Feedback(
        run_id=row["run_id"],
        thread_key=row["thread_key"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        score=row["score"],
        comment=row["comment"],
        at=_aware(row["at"]),
    )


async def record_followups(conn: AsyncConnection, record: RunRecord, kinds: Sequence[str]) -> None:
    """In the round's transaction: the round's follow-up work (``domain.followups``), due
    now."""
    if not kinds:
        return
    at = datetime.now(UTC)
    await conn.execute(
        _INSERT_FOLLOWUP,
        [
            {
                "kind": kind,
                "thread_key": record.thread_key,
                "tenant_id": record.tenant_id,
                "user_id": record.user_id,
                "run_id": record.run_id,
                "state": "ready",
                "attempts": 0,
                "due_at": at,
                "enqueued_at": at,
            }
            for kind in kinds
        ],
    )


_INSERT_FOLLOWUP = insert(followups)


class SqlRunRecords(SqlAccess, RunRecords):
    """``RunRecords`` on any SQLAlchemy async engine."""

    def __init__(
        self,
        engine: AsyncEngine,
        guard: AbstractAsyncContextManager[Any] | None = None,
        followups: FollowUps | None = None,
    ) -> None:
        super().__init__(engine, guard)
        self.followups = followups
        """The follow-up work of the rounds these records belong to: cancelled (its writes
        waited for) before a thread's records, a user's or their memory are deleted."""

    async def create_tables(self) -> None:
        """Create the tables if missing (embedded profile only; servers use migrations)."""
        tables = [
            run_records,
            feedback,
            run_claims,
            run_texts,
            user_fences,
            followups,
            summaries_ahead,
        ]

        def create(sync: Any) -> None:
            metadata.create_all(sync, tables=tables)
            for table in tables:  # an index added since the tables were created
                for index in table.indexes:
                    index.create(sync, checkfirst=True)

        async with self.begin() as conn:
            await conn.run_sync(create)

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
            row = (await conn.execute(select(*_ROW).where(*where).limit(1))).first()
            return await decode_record(conn, row) if row else None

    async def kept_texts(self, thread_key: str) -> int:
        query = (
            select(func.count()).select_from(run_texts).where(run_texts.c.thread_key == thread_key)
        )
        async with self.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def get(self, thread_key: str, run_id: str) -> RunRecord | None:
        return await self._one(
            run_records.c.thread_key == thread_key, run_records.c.run_id == run_id
        )

    async def since(
        self,
        cutoff: datetime,
        *,
        tenant_id: str | None = None,
        after: RunCursor | None = None,
        limit: int = EXPORT_PAGE,
    ) -> list[RunRecord]:
        """One page, by keyset (``created_at``, ``thread_key``, ``run_id``) on the
        ``created_at`` indexes: each page is one query (and one per record for its texts)."""
        c = run_records.c
        where: list[Any] = [c.created_at >= _aware(cutoff).astimezone(UTC)]
        if tenant_id is not None:
            where.append(c.tenant_id == tenant_id)
        if after is not None:
            at, key, run_id = _aware(after[0]).astimezone(UTC), after[1], after[2]
            where += [
                c.created_at >= at,
                or_(
                    c.created_at > at,
                    c.thread_key > key,
                    and_(c.thread_key == key, c.run_id > run_id),
                ),
            ]
        query = (
            select(*_ROW).where(*where).order_by(c.created_at, c.thread_key, c.run_id).limit(limit)
        )
        async with self.connect() as conn:
            rows = (await conn.execute(query)).all()
            return [await decode_record(conn, row) for row in rows]

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
            # one upsert, the last writer's values kept: an update, then an insert when it
            # changed nothing, let concurrent first feedbacks on a run both insert (a duplicate
            # key, answered 500)
            key = {"thread_key": item.thread_key, "run_id": item.run_id}
            await conn.execute(*upsert(conn, feedback, key, values))

    async def delete_thread(self, thread_key: str) -> tuple[int, int]:
        if self.followups is not None:
            await self.followups.cancel_thread(thread_key, wait_seconds=CANCEL_WAIT_SECONDS)
        async with self.begin() as conn:
            await conn.execute(delete(run_texts).where(run_texts.c.thread_key == thread_key))
            await conn.execute(
                delete(summaries_ahead).where(summaries_ahead.c.thread_key == thread_key)
            )
            runs = await conn.execute(
                delete(run_records).where(run_records.c.thread_key == thread_key)
            )
            notes = await conn.execute(delete(feedback).where(feedback.c.thread_key == thread_key))
        return runs.rowcount or 0, notes.rowcount or 0

    async def erase_user(self, tenant_id: str, user_id: str) -> tuple[int, int]:
        await self.cancel_followups(tenant_id, user_id)
        async with self.begin() as conn:
            await conn.execute(
                delete(run_texts).where(
                    run_texts.c.tenant_id == tenant_id, run_texts.c.user_id == user_id
                )
            )
            await conn.execute(
                delete(summaries_ahead).where(
                    summaries_ahead.c.tenant_id == tenant_id, summaries_ahead.c.user_id == user_id
                )
            )
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

    async def cancel_followups(self, tenant_id: str, user_id: str) -> None:
        """Cancel the user's follow-up work, waiting for its writes under way (before their
        memory is deleted: nothing of it is written after)."""
        if self.followups is not None:
            await self.followups.cancel_user(tenant_id, user_id, wait_seconds=CANCEL_WAIT_SECONDS)

    async def forget_memory(self, tenant_id: str, user_id: str) -> int:
        changed = 0
        async with self.begin() as conn:
            rows = (
                await conn.execute(
                    select(*_ROW)
                    .where(run_records.c.tenant_id == tenant_id, run_records.c.user_id == user_id)
                    .with_for_update()
                )
            ).all()
            # every record read before any is rewritten: records share their prompt's text
            records = [(row, await decode_record(conn, row)) for row in rows]
            prompts: dict[tuple[str, str], str] = {}
            for row, record in records:
                redacted = without_memory(record)
                if redacted is record:
                    continue
                prompt = None
                if unpack_record(bytes(row.record)).startswith(b"["):  # prompt a text: redact it
                    prompt = text_digest(record.system_prompt)
                    prompts[(row.thread_key, prompt)] = redacted.system_prompt
                await conn.execute(
                    update(run_records)
                    .where(
                        run_records.c.thread_key == row.thread_key,
                        run_records.c.run_id == row.run_id,
                    )
                    .values(record=await stored_form(conn, redacted, prompt=prompt))
                )
                changed += 1
            # the texts of the prompts that held the memory take the redacted text under their
            # digest, so that no version of them stays behind and every record naming one
            # (an in-flight run's too) reads the redacted prompt
            for (thread_key, digest), text in sorted(prompts.items()):
                await conn.execute(
                    update(run_texts)
                    .where(
                        run_texts.c.thread_key == thread_key,
                        run_texts.c.user_id == user_id,
                        run_texts.c.digest == digest,
                    )
                    .values(body=text)
                )
        return changed

    async def user_newest(self, tenant_id: str, user_id: str) -> datetime | None:
        """When the user's newest run was recorded (None: no run recorded)."""
        query = select(func.max(run_records.c.created_at)).where(
            run_records.c.tenant_id == tenant_id, run_records.c.user_id == user_id
        )
        async with self.connect() as conn:
            newest = (await conn.execute(query)).scalar()
        return None if newest is None else _aware(newest)

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

    async def feedback_of(self, runs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Feedback]:
        """One query on the primary key's columns (each list ``IN``; the pairs picked here)."""
        if not runs:
            return {}
        wanted = set(runs)
        query = select(feedback).where(
            feedback.c.thread_key.in_(sorted({k for k, _ in wanted})),
            feedback.c.run_id.in_(sorted({r for _, r in wanted})),
        )
        async with self.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        found = (_feedback_of(row) for row in rows)
        return {(f.thread_key, f.run_id): f for f in found if (f.thread_key, f.run_id) in wanted}

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
        return [_feedback_of(row) for row in rows]

    async def user_rows(self, tenant_id: str, user_id: str) -> int:
        """Rows that name the user: run records and texts, feedback, run claims, the user's
        fence, follow-up work (an erasure's verification: 0 once it is done)."""
        counts = [
            select(func.count())
            .select_from(table)
            .where(table.c.tenant_id == tenant_id, table.c.user_id == user_id)
            for table in (
                run_records,
                run_texts,
                feedback,
                run_claims,
                user_fences,
                followups,
                summaries_ahead,
            )
        ]
        return await self._total(counts)

    async def thread_rows(self, thread_key: str) -> int:
        """Rows of the thread: run records and texts, feedback, its claim, follow-up work."""
        counts = [
            select(func.count()).select_from(table).where(table.c.thread_key == thread_key)
            for table in (run_records, run_texts, feedback, run_claims, followups, summaries_ahead)
        ]
        return await self._total(counts)

    async def _total(self, counts: Sequence[Any]) -> int:
        total = 0
        async with self.connect() as conn:
            for query in counts:
                total += int((await conn.execute(query)).scalar() or 0)
        return total

    async def user_threads(self, tenant_id: str, user_id: str) -> list[str]:
        query = (
            select(run_records.c.thread_key)
            .where(run_records.c.tenant_id == tenant_id, run_records.c.user_id == user_id)
            .distinct()
        )
        async with self.connect() as conn:
            return [r[0] for r in (await conn.execute(query)).all()]
