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
import functools
import sqlite3
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import msgspec
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
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import TypeDecorator, TypeEngine

from threadkeeper.domain import caches
from threadkeeper.domain.caches import text_bytes
from threadkeeper.domain.compact import Segment, decode_text, delta_size, encode_text, text_digest
from threadkeeper.domain.errors import ClaimLost
from threadkeeper.domain.followups import FollowUps
from threadkeeper.domain.locks import USER_BEING_ERASED, RunFences, new_token
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

REVOKED = "revoked"
CANCEL_WAIT_SECONDS = 60.0
"""How long a deletion waits for a follow-up write under way (a worker bounds its write well
inside this; see ``app.followups``)."""

# The statements of every run, built once (SQLAlchemy finds their compiled form by a cache key
# it computes once; one made per call cost ~0.15 ms of CPU each time: issue 12)
_CLAIM_TOKEN = select(run_claims.c.token).where(run_claims.c.thread_key == bindparam("thread_key"))
_CLAIM_TOKEN_FOR_UPDATE = _CLAIM_TOKEN.with_for_update()
_STORED_TEXTS = select(run_texts.c.digest, run_texts.c.depth).where(
    run_texts.c.thread_key == bindparam("thread_key"),
    run_texts.c.user_id == bindparam("user_id"),
    run_texts.c.digest.in_(bindparam("digests", expanding=True)),
)
_INSERT_TEXTS = insert(run_texts)
_INSERT_RECORD = insert(run_records)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RunRecord)
_segments = msgspec.json.Decoder(tuple[Segment, ...])

COMPRESSED_RECORD = b"Z"
"""First byte of a record blob stored compressed: the rest is the record (either shape) as
raw deflate with ``RECORD_ZDICT`` (written when shorter; a JSON record starts with ``[`` or
``{``, so blobs of every earlier form are told apart by their first byte)."""
RECORD_ZDICT = (
    b'{"message":{"id":"lc_run--","role":"ai","content":"","citations":[{"chunk_id":"",'
    b'"doc_id":"","title":""}]},"usage":{"input_tokens":0,"output_tokens":0,'
    b'"source":"provider"},"source":"counted"},"handoff_context":{"conversation_summary":"",'
    b'"profile":[],"recent_messages":[]},"answered","clarifying","escalate","o200k_base",'
    b'"estimate",[[-1,1]],null,true,false'
)
"""Deflate's preset dictionary for compressed records: the keys and values every record's
JSON repeats. Part of the stored format — never edit it (a new dictionary needs a new first
byte)."""


def pack_record(raw: bytes) -> bytes:
    """A record's blob: ``raw`` (its JSON), compressed when that is shorter."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, RECORD_ZDICT)
    squeezed = COMPRESSED_RECORD + deflate.compress(raw) + deflate.flush()
    return squeezed if len(squeezed) < len(raw) else raw


def unpack_record(blob: bytes) -> bytes:
    """The JSON of a record's blob (``pack_record``; a blob stored uncompressed as it is)."""
    if not blob.startswith(COMPRESSED_RECORD):
        return blob
    inflate = zlib.decompressobj(-15, RECORD_ZDICT)
    return inflate.decompress(blob[1:]) + inflate.flush()


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


STORED_SHAPE = 2
"""A record stored since texts are kept apart is a JSON *array* (``StoredRecord``) whose
first item is this; one written before is the ``RunRecord`` as a JSON object, read as it is."""


class StoredCall(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """A ``ModelCall`` as stored: its summary by digest."""

    tokens: int
    budget: int
    counter: str
    window: tuple[Segment, ...] | None = None
    summary: str | None = None
    """Digest of the summary's text in ``tk_run_texts``."""
    message_ids: tuple[str, ...] = ()


class StoredRecord(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """A ``RunRecord`` as stored: what the row's columns hold (keys, ids, status, time) left
    out, the texts by digest (``tk_run_texts``), the response without the run's id, thread
    id and status where they are the record's."""

    shape: int
    thread_id: str
    prompt: str
    """Digest of the system prompt."""
    prompt_version: str
    response: dict[str, Any]
    checkpoint_id: str | None = None
    content_digest: str = ""
    chunk_ids: tuple[str, ...] = ()
    memory: str | None = None
    """Digest of the memory keys, one per line (``None``: the run read no memory)."""
    model_calls: tuple[StoredCall, ...] = ()
    message_id_given: bool = False
    response_whole: bool = False
    """The response is stored whole (its ids or status are not the record's)."""


_RESPONSE_KEYS = ("run_id", "thread_id", "status")
_stored = msgspec.json.Decoder(StoredRecord)

MAX_DEPTH = 32
"""A text stored as a delta has at most this many deltas below it down to a whole text."""

RECENT_TEXTS = 512
RECENT_TEXT_BYTES = 8 << 20
"""The recent texts kept: 512, of at most 8 MiB (``caches.text_bytes``) in all."""


class RecentTexts:
    """(thread key, user, kind) → (digest, text) of the newest text written of that kind: the
    base the next version is encoded against. Only a hint — a base is used only if its row is
    in the database the transaction writes (same digest, same text); so replicas and restarts
    just start from a whole text.

    The texts are the thread's rolling summary (the user's words) and prompts (their memory):
    least recently written first out past ``RECENT_TEXTS`` entries or ``RECENT_TEXT_BYTES``,
    and a deleted thread's, an erased user's (or one whose memory was reset) dropped at once
    (``caches.forget``). On another replica they are never used again — the rows they name
    were deleted with the thread — and go with the bound."""

    def __init__(self) -> None:
        self._texts: OrderedDict[tuple[str, str, str], tuple[str, str]] = OrderedDict()
        self._bytes = 0
        caches.register(self)

    def get(self, key: tuple[str, str, str]) -> tuple[str, str] | None:
        return self._texts.get(key)

    def remember(self, key: tuple[str, str, str], digest: str, text: str) -> None:
        self._pop(key)
        size = text_bytes(text)
        if size > RECENT_TEXT_BYTES:
            return  # the next version is stored whole
        self._texts[key] = (digest, text)
        self._bytes += size
        while len(self._texts) > RECENT_TEXTS or self._bytes > RECENT_TEXT_BYTES:
            self._pop(next(iter(self._texts)))

    def _pop(self, key: tuple[str, str, str]) -> None:
        known = self._texts.pop(key, None)
        if known is not None:
            self._bytes -= text_bytes(known[1])

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        """Drop the threads' texts, and the user's (by user id: in any tenant)."""
        user_id = user[1] if user is not None else None
        for key in [k for k in self._texts if k[0] in threads or k[1] == user_id]:
            self._pop(key)

    @property
    def size(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._texts)


_recent_texts = RecentTexts()


async def put_texts(
    conn: AsyncConnection, record: RunRecord, texts: Sequence[tuple[str, str, bool]]
) -> list[str]:
    """Store each ``(kind, text, delta)`` of ``texts`` for the record's thread and user (once:
    by its digest) in the caller's transaction; their digests, in order. With ``delta``, as
    the segments of the newest text of that kind written, where that is much smaller.

    One ``SELECT`` (which texts are stored, and the depth of each candidate base) and at most
    one ``INSERT`` for them all — a statement per text and per base was the larger part of a
    run's statements (issue 12). The same as storing them one by one, in order: a text
    written earlier in the list is known to the later ones, and is their base."""
    if not texts:
        return []
    digests = [text_digest(text) for _, text, _ in texts]
    mine = (record.thread_key, record.user_id)
    hints = {kind: _recent_texts.get((*mine, kind)) for kind, *_ in texts}
    wanted = set(digests) | {hint[0] for hint in hints.values() if hint is not None}
    found = await conn.execute(
        _STORED_TEXTS,
        {"thread_key": record.thread_key, "user_id": record.user_id, "digests": sorted(wanted)},
    )
    depth_of: dict[str, int] = {str(digest): int(depth) for digest, depth in found.all()}
    rows: list[dict[str, Any]] = []
    for (kind, text, delta), digest in zip(texts, digests, strict=True):
        recent = hints[kind]
        hints[kind] = (digest, text)
        if digest in depth_of:
            continue
        row: dict[str, Any] = {"base": None, "depth": 0, "body": text}
        base_depth = depth_of.get(recent[0]) if delta and recent is not None else None
        if recent is not None and base_depth is not None and base_depth < MAX_DEPTH:
            segments = encode_text(text, recent[1])
            if delta_size(segments) * 2 < len(text.encode("utf-8")):
                row = {
                    "base": recent[0],
                    "depth": base_depth + 1,
                    "body": _encoder.encode(segments).decode(),
                }
        depth_of[digest] = row["depth"]
        rows.append(
            {
                "thread_key": record.thread_key,
                "user_id": record.user_id,
                "tenant_id": record.tenant_id,
                "digest": digest,
                **row,
            }
        )
    if rows:
        await conn.execute(_INSERT_TEXTS, rows)
    for kind, hint in hints.items():
        if hint is not None:
            _recent_texts.remember((record.thread_key, record.user_id, kind), *hint)
    return digests


async def stored_form(
    conn: AsyncConnection, record: RunRecord, *, prompt: str | None = None
) -> bytes:
    """The record as stored (``StoredRecord``): its texts put into ``tk_run_texts`` in the
    caller's transaction and named by digest (``prompt``: the digest to name its system
    prompt by, a text already stored)."""
    response = dict(record.response)
    whole = [response.get(k) for k in _RESPONSE_KEYS] != [
        record.run_id,
        record.thread_id,
        record.status,
    ]
    if not whole:
        for key in _RESPONSE_KEYS:
            del response[key]
    texts = [("summary", c.summary, True) for c in record.model_calls if c.summary is not None]
    if record.memory_keys:
        texts.append(("memory", "\n".join(record.memory_keys), False))
    if prompt is None:
        texts.append(("prompt", record.system_prompt, False))
    digests = iter(await put_texts(conn, record, texts))
    calls = [
        StoredCall(
            call.tokens,
            call.budget,
            call.counter,
            call.window,
            None if call.summary is None else next(digests),
            call.message_ids,
        )
        for call in record.model_calls
    ]
    memory = next(digests) if record.memory_keys else None
    stored = StoredRecord(
        shape=STORED_SHAPE,
        thread_id=record.thread_id,
        prompt=prompt or next(digests),
        prompt_version=record.prompt_version,
        response=response,
        checkpoint_id=record.checkpoint_id,
        content_digest=record.content_digest,
        chunk_ids=record.chunk_ids,
        memory=memory,
        model_calls=tuple(calls),
        message_id_given=record.message_id_given,
        response_whole=whole,
    )
    return pack_record(_encoder.encode(stored))


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


def _refs(stored: StoredRecord) -> set[str]:
    refs = {stored.prompt} | ({stored.memory} if stored.memory is not None else set())
    return refs | {c.summary for c in stored.model_calls if c.summary is not None}


async def _texts(
    conn: AsyncConnection, thread_key: str, user_id: str, digests: set[str]
) -> dict[str, str]:
    """The texts of ``digests`` (with the versions their deltas are made of).

    Raises:
        LookupError: one is not stored (never: texts are deleted with their records).
    """
    rows: dict[str, tuple[str | None, str]] = {}
    wanted = set(digests)
    while wanted:
        found = await conn.execute(
            select(run_texts.c.digest, run_texts.c.base, run_texts.c.body).where(
                run_texts.c.thread_key == thread_key,
                run_texts.c.user_id == user_id,
                run_texts.c.digest.in_(sorted(wanted)),
            )
        )
        for digest, base, body in found.all():
            rows[str(digest)] = (base, body)
        missing = wanted - rows.keys()
        if missing:
            raise LookupError(f"run texts {sorted(missing)} of {thread_key} are not stored")
        wanted = {base for base, _ in rows.values() if base is not None} - rows.keys()
    texts: dict[str, str] = {}
    for digest in digests:
        chain = [digest]
        while chain[-1] not in texts and rows[chain[-1]][0] is not None:
            chain.append(str(rows[chain[-1]][0]))
        for item in reversed(chain):
            if item not in texts:
                base, body = rows[item]
                texts[item] = (
                    body if base is None else decode_text(_segments.decode(body), texts[base])
                )
    return texts


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
