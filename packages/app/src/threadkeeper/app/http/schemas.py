"""Request and response bodies of the HTTP contract (msgspec Structs; the field names are the
contract). Patterns are written so JSON Schema (ECMA-262) and Python read them alike; values
are additionally matched in full (``exact``), since Python's ``$`` also accepts a final newline.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

import msgspec

from threadkeeper.app.service import (
    AnswerOut,
    CitationOut,
    MemoryEntry,
    MemoryView,
    RunResultOut,
    UsageOut,
)
from threadkeeper.domain.threads import TENANT_OR_USER_ID, THREAD_ID
from threadkeeper.domain.transcript import TranscriptMessage

TENANT_HEADER = "X-Tenant-Id"
USER_HEADER = "X-User-Id"
LOCALE_HEADER = "X-Locale"

ID_PATTERN = TENANT_OR_USER_ID.pattern
"""``X-Tenant-Id``, ``X-User-Id`` and the ``user_id`` path segment."""
THREAD_ID_PATTERN = THREAD_ID.pattern
"""``thread_id`` path segments, message ids (body ``message.id``, query ``before``)."""
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
LOCALE_PATTERN = r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$"
"""``X-Locale``: loosely BCP 47 (``en``, ``fa-IR``, ``zh-Hans-CN``, ``zh_CN``)."""
NOT_BLANK_PATTERN = (
    r"[^\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)
"""A character that is not whitespace: Python's ``\\S`` spelled out, since ECMA-262 reads ``\\S``
otherwise (there U+001C–U+001F and U+0085 are not whitespace, U+FEFF is; found by
schemathesis)."""

MAX_COMMENT_CHARS = 2000


def exact(pattern: str, value: str) -> bool:
    """``value`` matches ``pattern`` entirely (no final newline slipping past ``$``)."""
    return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None


# --- requests -------------------------------------------------------------------------------

MessageId = Annotated[str, msgspec.Meta(pattern=THREAD_ID_PATTERN, min_length=1, max_length=128)]


class RunMessageBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    content: Annotated[
        str,
        msgspec.Meta(
            pattern=NOT_BLANK_PATTERN,
            description="The user's message; not blank; at most 32 KiB of UTF-8 (else 413).",
        ),
    ]
    id: MessageId | None = None

    def __post_init__(self) -> None:
        if self.id is not None and not exact(THREAD_ID_PATTERN, self.id):
            raise ValueError(f"Expected `str` matching regex {THREAD_ID_PATTERN!r}")


class RunBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``POST /v1/threads/{thread_id}/runs``."""

    message: RunMessageBody
    run_id: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=UUID_PATTERN,
                description="Client-chosen run id; a completed run_id returns its stored body.",
            ),
        ]
        | None
    ) = None

    def __post_init__(self) -> None:
        if self.run_id is not None and not exact(UUID_PATTERN, self.run_id):
            raise ValueError(f"Expected `str` matching regex {UUID_PATTERN!r}")


class FeedbackBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``POST /v1/threads/{thread_id}/runs/{run_id}/feedback``."""

    score: Literal[1, -1]
    comment: (
        Annotated[
            str,
            # no NUL: PostgreSQL text cannot hold it (found by schemathesis)
            msgspec.Meta(max_length=MAX_COMMENT_CHARS, pattern=r"^[^\x00]*$"),
        ]
        | None
    ) = None


# --- responses ------------------------------------------------------------------------------
# A run's outcome (``RunResultOut`` and its parts) is the service's own vocabulary
# (``app.service``): the JSON body and the SSE ``end`` event are encoded from it.

__all__ = ["AnswerOut", "CitationOut", "RunResultOut", "UsageOut"]


class TranscriptMessageOut(msgspec.Struct, frozen=True):
    id: str
    role: Literal["human", "ai"]
    content: str
    citations: list[CitationOut]
    created_at: datetime


class MessagesPageOut(msgspec.Struct, frozen=True):
    """``GET /v1/threads/{thread_id}/messages``: oldest→newest; ``next_before`` pages older."""

    messages: list[TranscriptMessageOut]
    next_before: str | None


class MemorySourceOut(msgspec.Struct, frozen=True):
    thread_id: str | None
    message_id: str | None
    at: datetime | None


class MemoryEntryOut(msgspec.Struct, frozen=True):
    key: str
    value: str
    source: MemorySourceOut


class MemoryOut(msgspec.Struct, frozen=True):
    """``GET /v1/users/{user_id}/memory``."""

    profile: list[MemoryEntryOut]
    facts: list[MemoryEntryOut]
    pending: bool = False
    """Memory work of the user's answered runs is still to do (it is done after each answer,
    usually within a second or two): the memory may yet change. ``false``: it is current."""


class MemoryResetOut(msgspec.Struct, frozen=True):
    """``DELETE /v1/users/{user_id}/memory``: how many items were deleted."""

    memory_items: int


class ErasureReceiptOut(msgspec.Struct, frozen=True):
    """``DELETE /v1/users/{user_id}``: counts deleted, and what the verification pass that
    ends the erasure still found of the user, per store (0 each)."""

    threads: int
    messages: int
    memory_items: int
    feedback: int
    remaining: dict[str, int]


class StorageBytesOut(msgspec.Struct, frozen=True):
    """Bytes by kind (docs/api.md, "Storage per thread"); a kind the profile does not keep
    is 0."""

    checkpoints: int
    messages: int
    run_records: int
    archive: int
    audit: int
    feedback: int


class ThreadStorageOut(msgspec.Struct, frozen=True):
    """``GET /v1/threads/{thread_id}/storage``: what the thread keeps, by kind, and in all
    (the user's memory is kept per user and is not in it)."""

    thread_id: str
    bytes: StorageBytesOut
    """Stored: after threadkeeper's own compression, before the server's."""
    total: int
    logical_bytes: StorageBytesOut
    """The same rows with threadkeeper's compression undone (docs/api.md)."""
    logical_total: int


class LiveOut(msgspec.Struct, frozen=True):
    status: Literal["ok"]


class ReadyOut(msgspec.Struct, frozen=True):
    status: Literal["ok"]
    checks: dict[str, str]
    """Each backend's state, all ``"ok"``."""


class ValidationErrorOut(msgspec.Struct, frozen=True, omit_defaults=True):
    message: str
    key: str | None = None
    source: str | None = None
    """``header``, ``path``, ``query`` or ``body``."""


class Problem(msgspec.Struct, frozen=True, omit_defaults=True):
    """RFC 9457 problem details (``application/problem+json``) with threadkeeper's members."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    running_run_id: str | None = None
    """409 thread busy: the run in flight (absent when that run is ending: retry)."""
    message_id: str | None = None
    """409 duplicate message: the id already in the thread."""
    field: str | None = None
    """409 idempotency mismatch: the request field that differs (``message.content`` or
    ``message.id``); never what the stored request said."""
    errors: list[ValidationErrorOut] | None = None
    """422: one entry per invalid header, path or query parameter or body field."""
    checks: dict[str, str] | None = None
    """503 not ready: each backend's state."""


# --- from the service's views (the routes, and what ``threadkeeper export`` writes) ---------


def message_out(message: TranscriptMessage) -> TranscriptMessageOut:
    return TranscriptMessageOut(
        id=message.id,
        role=message.role,
        content=message.content,
        citations=[CitationOut(c.chunk_id, c.doc_id, c.title) for c in message.citations],
        created_at=message.created_at,
    )


def _entry_out(entry: MemoryEntry) -> MemoryEntryOut:
    source = msgspec.convert(entry.source, MemorySourceOut, strict=False)
    return MemoryEntryOut(key=entry.key, value=entry.value, source=source)


def memory_out(view: MemoryView) -> MemoryOut:
    """The memory body (also what ``threadkeeper export`` writes)."""
    return MemoryOut(
        profile=[_entry_out(e) for e in view.profile],
        facts=[_entry_out(e) for e in view.facts],
        pending=view.pending,
    )
