"""What a storage profile is: the contract every ``adapters/<profile>/`` satisfies.

A profile is chosen by name (``THREADKEEPER_PROFILE``) from the registry
(``adapters.profiles``). It declares its own settings (a frozen msgspec struct whose fields
are ``THREADKEEPER_<FIELD>`` variables, and which says whether callers need a service token
and whether its checkpoints are the record), migrates and checks its schema, and opens a
``Backend``: everything a running service stores through.

Adding a profile: one new folder ``adapters/<name>/`` whose ``settings`` module defines
``SETTINGS`` (the struct) and whose package defines ``PROFILE`` (a ``Profile``), plus one line
in ``adapters.profiles``. ``threadkeeper.conformance`` holds the suites a new profile must pass
(``docs/writing-a-backend.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:  # the registry reads profiles' settings without importing any of this
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

    from threadkeeper.adapters.atomic import AtomicSaver
    from threadkeeper.adapters.rounds import RoundStore, RoundWork
    from threadkeeper.domain.followups import FollowUps
    from threadkeeper.domain.locks import RunFences, ThreadLock
    from threadkeeper.domain.ratelimit import RateWindows
    from threadkeeper.domain.retention import ErasureReceipt
    from threadkeeper.domain.runs import RunRecords
    from threadkeeper.domain.storage import StorageUsage
    from threadkeeper.domain.summary import SummariesAhead
    from threadkeeper.domain.transcript import TranscriptPage


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


class Backend(Protocol):
    """An opened profile: what the service stores through.

    A run goes through it in this order: ``lock.hold`` (one run per thread; the claim that
    fences the run's writes), ``round(thread_key, claim)`` around the graph (compiled with
    ``checkpointer``; ``transcript.seed`` first, inside the round, so a cold start is stored
    with it), ``RoundWork.store`` once the graph finished (the round whole — archive,
    checkpoints, run record in the profile's order — then upkeep), the lock released.
    """

    @property
    def saver(self) -> BaseCheckpointSaver[Any]:
        """The profile's own saver (reads; retention)."""
        ...

    @property
    def checkpointer(self) -> AtomicSaver:
        """The saver the agent's graph is compiled with: inside a round its writes are
        staged."""
        ...

    @property
    def store(self) -> BaseStore:
        """Cross-thread memory (langgraph's ``BaseStore``)."""
        ...

    @property
    def runs(self) -> RunRecords: ...

    @property
    def fences(self) -> RunFences: ...

    @property
    def followups(self) -> FollowUps:
        """The rounds' follow-up work (``domain.followups``), recorded by ``rounds`` with
        each round."""
        ...

    @property
    def summaries(self) -> SummariesAhead:
        """Folds of the rolling summary made ahead by follow-up work, for next runs."""
        ...

    @property
    def lock(self) -> ThreadLock: ...

    @property
    def rounds(self) -> RoundStore: ...

    @property
    def transcript(self) -> Transcript: ...

    @property
    def retention(self) -> ProfileRetention: ...

    @property
    def rate_windows(self) -> RateWindows | None:
        """Windows every replica shares, where the profile has a server for them."""
        ...

    def round(self, thread_key: str, claim: str) -> AbstractContextManager[RoundWork]:
        """One run's round as a unit of work (``adapters.rounds.RoundsOf``)."""
        ...

    async def health(self) -> dict[str, str]:
        """Each server's state, ``"ok"`` or an error text, within about a second."""
        ...

    @property
    def storage_kinds(self) -> frozenset[str]:
        """The kinds of ``domain.storage.KINDS`` this profile keeps (the others are always 0
        in its ``storage_usage``)."""
        ...

    async def storage_usage(self, thread_key: str) -> StorageUsage:
        """The bytes the thread keeps, by kind (``domain.storage``), weighed as
        ``adapters.weigh`` weighs SQL rows (and Redis's ``MEMORY USAGE`` of the thread's
        keys): reads by the thread's key on indexes, no scan, cheap enough for an operator
        endpoint. All 0 for a thread that is not stored (or was deleted)."""
        ...


class Profile(ABC):
    """One storage profile (see the module docstring)."""

    name: ClassVar[str]
    """The registry's name of the profile (``THREADKEEPER_PROFILE``). What the profile *is* —
    whether callers need a service token, whether its checkpoints are the record (which
    decides its default history hooks) — its settings struct declares (``requires_token``
    and ``history_in_checkpoints`` class variables)."""
    schema_server: ClassVar[str | None] = None
    """The server that holds the schema ``migrate`` creates (``None``: set up at start)."""

    @abstractmethod
    def open(
        self, settings: Any, *, exclusive: bool = True
    ) -> AbstractAsyncContextManager[Backend]:
        """Open the backend on ``settings`` (the profile's own struct). ``exclusive=False``:
        beside a running server, for commands that only read.

        Raises:
            SchemaNotReady: the schema is missing or behind (``threadkeeper migrate``).
        """

    async def migrate(self, settings: Any) -> list[str]:
        """Create or upgrade the schema; the steps taken (none by default)."""
        return []

    async def schema_problems(self, settings: Any) -> list[str]:
        """What is missing or behind (empty: current). Raises when the servers cannot be
        reached."""
        return []

    def storage(self, settings: Any) -> str:
        """Where the profile keeps its data, credentials masked (the start-up line)."""
        return self.name

    def startup_problem(self, exc: BaseException) -> str | None:
        """One line for a start-up failure this profile knows (``None``: not one)."""
        return None


class SchemaNotReady(RuntimeError):
    """The database lacks threadkeeper's schema, or has an older one."""


def masked_url(url: str) -> str:
    """``url`` with its password hidden (SQLAlchemy's URL parser reads every scheme here:
    ``postgresql://``, ``mysql+asyncmy://``, ``redis://``); a URL it cannot read is shown as
    its scheme alone."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("://", 1)[0] + "://…"
