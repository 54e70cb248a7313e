"""The texts of run records, stored once per thread and digest (``tk_run_texts``), as deltas
where that is shorter; a record's stored shape (``StoredRecord``), compressed with a trained
dictionary; the recent texts this process wrote, so a round does not read them back.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import msgspec
from sqlalchemy import (
    bindparam,
    insert,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from threadkeeper.adapters.sql.tables import run_texts
from threadkeeper.domain import caches
from threadkeeper.domain.caches import text_bytes
from threadkeeper.domain.compact import Segment, decode_text, delta_size, encode_text, text_digest
from threadkeeper.domain.runs import (
    RunRecord,
)

_STORED_TEXTS = select(run_texts.c.digest, run_texts.c.depth).where(
    run_texts.c.thread_key == bindparam("thread_key"),
    run_texts.c.user_id == bindparam("user_id"),
    run_texts.c.digest.in_(bindparam("digests", expanding=True)),
)
_INSERT_TEXTS = insert(run_texts)


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
