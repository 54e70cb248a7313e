"""``FollowUps`` in ``tk_followups`` — and the folds made ahead by follow-up work,
``SummariesAhead`` in ``tk_summaries_ahead`` — on SQLite, PostgreSQL and MariaDB/MySQL alike.

Work is recorded by the round stores (``sql.record_followups``, in the round's transaction).
Workers take it with ``SELECT … FOR UPDATE SKIP LOCKED`` (PostgreSQL, MariaDB ≥ 10.6, MySQL
≥ 8: two replicas never take the same row, and neither waits for the other) and a lease
written in the same transaction; on SQLite the one write transaction (``BEGIN IMMEDIATE``
under the embedded profile's guard) does the same. Leases are wall-clock times
(``datetime.now(UTC)`` of the replica that writes them): replicas' clocks must agree to well
within a lease (NTP does).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, func, or_, select, update
from sqlalchemy.orm import aliased

from threadkeeper.adapters.sql import SqlAccess, UtcDateTime, followups, summaries_ahead, upsert
from threadkeeper.domain.followups import (
    GIVEN_UP,
    READY,
    TO_DO,
    WRITING,
    FollowUp,
    FollowUpCounts,
    FollowUps,
)
from threadkeeper.domain.locks import new_token
from threadkeeper.domain.summary import AheadSummary, SummariesAhead

CANCEL_POLL_SECONDS = 0.05

_earlier = aliased(followups)


def _now() -> datetime:
    return datetime.now(UTC)


def _due(now: datetime, limit: int) -> Any:
    """Items due at ``now``, oldest first, none behind an earlier item of its user and kind
    still to do, none under a running lease (an announced write whose lease ran out is taken again:
    its worker died) — locked, skipping rows another worker has locked."""
    blocked = exists().where(
        _earlier.c.tenant_id == followups.c.tenant_id,
        _earlier.c.user_id == followups.c.user_id,
        _earlier.c.kind == followups.c.kind,
        _earlier.c.id < followups.c.id,
        _earlier.c.state.in_(TO_DO),
    )
    return (
        select(followups)
        .where(
            followups.c.state.in_(TO_DO),
            followups.c.due_at <= now,
            or_(followups.c.lease_until.is_(None), followups.c.lease_until < now),
            ~blocked,
        )
        .order_by(followups.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=followups)
    )


_NOW = bindparam("now", type_=UtcDateTime())
_ANY_READY = (
    select(followups.c.id)
    .where(
        followups.c.state.in_(TO_DO),
        followups.c.due_at <= _NOW,
        or_(followups.c.state == READY, followups.c.lease_until < _NOW),
    )
    .limit(1)
)


def _mine(job: FollowUp) -> Any:
    return and_(followups.c.id == job.id, followups.c.lease == job.lease)


class SqlFollowUps(SqlAccess, FollowUps):
    """``domain.followups.FollowUps`` over the profile's SQL engine (see the module
    docstring)."""

    async def claim(
        self, limit: int, *, lease_seconds: float, probe: bool = True
    ) -> list[FollowUp]:
        now = _now()
        until = now + timedelta(seconds=lease_seconds)
        if probe:  # a plain read first: an idle poll locks nothing
            async with self.connect() as conn:
                if (await conn.execute(_ANY_READY, {"now": now})).first() is None:
                    return []
        async with self.begin() as conn:
            rows = (await conn.execute(_due(now, limit))).mappings().all()
            if not rows:
                return []
            lease = new_token()
            ids = [row["id"] for row in rows]
            await conn.execute(
                update(followups)
                .where(followups.c.id.in_(ids))
                .values(
                    state=READY,
                    lease=lease,
                    lease_until=until,
                    attempts=followups.c.attempts + 1,
                )
            )
        return [
            FollowUp(
                id=int(row["id"]),
                kind=row["kind"],
                thread_key=row["thread_key"],
                tenant_id=row["tenant_id"],
                user_id=row["user_id"],
                run_id=row["run_id"],
                attempts=int(row["attempts"]) + 1,
                lease=lease,
                enqueued_at=row["enqueued_at"],
            )
            for row in rows
        ]

    async def begin_write(self, job: FollowUp, *, lease_seconds: float) -> bool:
        until = _now() + timedelta(seconds=lease_seconds)
        async with self.begin() as conn:
            done = await conn.execute(
                update(followups)
                .where(_mine(job), followups.c.state == READY)
                .values(state=WRITING, lease_until=until)
            )
        return (done.rowcount or 0) == 1

    async def done(self, job: FollowUp) -> None:
        async with self.begin() as conn:
            await conn.execute(delete(followups).where(_mine(job)))

    async def retry(self, job: FollowUp, *, after_seconds: float, error: str) -> bool:
        async with self.begin() as conn:
            done = await conn.execute(
                update(followups)
                .where(_mine(job))
                .values(
                    state=READY,
                    lease=None,
                    lease_until=None,
                    due_at=_now() + timedelta(seconds=after_seconds),
                    error=error[:120],
                )
            )
        return (done.rowcount or 0) == 1

    async def give_up(self, job: FollowUp, *, error: str) -> bool:
        async with self.begin() as conn:
            done = await conn.execute(
                update(followups)
                .where(_mine(job))
                .values(state=GIVEN_UP, lease=None, lease_until=None, error=error[:120])
            )
        return (done.rowcount or 0) == 1

    async def release(self, job: FollowUp) -> None:
        async with self.begin() as conn:
            await conn.execute(
                update(followups)
                .where(_mine(job), followups.c.state == READY)
                .values(lease=None, lease_until=None, attempts=followups.c.attempts - 1)
            )

    async def cancel_thread(self, thread_key: str, *, wait_seconds: float) -> int:
        return await self._cancel(followups.c.thread_key == thread_key, wait_seconds)

    async def cancel_user(self, tenant_id: str, user_id: str, *, wait_seconds: float) -> int:
        return await self._cancel(
            and_(followups.c.tenant_id == tenant_id, followups.c.user_id == user_id),
            wait_seconds,
        )

    async def _cancel(self, where: Any, wait_seconds: float) -> int:
        """Delete the rows but those being written under a running lease; wait for those
        (their worker deletes them, or hands them back and they are deleted here); once the
        wait is over, delete what is left — a write whose lease ran out is no longer waited
        for (its worker bounds its write well inside the lease)."""
        deadline = time.monotonic() + wait_seconds
        deleted = 0
        while True:
            now = _now()
            writing = and_(followups.c.state == WRITING, followups.c.lease_until >= now)
            last = time.monotonic() >= deadline
            async with self.begin() as conn:
                gone = await conn.execute(
                    delete(followups).where(where, *(() if last else (~writing,)))
                )
                deleted += gone.rowcount or 0
                if last:
                    return deleted
                left = (
                    await conn.execute(select(func.count()).select_from(followups).where(where))
                ).scalar_one()
            if not left:
                return deleted
            await asyncio.sleep(CANCEL_POLL_SECONDS)

    async def pending_for(self, tenant_id: str, user_id: str) -> bool:
        query = (
            select(followups.c.id)
            .where(
                followups.c.tenant_id == tenant_id,
                followups.c.user_id == user_id,
                followups.c.state.in_(TO_DO),
            )
            .limit(1)
        )
        async with self.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def counts(self) -> FollowUpCounts:
        query = select(
            followups.c.kind,
            followups.c.state,
            func.count(),
            func.min(followups.c.enqueued_at),
        ).group_by(followups.c.kind, followups.c.state)
        async with self.connect() as conn:
            rows = (await conn.execute(query)).all()
        pending: dict[str, int] = {}
        given_up: dict[str, int] = {}
        oldest: datetime | None = None
        for kind, state, count, first in rows:
            if state == GIVEN_UP:
                given_up[kind] = given_up.get(kind, 0) + int(count)
                continue
            pending[kind] = pending.get(kind, 0) + int(count)
            first = _aware(first)
            if first is not None and (oldest is None or first < oldest):
                oldest = first
        return FollowUpCounts(pending=pending, given_up=given_up, oldest=oldest)


def _aware(value: datetime | None) -> datetime | None:
    """``min()`` over a column bypasses its type on some drivers: naive means UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


_AHEAD = select(
    summaries_ahead.c.base_version, summaries_ahead.c.through_id, summaries_ahead.c.body
).where(summaries_ahead.c.thread_key == bindparam("thread_key"))


class SqlSummariesAhead(SqlAccess, SummariesAhead):
    """``domain.summary.SummariesAhead`` in ``tk_summaries_ahead`` (one row per thread)."""

    async def ahead(self, thread_key: str) -> AheadSummary | None:
        async with self.connect() as conn:
            row = (await conn.execute(_AHEAD, {"thread_key": thread_key})).first()
        return None if row is None else AheadSummary(int(row[0]), str(row[1]), str(row[2]))

    async def keep(
        self, thread_key: str, tenant_id: str, user_id: str, summary: AheadSummary
    ) -> None:
        values = {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "base_version": summary.base_version,
            "through_id": summary.through_id,
            "body": summary.text,
            "at": _now(),
        }
        async with self.begin() as conn:
            await conn.execute(*upsert(conn, summaries_ahead, {"thread_key": thread_key}, values))
