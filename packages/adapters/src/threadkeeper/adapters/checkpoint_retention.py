"""``Retention`` for profiles whose transcript is the checkpoint state (embedded, postgres),
and what every profile's retention shares (``UserRetention``: a user's memory, counting before
deleting, the erasure's outline; redis-mysql's ``ArchiveRetention`` builds on it too).

Thread activity comes from the run records (one row per completed run, indexed by time);
a user's threads are found both there and through checkpoint metadata (``user_id`` and
``tenant_id`` travel in ``config["configurable"]`` and land in every checkpoint's metadata).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore, PutOp

from threadkeeper.adapters.sql import SqlRunFences, SqlRunRecords
from threadkeeper.domain import caches
from threadkeeper.domain.locks import RunLock, ThreadLock
from threadkeeper.domain.memory import MemoryKind, memory_namespace, user_namespace
from threadkeeper.domain.retention import ErasureReceipt, HeldDeletion
from threadkeeper.domain.runs import RunRecords
from threadkeeper.domain.threads import log_name
from threadkeeper.domain.tokens import message_text

log = logging.getLogger(__name__)


def transcript_count(messages: Sequence[BaseMessage]) -> int:
    """Messages ``GET /messages`` would serve: human, and AI with text."""
    return sum(
        1
        for m in messages
        if isinstance(m, HumanMessage) or (isinstance(m, AIMessage) and message_text(m).strip())
    )


def under(namespace: Sequence[str], prefix: Sequence[str]) -> bool:
    """Whether ``namespace`` is ``prefix`` or below it, label by label (never by text: ``u1``
    is not under ``u10``, nor ``u_1`` under ``uX1``)."""
    return tuple(namespace[: len(prefix)]) == tuple(prefix)


async def delete_store_prefix(store: BaseStore, prefix: tuple[str, ...]) -> int:
    """Delete every item under a namespace prefix (whole labels); how many were deleted.

    Whatever a store answers, only items under ``prefix`` are deleted, each under its own
    namespace, and every pass deletes what it found or stops: a store whose search also
    returns another namespace's items (the MySQL store's ``LIKE`` did) can neither make it
    delete those nor keep it looping (issue 26)."""
    deleted = 0
    gone: set[tuple[tuple[str, ...], str]] = set()
    for namespace in await store.alist_namespaces(prefix=prefix, limit=10_000):
        if not under(namespace, prefix):
            log.error("the store listed a namespace outside the one being deleted; skipped")
            continue
        while True:
            items = await store.asearch(namespace, limit=1000)
            mine = [item for item in items if under(item.namespace, prefix)]
            if len(mine) < len(items):
                log.error("the store's search answered items of another namespace; skipped")
            if not mine:
                break
            found = {(tuple(item.namespace), item.key) for item in mine}
            if found <= gone:  # deleted before, still found: never loop on it
                raise RuntimeError("the store kept items it was asked to delete")
            gone |= found
            await store.abatch([PutOp(tuple(item.namespace), item.key, None) for item in mine])
            deleted += len(mine)
    return deleted


async def count_store_prefix(store: BaseStore, prefix: tuple[str, ...]) -> int:
    """The items under a namespace prefix (whole labels), as ``delete_store_prefix`` finds
    them: an erasure's verification pass."""
    found: set[tuple[tuple[str, ...], str]] = set()
    for namespace in await store.alist_namespaces(prefix=prefix, limit=10_000):
        if under(namespace, prefix):
            items = await store.asearch(namespace, limit=10_000)
            found |= {(tuple(i.namespace), i.key) for i in items if under(i.namespace, prefix)}
    return len(found)


def _id_of(label: str) -> str:
    """An id from its namespace label (``store_label`` turned ``.`` into ``:``, which no
    tenant or user id holds)."""
    return label.replace(":", ".")


async def idle_memory(
    store: BaseStore, runs: RunRecords, cutoff: datetime, *, limit: int
) -> list[tuple[str, str]]:
    """(tenant, user) of up to ``limit`` users whose memory is idle: none of its items written
    (or, where the store refreshes on read, read) since ``cutoff``, and no run of the user
    recorded since. Every user namespace is looked at, a page at a time."""
    idle: list[tuple[str, str]] = []
    offset = 0
    while len(idle) < limit:
        spaces = await store.alist_namespaces(max_depth=3, limit=500, offset=offset)
        offset += len(spaces)
        users = {(s[0], s[2]) for s in spaces if len(s) == 3 and s[1] == "user"}
        for tenant_label, user_label in sorted(users):
            tenant_id, user_id = _id_of(tenant_label), _id_of(user_label)
            items = []
            for kind in MemoryKind:
                space = memory_namespace(tenant_id, user_id, kind)
                items += await store.asearch(space, limit=500, refresh_ttl=False)
            # SQLite's and MySQL's stores give naive times, in UTC
            newest_item = (
                max(
                    (i.updated_at if i.updated_at.tzinfo else i.updated_at.replace(tzinfo=UTC))
                    for i in items
                )
                if items
                else None
            )
            if newest_item is None or newest_item >= cutoff:
                continue
            newest_run = await runs.user_newest(tenant_id, user_id)
            if newest_run is None or newest_run < cutoff:
                idle.append((tenant_id, user_id))
        if len(spaces) < 500:
            break
    return idle[:limit]


async def reset_memory(store: BaseStore, runs: SqlRunRecords, tenant_id: str, user_id: str) -> int:
    """Delete the user's memory, and what their run records hold of it (the memory block of
    the stored prompts, the profile of stored escalations), and what this process's caches
    hold of the user (their prompts); the items deleted."""
    await runs.cancel_followups(tenant_id, user_id)  # no pending extraction writes after
    deleted = await delete_store_prefix(store, user_namespace(tenant_id, user_id))
    await runs.forget_memory(tenant_id, user_id)
    caches.forget(user=(tenant_id, user_id))
    return deleted


class UserRetention(HeldDeletion):
    """What every profile's retention does the same way, over its memory ``store``, run
    records ``runs`` and claims ``fences``: a user's memory reset and the idle-memory sweep,
    ``would_delete`` counted as ``delete_threads`` counts, and the erasure's outline — the
    user's claims revoked first (a run in flight then stores nothing, even on a thread nothing
    stored yet names), every thread found deleted (each once its run has let go of it, the
    process caches told of it), the user's stray rows and memory, ``erase_rest``, the caches
    and the fence, then the verification pass (``remaining``). A profile says how it counts a
    thread's messages, finds a user's threads and verifies."""

    store: BaseStore
    runs: SqlRunRecords
    fences: SqlRunFences | None

    @abstractmethod
    async def message_count(self, thread_key: str) -> int:
        """The thread's transcript messages, as deleting it counts them."""

    @abstractmethod
    async def user_thread_keys(self, tenant_id: str, user_id: str) -> set[str]:
        """Keys of every thread the user has in the tenant."""

    @abstractmethod
    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        """The erasure's verification pass: what is still stored of the user, per store."""

    async def reset_memory(self, tenant_id: str, user_id: str) -> int:
        return await reset_memory(self.store, self.runs, tenant_id, user_id)

    async def idle_memory(self, cutoff: datetime, *, limit: int) -> list[tuple[str, str]]:
        return await idle_memory(self.store, self.runs, cutoff, limit=limit)

    async def would_delete(self, thread_keys: Sequence[str]) -> ErasureReceipt:
        """What ``delete_threads(thread_keys)`` would delete, counted as it counts (each
        thread listed by ``idle_threads``, so existing)."""
        total = ErasureReceipt()
        for key in thread_keys:
            messages = await self.message_count(key)
            notes = await self.runs.feedback_count(key)
            total = total + ErasureReceipt(threads=1, messages=messages, feedback=notes)
        return total

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt:
        """See the class docstring."""
        in_flight = await revoke_claims(self.fences, tenant_id, user_id)
        keys = await self.user_thread_keys(tenant_id, user_id) | in_flight
        receipt = await self.delete_threads(sorted(keys))
        _, stray_feedback = await self.runs.erase_user(tenant_id, user_id)
        items = await delete_store_prefix(self.store, user_namespace(tenant_id, user_id))
        await self.erase_rest(tenant_id, user_id)
        caches.forget(threads=keys, user=(tenant_id, user_id))
        if self.fences is not None:
            await self.fences.forget_user(tenant_id, user_id)
        remaining = await self.remaining(tenant_id, user_id, sorted(keys))
        return receipt + ErasureReceipt(
            memory_items=items, feedback=stray_feedback, remaining=remaining
        )

    async def erase_rest(self, tenant_id: str, user_id: str) -> None:
        """What else a profile keeps of the user, deleted by the erasure once the threads,
        run records and memory are (before its fence is lifted and it is verified)."""


class CheckpointRetention(UserRetention):
    store_name = "database"
    """How the erasure's verification names the one database this retention keeps."""

    def __init__(
        self,
        saver: BaseCheckpointSaver[Any],
        store: BaseStore,
        runs: SqlRunRecords,
        lock: RunLock | ThreadLock | None = None,
        fences: SqlRunFences | None = None,
    ) -> None:
        self.saver = saver
        self.store = store
        self.runs = runs
        self.lock = lock  # deletions hold the thread's run lock (HeldDeletion)
        self.fences = fences

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        return [row[0] for row in await self.runs.thread_activity(cutoff, limit=limit)]

    async def _messages(self, thread_key: str) -> tuple[int, bool]:
        """(transcript messages, whether the thread has a checkpoint). A thread that cannot be
        read is still deleted: its count is reported as 0, and the failure logged."""
        try:
            found = await self.saver.aget_tuple({"configurable": {"thread_id": thread_key}})
        except Exception:
            log.warning("%s unreadable; deleting it uncounted", log_name(thread_key), exc_info=True)
            return 0, True
        if found is None:
            return 0, False
        return transcript_count(found.checkpoint["channel_values"].get("messages", [])), True

    async def is_idle(self, thread_key: str, cutoff: datetime) -> bool:
        """Whether the thread's newest activity (its newest run) is before ``cutoff``."""
        newest = await self.runs.thread_newest(thread_key)
        return newest is None or newest < cutoff

    async def _delete_held(self, thread_key: str) -> ErasureReceipt:
        messages, exists = await self._messages(thread_key)
        await self.saver.adelete_thread(thread_key)
        runs, feedback = await self.runs.delete_thread(thread_key)
        if self.fences is not None:
            await self.fences.forget(thread_key)
        return ErasureReceipt(threads=int(exists or runs > 0), messages=messages, feedback=feedback)

    async def message_count(self, thread_key: str) -> int:
        return (await self._messages(thread_key))[0]

    async def user_thread_keys(self, tenant_id: str, user_id: str) -> set[str]:
        keys = set(await self.runs.user_threads(tenant_id, user_id))
        async for item in self.saver.alist(
            None, filter={"tenant_id": tenant_id, "user_id": user_id}
        ):
            keys.add(str(item.config["configurable"]["thread_id"]))
        return keys

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        """The erasure's verification pass: what is still stored of the user — rows naming
        them (run records and texts, feedback, claims, their fence), threads any index still
        finds for them, the erased threads' checkpoints and rows, memory items."""
        left = await self.runs.user_rows(tenant_id, user_id)
        left += len(await self.user_thread_keys(tenant_id, user_id))
        for key in thread_keys:
            left += await self.runs.thread_rows(key)
            left += int(await self.saver.aget_tuple(_config(key)) is not None)
        left += await count_store_prefix(self.store, user_namespace(tenant_id, user_id))
        return {self.store_name: left}


def _config(thread_key: str) -> Any:
    return {"configurable": {"thread_id": thread_key, "checkpoint_ns": ""}}


async def revoke_claims(fences: SqlRunFences | None, tenant_id: str, user_id: str) -> set[str]:
    """Revoke the user's claims (``RunFences.revoke_user``); the threads they were on."""
    if fences is None:
        return set()
    return set(await fences.revoke_user(tenant_id, user_id))
