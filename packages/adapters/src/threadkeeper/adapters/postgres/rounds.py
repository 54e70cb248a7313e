"""A round on the postgres profile: one PostgreSQL transaction.

In it: the run's claim is checked and its row locked (``FOR UPDATE``: a run that claims the
thread meanwhile waits for this transaction, then reads the thread with the round in it),
the staged checkpoints go through ``PostgresLedger`` (new message rows, then the checkpoint
with refs, on the transaction's own connection), and the run record is written. The ledger's
in-process cache learns the new rows only once the transaction has committed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from threadkeeper.adapters.atomic import StagedPut, StagedWrites
from threadkeeper.adapters.ledger import CHANNEL, refs_of
from threadkeeper.adapters.postgres.ledger import PostgresLedger
from threadkeeper.adapters.rounds import RoundWrite
from threadkeeper.adapters.sql_rounds import SqlRoundStore
from threadkeeper.adapters.weigh import TABLE_KINDS
from threadkeeper.adapters.written import count_statement

log = logging.getLogger(__name__)


def counting_cursor(
    kinds: Mapping[str, str | None], base: type[AsyncCursor[Any]] = AsyncCursor
) -> type[AsyncCursor[Any]]:
    """A psycopg cursor class over ``base`` (the connection's own: the psycopg
    instrumentation's traced cursor when tracing is on) that adds the parameters of what it
    executes to the round's count (``adapters.written``): the saver's and the ledger's
    statements on the round's own connection, which SQLAlchemy's events do not see. A table
    ``kinds`` does not name is the ledger's (``messages``): LangGraph's are named."""

    class CountingCursor(base):  # type: ignore[valid-type,misc]
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            count_statement(_text(query), params, kinds=kinds, unknown="messages")
            return await super().execute(query, params, **kwargs)

        async def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            params_seq = list(params_seq)
            count_statement(_text(query), params_seq, many=True, kinds=kinds, unknown="messages")
            await super().executemany(query, params_seq, **kwargs)

    return CountingCursor


def _text(query: Any) -> str:
    return query if isinstance(query, str) else query.decode() if isinstance(query, bytes) else ""


@contextlib.contextmanager
def counted(
    raw: Any, cursor_for: Callable[[type[AsyncCursor[Any]]], type[AsyncCursor[Any]]]
) -> Iterator[None]:
    """``raw``'s cursors count what they send until the block ends (``cursor_for``: the
    counting class over the connection's own cursor class)."""
    before = raw.cursor_factory
    raw.cursor_factory = cursor_for(before)
    try:
        yield
    finally:
        raw.cursor_factory = before


_PRUNE = """
WITH checkpoints_pruned AS (
    DELETE FROM checkpoints
    WHERE thread_id = %(thread)s AND checkpoint_ns = '' AND checkpoint_id <> %(head)s
), head_orphaned AS (
    UPDATE checkpoints SET parent_checkpoint_id = NULL
    WHERE thread_id = %(thread)s AND checkpoint_ns = '' AND checkpoint_id = %(head)s
    AND parent_checkpoint_id IS NOT NULL
), writes_pruned AS (
    DELETE FROM checkpoint_writes
    WHERE thread_id = %(thread)s AND checkpoint_ns = '' AND checkpoint_id <> %(head)s
)
DELETE FROM checkpoint_blobs AS b
WHERE b.thread_id = %(thread)s AND b.checkpoint_ns = ''
AND NOT EXISTS (
    SELECT 1 FROM unnest(%(channels)s::text[], %(versions)s::text[]) AS kept(channel, version)
    WHERE kept.channel = b.channel AND kept.version = b.version
)
"""
"""The thread keeps its newest checkpoint only (its state holds the whole history, as refs
to the ledger's rows): the older root checkpoints, their writes, and every blob the head's
``channel_versions`` do not name — what ``aprune(keep_latest)`` leaves of a thread without
subgraphs or ``DeltaChannel``s, in one statement of the round's own transaction instead of
eleven after it. The thread's claim row is locked (``check_claim``) and every earlier row of
the thread is older than the snapshot, so no other writer can add to what it deletes."""

_SESSION = "threadkeeper.session"
"""The key of a pooled connection's server session in its ``info``."""


class _LedgerSink:
    """A round's staged writes on its transaction's own connection: each checkpoint through
    the ledger (new message rows, then the checkpoint with refs), the writes as they are."""

    def __init__(self, store: PostgresRoundStore, raw: Any, thread_key: str) -> None:
        self.store = store
        self.raw = raw
        self.thread_key = thread_key
        self.saver = AsyncPostgresSaver(raw, serde=store.ledger.serde)
        self.applied: list[Callable[[], None]] = []
        """The ledger cache's updates, applied once the transaction committed."""
        self.collect = False
        self.head: Checkpoint | None = None
        """The thread's newest root checkpoint, as stored."""

    async def put(self, op: StagedPut) -> None:
        stored = await self.store.ledger.refs_in(
            self.raw, op.config, op.checkpoint, op.new_versions
        )
        await self.saver.aput(op.config, stored.checkpoint, op.metadata, op.new_versions)
        self.applied.append(stored.apply)
        self.collect = self.collect or stored.replaced
        if op.config["configurable"].get("checkpoint_ns"):
            self.store.nested.add(self.thread_key)
        else:
            self.head = stored.checkpoint

    async def put_writes(self, op: StagedWrites) -> None:
        await self.saver.aput_writes(op.config, op.writes, op.task_id, op.task_path)


class PostgresRoundStore(SqlRoundStore):
    def __init__(
        self,
        engine: AsyncEngine,
        ledger: PostgresLedger,
        kinds: Mapping[str, str | None] = TABLE_KINDS,
    ) -> None:
        self.engine = engine
        self.ledger = ledger
        self.kinds = kinds
        self.cursors: dict[type[AsyncCursor[Any]], type[AsyncCursor[Any]]] = {}
        self.nested: set[str] = set()
        """Threads a round stored a subgraph's checkpoint for: ``after_commit`` prunes them
        with LangGraph's ``aprune`` (``_PRUNE`` keeps the root namespace's head only)."""

    async def session(self, conn: AsyncConnection) -> tuple[int, Any]:
        return await self._session(conn)

    async def write_round(
        self, conn: AsyncConnection, write: RoundWrite
    ) -> tuple[list[Callable[[], None]], bool]:
        """The staged checkpoints through the ledger (new message rows, then each checkpoint
        with refs) on the transaction's own connection, then the prune; (the ledger cache's
        updates to apply once committed, whether message rows were collected)."""
        raw: Any = (await conn.get_raw_connection()).driver_connection
        sink = _LedgerSink(self, raw, write.thread_key)
        with counted(raw, self._cursor):
            await write.staging.replay(sink)
            if sink.head is not None:
                sink.collect = await self._prune(raw, write.thread_key, sink.head, sink.collect)
        return sink.applied, sink.collect

    def abandon(self, write: RoundWrite) -> None:
        self.ledger.discard(write.thread_key)

    def head_in_doubt(self, write: RoundWrite) -> str | None:
        return write.checkpoint_id()  # it did commit; the cache reads it back

    async def committed(
        self, write: RoundWrite, written: tuple[list[Callable[[], None]], bool]
    ) -> str | None:
        applied, collect = written
        for apply in applied:
            apply()
        if collect:
            self.ledger.collected(write.thread_key)
        return write.checkpoint_id()

    def _cursor(self, base: type[AsyncCursor[Any]]) -> type[AsyncCursor[Any]]:
        """The counting cursor class over ``base`` (one per base class)."""
        cursor = self.cursors.get(base)
        if cursor is None:
            cursor = self.cursors[base] = counting_cursor(self.kinds, base)
        return cursor

    async def _prune(self, raw: Any, thread_key: str, head: Checkpoint, collect: bool) -> bool:
        """Keep the thread's newest checkpoint only (``_PRUNE``), in the round's transaction;
        when ``collect`` (a message replaced, or the ledger's mark from an earlier failure) also
        delete the message rows ``head`` does not refer to. Whether it did delete them (a head
        that does not carry the list as refs leaves them to ``after_commit``)."""
        versions = head["channel_versions"]
        async with raw.cursor() as cursor:
            await cursor.execute(
                _PRUNE,
                {
                    "thread": thread_key,
                    "head": str(head["id"]),
                    "channels": [str(channel) for channel in versions],
                    "versions": [str(version) for version in versions.values()],
                },
            )
        keep = refs_of(head["channel_values"].get(CHANNEL))
        if not (collect or self.ledger.dirty(thread_key)) or keep is None:
            return False
        await self.ledger.rows.delete_except(thread_key, keep, raw)
        return True

    @staticmethod
    async def _session(conn: Any) -> tuple[int, Any]:
        """The transaction's server session: (pid, backend_start) — the pooled connection's,
        asked once per connection (``info`` lives as long as the DBAPI connection: a new
        connection after a reconnect asks again)."""
        info = conn.info
        session = info.get(_SESSION)
        if session is None:
            row = (
                await conn.execute(
                    text(
                        "SELECT pid, backend_start FROM pg_stat_activity "
                        "WHERE pid = pg_backend_pid()"
                    )
                )
            ).one()
            session = info[_SESSION] = (int(row[0]), row[1])
        return cast("tuple[int, Any]", session)

    async def end_session(self, session: tuple[int, Any]) -> None:
        """End the broken transaction's session on the server (so that a COMMIT still in
        flight can never land), and wait until it is gone."""
        pid, started = session
        async with self.engine.connect() as conn:
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    "WHERE pid = :pid AND backend_start = :started"
                ),
                {"pid": pid, "started": started},
            )
