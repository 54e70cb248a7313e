"""Retention and erasure: the ``Retention`` port, the sweep, and duration parsing."""

from __future__ import annotations

import re
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import msgspec

from threadkeeper.domain import caches
from threadkeeper.domain.errors import InvalidDuration
from threadkeeper.domain.locks import RunLock, ThreadLock, hold_when_free


class ErasureReceipt(msgspec.Struct):
    """Counts of what a deletion removed (the body of ``DELETE /v1/users/{user_id}``)."""

    threads: int = 0
    messages: int = 0
    memory_items: int = 0
    feedback: int = 0
    remaining: dict[str, int] = msgspec.field(default_factory=dict)
    """An erasure's verification pass: per store, what of the user it still found once the
    deletions were done — rows, items or keys; 0 each (an erasure names every store it
    checked). Empty for a thread deletion."""

    def __add__(self, other: ErasureReceipt) -> ErasureReceipt:
        remaining = dict(self.remaining)
        for store, left in other.remaining.items():
            remaining[store] = remaining.get(store, 0) + left
        return ErasureReceipt(
            self.threads + other.threads,
            self.messages + other.messages,
            self.memory_items + other.memory_items,
            self.feedback + other.feedback,
            remaining,
        )

    def counts(self) -> ErasureReceipt:
        """The counts deleted, without the verification (``remaining``)."""
        return msgspec.structs.replace(self, remaining={})


class SweepReport(msgspec.Struct):
    cutoff: datetime
    dry_run: bool
    batches: int
    deleted: ErasureReceipt
    """What was deleted — or, on a dry run, the threads that would be (``threads`` only)."""


class Retention(ABC):
    """Finds idle threads and deletes threads or a user's everything."""

    @abstractmethod
    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        """Keys of threads whose newest activity is before ``cutoff``, oldest first."""

    @abstractmethod
    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        """Delete the threads with everything that belongs to them (not the user's memory).

        With ``idle_before`` (retention), a thread is deleted only if it is *still* idle when
        its deletion holds it: a run may have added a round since ``idle_threads`` listed it.
        """

    @abstractmethod
    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt:
        """Delete every thread, memory item, feedback and run record of the user; the receipt
        ends with the verification pass (``remaining``)."""

    @abstractmethod
    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        """What is stored of the user, per store the profile keeps: rows, items and keys that
        name them, and those of the threads ``thread_keys`` (an erasure's verification pass,
        run on the threads it deleted; 0 each once it is done)."""


class Sweepable(Protocol):
    """What a sweep needs of a ``Retention`` (any object with these two methods)."""

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]: ...

    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: datetime | None = None
    ) -> ErasureReceipt: ...


class HeldDeletion(Retention):
    """Deletion of threads under their run lock, shared by the storage adapters.

    Each thread is deleted while its deletion holds the thread's run lock
    (``hold_when_free``: a run in flight commits first, a new one is refused), so a run can
    never write a deleted thread back; with ``idle_before`` (retention) the thread is
    deleted only if ``is_idle`` still says so once it is held. Subclasses say how a thread's
    activity is read (``is_idle``) and what deleting one removes (``_delete_held``). Once it
    is deleted, still held, the process caches drop what they hold of it (``caches.forget``).
    """

    lock: RunLock | ThreadLock | None = None

    @abstractmethod
    async def is_idle(self, thread_key: str, cutoff: datetime) -> bool:
        """Whether the thread's newest activity is before ``cutoff``."""

    @abstractmethod
    async def _delete_held(self, thread_key: str) -> ErasureReceipt:
        """Delete the thread with everything that belongs to it (its lock is held)."""

    async def delete_thread(
        self, thread_key: str, *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        if self.lock is None:
            return await self._delete_if_idle(thread_key, idle_before)
        holder = f"deletion-{uuid.uuid4().hex[:12]}"  # what a refused run is told is running
        async with hold_when_free(self.lock, thread_key, holder):
            return await self._delete_if_idle(thread_key, idle_before)

    async def _delete_if_idle(
        self, thread_key: str, idle_before: datetime | None
    ) -> ErasureReceipt:
        if idle_before is not None and not await self.is_idle(thread_key, idle_before):
            return ErasureReceipt()  # a run added a round since the thread was listed
        receipt = await self._delete_held(thread_key)
        caches.forget(threads=[thread_key])
        return receipt

    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        total = ErasureReceipt()
        for key in thread_keys:
            total = total + await self.delete_thread(key, idle_before=idle_before)
        return total


async def sweep(
    retention: Sweepable,
    *,
    now: datetime,
    older_than: timedelta,
    batch: int = 500,
    dry_run: bool = False,
    max_batches: int | None = None,
) -> SweepReport:
    """Delete threads idle longer than ``older_than`` in batches of ``batch``."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    cutoff = now - older_than
    if dry_run:
        # Count without deleting: page by growing the limit (idle_threads has no offset).
        keys = await retention.idle_threads(cutoff, limit=batch * (max_batches or 10**6))
        return SweepReport(cutoff, True, 0, ErasureReceipt(threads=len(keys)))
    total = ErasureReceipt()
    batches = 0
    while max_batches is None or batches < max_batches:
        keys = await retention.idle_threads(cutoff, limit=batch)
        if not keys:
            break
        total = total + await retention.delete_threads(keys, idle_before=cutoff)
        batches += 1
        if len(keys) < batch:
            break
    return SweepReport(cutoff, False, batches, total)


class MemorySweepable(Protocol):
    """What a memory sweep needs of a retention: users whose memory is idle, and a reset."""

    async def idle_memory(self, cutoff: datetime, *, limit: int) -> list[tuple[str, str]]: ...

    async def reset_memory(self, tenant_id: str, user_id: str) -> int: ...


class MemorySweepReport(msgspec.Struct):
    cutoff: datetime
    users: int
    """Users whose memory was deleted (or, on a dry run, would be)."""
    memory_items: int


async def sweep_memory(
    retention: MemorySweepable,
    *,
    now: datetime,
    older_than: timedelta,
    batch: int = 500,
    dry_run: bool = False,
) -> MemorySweepReport:
    """Delete the memory of users idle longer than ``older_than``: no memory written or read
    and no run of theirs since the cutoff (``THREADKEEPER_RETENTION_MEMORY``). A user who runs
    meanwhile only loses what the next run finds again."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    cutoff = now - older_than
    if dry_run:
        idle = await retention.idle_memory(cutoff, limit=10**6)
        return MemorySweepReport(cutoff, len(idle), 0)
    users = items = 0
    while True:
        idle = await retention.idle_memory(cutoff, limit=batch)
        for tenant_id, user_id in idle:
            items += await retention.reset_memory(tenant_id, user_id)
            users += 1
        if len(idle) < batch:
            return MemorySweepReport(cutoff, users, items)


_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w`` → a positive ``timedelta``."""
    match = _DURATION.match(text)
    if not match or int(match.group(1)) == 0:
        raise InvalidDuration(f"not a positive duration like 90d, 12h or 30m: {text!r}")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@dataclass(slots=True)
class _ThreadRecord:
    tenant_id: str
    user_id: str
    last_activity: datetime
    messages: int
    feedback: int = 0


class InMemoryRetention(Retention):
    """Thread activity, memory and feedback counts in dicts: the unit-test fake."""

    def __init__(self) -> None:
        self._threads: dict[str, _ThreadRecord] = {}
        self._memory: dict[tuple[str, str], int] = {}
        self._mutex = threading.Lock()

    def record_thread(
        self, key: str, tenant_id: str, user_id: str, at: datetime, messages: int, feedback: int = 0
    ) -> None:
        self._threads[key] = _ThreadRecord(tenant_id, user_id, at, messages, feedback)

    def record_memory(self, tenant_id: str, user_id: str, items: int) -> None:
        self._memory[(tenant_id, user_id)] = items

    def thread_keys(self) -> set[str]:
        return set(self._threads)

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        idle = sorted(
            (r.last_activity, k) for k, r in self._threads.items() if r.last_activity < cutoff
        )
        return [k for _, k in idle[:limit]]

    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: datetime | None = None
    ) -> ErasureReceipt:
        receipt = ErasureReceipt()
        with self._mutex:
            for key in thread_keys:
                current = self._threads.get(key)
                if (
                    idle_before is not None
                    and current is not None
                    and current.last_activity >= idle_before
                ):
                    continue  # active again since it was listed
                record = self._threads.pop(key, None)
                if record is not None:
                    receipt = receipt + ErasureReceipt(1, record.messages, 0, record.feedback)
        return receipt

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt:
        keys = [
            k for k, r in self._threads.items() if (r.tenant_id, r.user_id) == (tenant_id, user_id)
        ]
        receipt = await self.delete_threads(keys)
        items = self._memory.pop((tenant_id, user_id), 0)
        remaining = await self.remaining(tenant_id, user_id, keys)
        return receipt + ErasureReceipt(memory_items=items, remaining=remaining)

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        user = (tenant_id, user_id)
        left = sum(1 for r in self._threads.values() if (r.tenant_id, r.user_id) == user)
        left += sum(1 for key in thread_keys if key in self._threads)
        return {"memory": left + self._memory.get(user, 0)}
