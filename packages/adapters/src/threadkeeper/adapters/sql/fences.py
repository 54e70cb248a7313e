"""Each thread's claim and each user's erasure fence (``SqlRunFences``): a run's claim checked
inside its round's transaction (``check_claim``), an erasure's fence refusing new claims.
"""

from __future__ import annotations

import functools
import sqlite3
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    String,
    bindparam,
    delete,
    select,
    update,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from threadkeeper.adapters.sql.tables import SqlAccess, run_claims, upsert, user_fences
from threadkeeper.domain.errors import ClaimLost
from threadkeeper.domain.locks import USER_BEING_ERASED, RunFences, new_token

REVOKED = "revoked"


# The statements of every run, built once (SQLAlchemy finds their compiled form by a cache key
# it computes once; one made per call cost ~0.15 ms of CPU each time: issue 12)
_CLAIM_TOKEN = select(run_claims.c.token).where(run_claims.c.thread_key == bindparam("thread_key"))
_CLAIM_TOKEN_FOR_UPDATE = _CLAIM_TOKEN.with_for_update()


async def check_claim(conn: AsyncConnection, thread_key: str, token: str) -> None:
    """In the round's transaction: the thread's claim must still be ``token``, and stays so
    until the transaction ends (the row is locked where the database can).

    Raises:
        ClaimLost: another run claimed the thread, or the claim was revoked.
    """
    # SQLite: the write transaction excludes every other; elsewhere the row is locked
    query = _CLAIM_TOKEN if conn.dialect.name == "sqlite" else _CLAIM_TOKEN_FOR_UPDATE
    current = (await conn.execute(query, {"thread_key": thread_key})).scalar()
    if current != token:
        raise ClaimLost(
            "the run lost its claim on the thread before storing its round"
            + (" (the user was erased)" if current == REVOKED else "")
        )


_ERASING = select(user_fences.c.erasing).where(
    user_fences.c.tenant_id == bindparam("tenant_id"),
    user_fences.c.user_id == bindparam("user_id"),
)


async def user_fence(conn: AsyncConnection, tenant_id: str, user_id: str) -> None:
    """In a claim's transaction: write the user's fence row — which locks it until the claim
    commits, so an erasure beginning meanwhile waits for the claim, then revokes it — and
    refuse the claim while the user is being erased.

    Raises:
        ClaimLost: the user's erasure is under way.
    """
    key = {"tenant_id": tenant_id, "user_id": user_id}
    # insert, or rewrite the row as it is: either way the row is this transaction's now
    dialect = conn.dialect.name
    returning = _returns_fence(dialect)
    written = await conn.execute(_fence_upsert(dialect, returning), key)
    if not returning:  # no RETURNING on this upsert: read the row back
        written = await conn.execute(_ERASING, key)
    if written.scalar():
        raise ClaimLost(USER_BEING_ERASED)


def _returns_fence(dialect: str) -> bool:
    """Whether the fence upsert can return the row: PostgreSQL, and SQLite from 3.35 (the
    library Python was built with; older ones have no ``RETURNING``); not MySQL/MariaDB."""
    if dialect == "sqlite":
        return sqlite3.sqlite_version_info >= (3, 35, 0)
    return dialect == "postgresql"


@functools.cache
def _fence_upsert(dialect: str, returning: bool = False) -> Any:
    """``INSERT (tenant, user, erasing=false)``, on a conflict ``erasing = erasing``; with
    ``returning``, ``RETURNING erasing`` (one statement where two were sent)."""
    binds = {
        "tenant_id": bindparam("tenant_id", type_=String()),
        "user_id": bindparam("user_id", type_=String()),
        "erasing": False,
    }
    if dialect in ("mysql", "mariadb"):
        on_mysql = mysql.insert(user_fences).values(binds)
        return on_mysql.on_duplicate_key_update(erasing=user_fences.c.erasing)
    dialects = {"postgresql": postgresql, "sqlite": sqlite}
    made = dialects[dialect].insert(user_fences).values(binds)
    upserted = made.on_conflict_do_update(
        index_elements=["tenant_id", "user_id"], set_={"erasing": user_fences.c.erasing}
    )
    return upserted.returning(user_fences.c.erasing) if returning else upserted


class SqlRunFences(SqlAccess, RunFences):
    """``RunFences`` in ``tk_run_claims`` (every profile: the claims live with the rounds)."""

    async def claim(self, thread_key: str, tenant_id: str, user_id: str, run_id: str) -> str:
        """Claim the thread; refused (``ClaimLost``) while the user is being erased. A
        deletion's claim (no user) is never refused."""
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
            if tenant_id:
                await user_fence(conn, tenant_id, user_id)
            await conn.execute(*upsert(conn, run_claims, {"thread_key": thread_key}, values))
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
        """Mark the user erasing first (waiting for their claims being made: each holds the
        user's row), then revoke every claim of theirs, in one transaction."""
        mine = (run_claims.c.tenant_id == tenant_id, run_claims.c.user_id == user_id)
        async with self.begin() as conn:
            await conn.execute(
                *upsert(
                    conn,
                    user_fences,
                    {"tenant_id": tenant_id, "user_id": user_id},
                    {"erasing": True},
                )
            )
            keys = [
                str(r[0]) for r in await conn.execute(select(run_claims.c.thread_key).where(*mine))
            ]
            await conn.execute(update(run_claims).where(*mine).values(token=REVOKED))
        return keys

    async def forget(self, thread_key: str) -> None:
        async with self.begin() as conn:
            await conn.execute(delete(run_claims).where(run_claims.c.thread_key == thread_key))

    async def forget_user(self, tenant_id: str, user_id: str) -> None:
        """Drop the user's claims and their fence row (once their erasure deleted the
        threads): nothing of the user stays, and their runs may claim again."""
        async with self.begin() as conn:
            await conn.execute(
                delete(run_claims).where(
                    run_claims.c.tenant_id == tenant_id, run_claims.c.user_id == user_id
                )
            )
            await conn.execute(
                delete(user_fences).where(
                    user_fences.c.tenant_id == tenant_id, user_fences.c.user_id == user_id
                )
            )
