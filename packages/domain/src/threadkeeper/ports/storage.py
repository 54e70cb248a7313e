"""The storage port: an opened storage profile, as the application uses it.

A run goes through it in this order: ``lock.hold`` (one run per thread; the claim that fences
the run's writes), ``round(thread_key, claim)`` around the graph (compiled with
``checkpointer``; ``transcript.seed`` first, inside the round, so a cold start is stored with
it), ``RoundUnit.store`` once the graph finished (the round whole — archive, checkpoints, run
record and follow-up work in the profile's order — then upkeep), the lock released.

``Backend`` is the three jobs together — ``Rounds``, ``Reads``, ``Upkeep`` — and what
``adapters.profile.Profile.open`` yields; a part of the app that needs one job is typed by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

    from threadkeeper.domain.followups import FollowUps
    from threadkeeper.domain.locks import RunFences, ThreadLock
    from threadkeeper.domain.ratelimit import RateWindows
    from threadkeeper.domain.retention import ErasureReceipt
    from threadkeeper.domain.runs import RunRecord, RunRecords
    from threadkeeper.domain.storage import StorageUsage
    from threadkeeper.domain.summary import SummariesAhead
    from threadkeeper.domain.transcript import Round, ToolInvocation, TranscriptPage

PROFILE_ENTRY_POINTS = "threadkeeper.profiles"
"""The entry-point group storage profiles are registered in: each entry's name is the
profile's (``THREADKEEPER_PROFILE``), its value the package that defines ``PROFILE`` and whose
``settings`` module defines ``SETTINGS`` (``adapters.profiles``). A settings struct may name,
as ``unreachable``, the exceptions (``"module:Class"``) of its drivers that mean "the store
cannot be reached" (``app.service.storage_unreachable``)."""


class ProfileRetention(Protocol):
    """``domain.retention.Retention`` (the sweep uses it) plus deleting one thread, counting
    before deleting, the user's threads and resetting their memory."""

    async def idle_threads(self, cutoff: Any, *, limit: int) -> list[str]: ...

    async def delete_threads(
        self, thread_keys: Sequence[str], *, idle_before: Any = None
    ) -> ErasureReceipt: ...

    async def delete_thread(self, thread_key: str) -> ErasureReceipt: ...

    async def would_delete(self, thread_keys: Sequence[str]) -> ErasureReceipt:
        """What ``delete_threads(thread_keys)`` would delete, counted as it counts
        (``retention --dry-run``); deletes nothing."""
        ...

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt: ...

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        """What is stored of the user, per store (the erasure's verification pass)."""
        ...

    async def user_thread_keys(self, tenant_id: str, user_id: str) -> set[str]:
        """Keys of every thread the user has in the tenant (erasure, export)."""
        ...

    async def reset_memory(self, tenant_id: str, user_id: str) -> int:
        """Delete the user's memory and what their run records hold of it; items deleted."""
        ...

    async def idle_memory(self, cutoff: Any, *, limit: int) -> list[tuple[str, str]]:
        """(tenant, user) of users with memory, none of it written since ``cutoff`` and no
        run of theirs recorded since (the memory sweep)."""
        ...


class Transcript(Protocol):
    """Where a profile's transcript lives — the checkpoint state itself (ADR-0007), or an
    archive beside checkpoints that are a cache of the recent context (the blog design)."""

    keeps_history_in_checkpoints: bool
    """``True``: the checkpoints are the record, so destructive hooks (``compact``) are
    refused; ``False``: the archive is, and the checkpoints may be compacted."""

    async def page(
        self, thread_key: str, *, limit: int, before: str | None = None
    ) -> TranscriptPage:
        """A page of the transcript (``page_messages``' rule).

        Raises:
            UnknownThread: no such thread (its key in the message).
            UnknownMessage: ``before`` is not in it.
        """
        ...

    async def seed(self, thread_key: str) -> dict[str, Any] | None:
        """Before a run: the state to write into a thread whose checkpoints are missing or
        behind the record (cold start) — ``{"messages": [...], "summary": ...}`` — or
        ``None`` when the checkpoints are current."""
        ...

    async def replay_messages(
        self, thread_key: str, checkpoint_id: str | None, ids: Sequence[str]
    ) -> dict[str, BaseMessage]:
        """The messages a stored run's model calls were sent (``ids``), by id, as far as
        they are kept: from the run's checkpoint, or the newest one where it was pruned,
        and from the archive what compaction or the TTL removed from the checkpoints
        (their text, without tool calls)."""
        ...

    async def message_order(self, thread_key: str) -> list[str]:
        """The thread's order (``domain.compact.thread_order``: human messages and answers,
        oldest first) that run records name their windows in — the same positions around a
        run's human message as its state had when the record was written."""
        ...


class RoundUnit(Protocol):
    """One run's round as a unit of work (``adapters.rounds.RoundWork``): the graph's
    checkpoint writes are being staged; ``store`` stores them whole with the run record and
    the round's follow-up work. Leaving it without ``store`` stores nothing."""

    @property
    def written(self) -> Mapping[str, int]:
        """The bytes the round wrote, by ``domain.storage`` kind, once stored (empty before,
        and when a store failed)."""
        ...

    async def store(
        self,
        record: RunRecord,
        round: Round,
        tools: Sequence[ToolInvocation] = (),
        followups: Sequence[str] = (),
    ) -> str | None:
        """Store the round, then the profile's upkeep; the new head checkpoint id (``None``
        where only the record could be written).

        Raises:
            ClaimLost: the run no longer holds the thread (nothing stored).
            CommitInDoubt: the store went out of reach while committing.
        """
        ...


class Rounds(Protocol):
    """What a run holds and stores: the thread's lock and fences, the checkpointer the
    agent's graph is compiled with, and the round."""

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        """The saver the agent's graph is compiled with: inside a round its writes are
        staged."""
        ...

    @property
    def lock(self) -> ThreadLock: ...

    @property
    def fences(self) -> RunFences: ...

    @property
    def rate_windows(self) -> RateWindows | None:
        """Windows every replica shares, where the profile has a server for them."""
        ...

    def round(self, thread_key: str, claim: str) -> AbstractContextManager[RoundUnit]:
        """One run's round as a unit of work."""
        ...


class Reads(Protocol):
    """What the API, the runs and the follow-up work read."""

    @property
    def runs(self) -> RunRecords: ...

    @property
    def transcript(self) -> Transcript: ...

    @property
    def store(self) -> BaseStore:
        """Cross-thread memory (LangGraph's ``BaseStore``)."""
        ...

    @property
    def summaries(self) -> SummariesAhead:
        """Folds of the rolling summary made ahead by follow-up work, for next runs."""
        ...

    @property
    def storage_kinds(self) -> frozenset[str]:
        """The kinds of ``domain.storage.KINDS`` this profile keeps (the others are always 0
        in its ``storage_usage``)."""
        ...

    async def storage_usage(self, thread_key: str) -> StorageUsage:
        """The bytes the thread keeps, by kind (``domain.storage``): reads by the thread's
        key on indexes, no scan, cheap enough for an operator endpoint. All 0 for a thread
        that is not stored (or was deleted)."""
        ...


class Upkeep(Protocol):
    """Retention and erasure, the rounds' follow-up work, and the servers' health."""

    @property
    def retention(self) -> ProfileRetention: ...

    @property
    def followups(self) -> FollowUps:
        """The rounds' follow-up work (``domain.followups``), recorded with each round."""
        ...

    async def health(self) -> dict[str, str]:
        """Each server's state, ``"ok"`` or an error text, within about a second."""
        ...


class Backend(Rounds, Reads, Upkeep, Protocol):
    """An opened profile: everything the service stores through (see the module
    docstring)."""
