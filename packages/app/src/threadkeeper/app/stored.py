"""What the service stored, read back — and deleted — through the backend alone.

``StoredThreads`` is the service's read side: the run service answers ``GET /messages``,
memory, feedback and deletions through it, and the commands that only read (``replay``,
``export``, ``export-runs``, ``doctor``, ``retention --dry-run``) use it without building the agent
(LangChain's agent factory, the model and the hooks are most of a command's start-up): this
module imports message types and the domain, nothing heavier, and no profile.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import msgspec
from langchain_core.messages import BaseMessage

from threadkeeper.app.metrics import DELETIONS, ERASURES
from threadkeeper.app.service import Caller, MemoryEntry, MemoryView
from threadkeeper.domain import transcript as paging
from threadkeeper.domain.errors import UnknownThread
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.runs import EXPORT_PAGE, Feedback, ModelCall, RunRecord, record_pages
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.threads import ThreadRef, ThreadScope
from threadkeeper.domain.transcript import TranscriptMessage, TranscriptPage

if TYPE_CHECKING:  # wired with a backend, never importing one
    from langgraph.store.base import BaseStore, SearchItem

    from threadkeeper.ports.storage import Backend


log = logging.getLogger(__name__)

MEMORY_KINDS = (MemoryKind.PROFILE, MemoryKind.FACTS)
MEMORY_LIMIT = 500
"""Items read per memory kind."""


async def load_memory(store: BaseStore, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
    """The user's memory items (``kind``, ``key``, ``value``, ``source``, ``updated_at``).

    Both kinds in one ``abatch`` — what ``asearch`` sends, one search per kind — so a store
    reads them in one go (SQLite: one transaction, was one per kind; PostgreSQL: one
    connection from the pool).
    """
    from langgraph.store.base import SearchOp  # the backend has imported it already

    ttl = store.ttl_config
    refresh = ttl.get("refresh_on_read", True) if ttl is not None else True  # as asearch's
    found = await store.abatch(
        [
            SearchOp(
                memory_namespace(tenant_id, user_id, kind), limit=MEMORY_LIMIT, refresh_ttl=refresh
            )
            for kind in MEMORY_KINDS
        ]
    )
    return [
        {
            "kind": kind.value,
            "key": item.key,
            "value": str(item.value.get("value", "")),
            "source": item.value.get("source", {}),
            "updated_at": item.updated_at.isoformat(),
        }
        for kind, items in zip(MEMORY_KINDS, found, strict=True)
        for item in cast("list[SearchItem]", items)
        # only the user's own namespace, whatever the store's search matched (issue 26)
        if tuple(item.namespace) == memory_namespace(tenant_id, user_id, kind)
    ]


async def memory_view(store: BaseStore, tenant_id: str, user_id: str) -> MemoryView:
    """The user's memory as ``GET /v1/users/{user_id}/memory`` serves it."""
    items = await load_memory(store, tenant_id, user_id)

    def entries(kind: MemoryKind) -> list[MemoryEntry]:
        return [
            MemoryEntry(m["key"], m["value"], dict(m["source"]))
            for m in items
            if m["kind"] == kind.value
        ]

    return MemoryView(profile=entries(MemoryKind.PROFILE), facts=entries(MemoryKind.FACTS))


@dataclass(frozen=True)
class Replay:
    """A stored run and the messages its model calls were sent, by id, as far as kept."""

    record: RunRecord
    messages: dict[str, BaseMessage]


@dataclass(frozen=True)
class ExportedRun:
    """A stored run as ``export-runs`` lists it: its replay and the feedback on it, if any."""

    replay: Replay
    feedback: Feedback | None


@dataclass(frozen=True)
class UserExport:
    """Everything kept about a user in a tenant."""

    tenant_id: str
    user_id: str
    exported_at: datetime
    threads: list[tuple[str, list[TranscriptMessage]]]
    """(thread id, its whole transcript oldest first), by thread id; a thread with run
    records or feedback only has no messages."""
    memory: MemoryView
    feedback: list[tuple[str, Feedback]]
    """(thread id, feedback item), oldest first."""


@dataclass(frozen=True)
class RetentionPreview:
    """What a retention sweep would delete now (``retention --dry-run``)."""

    thread_keys: list[str]
    would_delete: ErasureReceipt


def _shown(call: ModelCall, order: list[str], record: RunRecord) -> list[str]:
    """The ids a compact window names; where the thread's order no longer holds them (it
    cannot, unless the thread was rewritten), its ranges show as one missing id each."""
    try:
        return call.ids(order, record.human_message_id)
    except ValueError:
        return [
            s if isinstance(s, str) else f"?positions {s[0]}..{s[1]}" for s in call.window or ()
        ]


def _answer_id(record: RunRecord) -> list[str]:
    message = record.response.get("message")
    answer = message.get("id") if isinstance(message, dict) else None
    return [answer] if isinstance(answer, str) else []


class StoredThreads:
    """Reads and deletions of what the service stored, through one opened backend."""

    def __init__(self, backend: Backend, scope: ThreadScope = ThreadScope.USER) -> None:
        self.backend = backend
        self.scope = scope

    def ref(self, caller: Caller, thread_id: str) -> ThreadRef:
        return ThreadRef(caller.tenant_id, caller.user_id, thread_id, self.scope)

    async def messages(
        self, caller: Caller, thread_id: str, *, limit: int, before: str | None
    ) -> TranscriptPage:
        """A page of the transcript (``page_messages``' rule).

        Raises:
            UnknownThread: no such thread (the caller's id in the message).
            UnknownMessage: ``before`` is not in it.
        """
        key = self.ref(caller, thread_id).key
        try:
            return await self.backend.transcript.page(key, limit=limit, before=before)
        except UnknownThread:
            raise UnknownThread(thread_id) from None  # the caller's id, not the storage key

    async def transcript(self, caller: Caller, thread_id: str) -> list[TranscriptMessage]:
        """The whole transcript, oldest first (empty: no such thread)."""
        messages: list[TranscriptMessage] = []
        before: str | None = None
        while True:
            try:
                page = await self.messages(caller, thread_id, limit=paging.MAX_PAGE, before=before)
            except UnknownThread:
                return messages
            messages[:0] = page.messages
            if page.next_before is None:
                return messages
            before = page.next_before

    async def memory(self, caller: Caller) -> MemoryView:
        return await memory_view(self.backend.store, caller.tenant_id, caller.user_id)

    async def replay(self, caller: Caller, thread_id: str, run_id: str) -> Replay | None:
        """The run ``run_id`` of the thread and what its model calls were sent (``None``: no
        such run)."""
        record = await self.backend.runs.get(self.ref(caller, thread_id).key, run_id)
        return None if record is None else await self.replayed(record)

    async def replayed(self, record: RunRecord) -> Replay:
        """What a stored run's model calls were sent (``replay``, and ``export-runs`` for
        each run it lists): its compact windows decoded against the thread's order, the
        messages read from the run's checkpoint (or the archive, where one holds them) —
        the run's human message and answer among them."""
        key = record.thread_key
        if any(call.window is not None for call in record.model_calls):
            order = await self.backend.transcript.message_order(key)
            record = msgspec.structs.replace(
                record,
                model_calls=tuple(
                    msgspec.structs.replace(
                        call, message_ids=tuple(_shown(call, order, record)), window=None
                    )
                    for call in record.model_calls
                ),
            )
        ids = [i for call in record.model_calls for i in call.message_ids]
        ids += [record.human_message_id, *_answer_id(record)]
        messages = await self.backend.transcript.replay_messages(key, record.checkpoint_id, ids)
        return Replay(record, messages)

    async def runs_since(
        self, cutoff: datetime, *, tenant_id: str | None = None, page: int = EXPORT_PAGE
    ) -> AsyncIterator[ExportedRun]:
        """Every run stored at or after ``cutoff`` (of one tenant, or all), oldest first,
        each replayed as ``replay`` does, with its feedback: read a page of ``page`` records
        at a time (one read of their feedback per page), so at most a page is held."""
        async for records in record_pages(
            self.backend.runs, cutoff, tenant_id=tenant_id, page=page
        ):
            notes = await self.backend.runs.feedback_of([(r.thread_key, r.run_id) for r in records])
            for record in records:
                yield ExportedRun(
                    await self.replayed(record), notes.get((record.thread_key, record.run_id))
                )

    async def thread_ids(self, tenant_id: str, user_id: str) -> list[str]:
        """The ids of every thread the user has in the tenant, sorted."""
        keys = await self.backend.retention.user_thread_keys(tenant_id, user_id)
        refs = (ThreadRef.of_key(key, tenant_id, user_id, self.scope) for key in keys)
        return sorted(ref.thread_id for ref in refs if ref is not None)

    async def export(self, tenant_id: str, user_id: str) -> UserExport:
        """Everything kept about the user in the tenant, read as the HTTP API reads it."""
        caller = Caller(tenant_id, user_id)
        threads = [
            (thread_id, await self.transcript(caller, thread_id))
            for thread_id in await self.thread_ids(tenant_id, user_id)
        ]
        feedback = []
        for item in await self.backend.runs.user_feedback(tenant_id, user_id):
            ref = ThreadRef.of_key(item.thread_key, tenant_id, user_id, self.scope)
            feedback.append((ref.thread_id if ref else item.thread_key, item))
        return UserExport(
            tenant_id=tenant_id,
            user_id=user_id,
            exported_at=datetime.now(UTC),
            threads=threads,
            memory=await self.memory(caller),
            feedback=feedback,
        )

    async def retention_preview(self, cutoff: datetime) -> RetentionPreview:
        """The threads idle since before ``cutoff`` and what deleting them would delete."""
        keys = await self.backend.retention.idle_threads(cutoff, limit=2**31 - 1)
        return RetentionPreview(keys, await self.backend.retention.would_delete(keys))

    async def delete_thread(self, caller: Caller, thread_id: str) -> None:
        receipt = await self.backend.retention.delete_thread(self.ref(caller, thread_id).key)
        if receipt.threads:
            DELETIONS.add(receipt.threads, {"reason": "request"})

    async def storage(self, caller: Caller, thread_id: str) -> StorageUsage:
        """The bytes the caller's thread keeps, by kind (``Backend.storage_usage``).

        Raises:
            UnknownThread: nothing is kept under the thread's key — no such thread, or one
                of another user or tenant (whose key is another) — the caller's id in it.
        """
        usage = await self.backend.storage_usage(self.ref(caller, thread_id).key)
        if usage.total == 0:
            raise UnknownThread(thread_id)
        return usage

    async def add_feedback(
        self, caller: Caller, thread_id: str, run_id: str, score: int, comment: str | None
    ) -> None:
        ref = self.ref(caller, thread_id)
        await self.backend.runs.add_feedback(
            Feedback(
                run_id=run_id,
                thread_key=ref.key,
                tenant_id=ref.tenant_id,
                user_id=ref.user_id,
                score=cast("Any", score),
                comment=comment,
                at=datetime.now(UTC),
            )
        )

    async def reset_memory(self, caller: Caller) -> int:
        """Delete the user's memory, and what their run records hold of it (the memory block
        of the stored prompts, the profile of stored escalations)."""
        return await self.backend.retention.reset_memory(caller.tenant_id, caller.user_id)

    async def erase_user(self, caller: Caller) -> ErasureReceipt:
        receipt = await self.backend.retention.erase_user(caller.tenant_id, caller.user_id)
        left = {store: count for store, count in receipt.remaining.items() if count}
        if left:  # counts only: what is left is the user's
            log.error("an erasure's verification found data of the user left: %s", left)
        ERASURES.add(1)
        if receipt.threads:
            DELETIONS.add(receipt.threads, {"reason": "erasure"})
        return receipt

    async def ready(self) -> dict[str, str]:
        return await self.backend.health()


def chunk_lookup(knowledge: Any, tenant_id: str) -> Callable[[str], dict[str, Any] | None]:
    """A knowledge base's chunks of ``tenant_id`` by id, as a stored prompt renders them (here,
    not in ``app.runs.fold``: ``replay`` uses it, and importing ``app.runs`` costs a command
    ~1 s of start-up — the run service, LangChain's agent factory)."""

    def chunk(chunk_id: str) -> dict[str, Any] | None:
        found = knowledge.chunk(tenant_id, chunk_id)
        if found is None:
            return None
        return {
            "chunk_id": found.chunk_id,
            "doc_id": found.doc_id,
            "title": found.title,
            "text": found.text,
        }

    return chunk


__all__ = [
    "ExportedRun",
    "Replay",
    "RetentionPreview",
    "StoredThreads",
    "UserExport",
    "chunk_lookup",
    "load_memory",
    "memory_view",
]
