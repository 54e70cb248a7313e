"""What the HTTP layer and the CLI call: the ``ThreadService`` interface and its vocabulary.

The HTTP layer only translates: headers and paths into a ``Caller`` and arguments, results
into bodies, domain errors into problems (see ``PROBLEMS``). Everything else — locks,
atomic runs, storage — happens behind this interface.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from functools import cache
from typing import Any, Literal, NamedTuple, Protocol

import msgspec

from threadkeeper.domain.errors import (
    AtCapacity,
    ClaimLost,
    CommitInDoubt,
    ContextOverflow,
    DomainError,
    MessageTooLarge,
    ModelUnavailable,
    RunTimeout,
    StoredDataRefused,
    ThreadBusy,
    UnknownMessage,
    UnknownThread,
)
from threadkeeper.domain.retention import ErasureReceipt
from threadkeeper.domain.runs import IdempotencyMismatch, UnknownRun
from threadkeeper.domain.storage import StorageUsage
from threadkeeper.domain.transcript import TranscriptPage

MAX_MESSAGE_BYTES = 32 * 1024


class Caller(msgspec.Struct, frozen=True):
    """Who is asking, from the trusted service-to-service headers."""

    tenant_id: str
    user_id: str
    locale: str | None = None


class RunMessage(msgspec.Struct, frozen=True):
    """A user's message for a run. Made only within the size rule: over
    ``MAX_MESSAGE_BYTES`` of UTF-8 it raises ``MessageTooLong`` (413) — the one place the
    rule is checked, wherever the message comes from (the route, the CLI, a test)."""

    content: str
    id: str | None = None

    def __post_init__(self) -> None:
        size = len(self.content.encode("utf-8"))
        if size > MAX_MESSAGE_BYTES:
            raise MessageTooLong(size, MAX_MESSAGE_BYTES)


class RunRequest(msgspec.Struct, frozen=True):
    message: RunMessage
    run_id: str | None = None
    deltas: bool = True
    """The caller reads the answer as it is written (SSE ``messages`` events). A JSON caller
    does not: the graph is then run without a token stream, so the builtin model answers in
    one message instead of a chunk per token (a provider configured to stream still streams:
    ``streaming=True``)."""


class DuplicateMessage(DomainError):
    """The message id is already in the thread under another run (HTTP 409)."""

    def __init__(self, message_id: str, run_id: str | None) -> None:
        super().__init__(f"message {message_id} is already in this thread")
        self.message_id = message_id
        self.run_id = run_id


class MessageTooLong(DomainError):
    """The message is over 32 KiB of UTF-8 (HTTP 413), refused before anything is stored."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message is {size} bytes of UTF-8; the limit is {limit}")
        self.size = size
        self.limit = limit


class RunFailed(DomainError):
    """The run did not complete; the thread is as it was before it (SSE ``error`` / 500)."""


class Unavailable(DomainError):
    """A storage backend cannot be reached (HTTP 503)."""


class ProblemSpec(NamedTuple):
    """How a domain error is answered: its status and RFC 9457 problem type."""

    status: int
    slug: str
    """The problem type is ``urn:threadkeeper:problem:<slug>``."""
    title: str
    detail: str | None = None
    """``None``: the exception's own message (which never names a storage key)."""


PROBLEMS: dict[type[DomainError], ProblemSpec] = {
    ThreadBusy: ProblemSpec(409, "thread-busy", "Thread busy"),
    DuplicateMessage: ProblemSpec(409, "duplicate-message", "Duplicate message"),
    IdempotencyMismatch: ProblemSpec(409, "idempotency-mismatch", "Idempotency key reused"),
    ClaimLost: ProblemSpec(
        409,
        "claim-lost",
        "Run lost its claim on the thread",
        "The run lost its hold on the thread before it could store its round (its lock was "
        "lost, or the user was erased); nothing was stored.",
    ),
    MessageTooLarge: ProblemSpec(413, "message-too-large", "Message too large"),
    MessageTooLong: ProblemSpec(413, "message-too-large", "Message too large"),
    ContextOverflow: ProblemSpec(413, "context-overflow", "Context overflow"),
    UnknownThread: ProblemSpec(404, "unknown-thread", "Unknown thread", "No such thread."),
    UnknownMessage: ProblemSpec(
        404, "unknown-message", "Unknown message", "No such message in this thread."
    ),
    UnknownRun: ProblemSpec(404, "unknown-run", "Unknown run", "No such run in this thread."),
    RunFailed: ProblemSpec(
        500, "run-failed", "Run failed", "The run did not complete; the thread is unchanged."
    ),
    StoredDataRefused: ProblemSpec(
        500,
        "stored-data-refused",
        "Stored data refused",
        "A stored value of this thread names a type the service never stores; it was refused, "
        "not read. The thread cannot be read until an operator repairs or deletes it.",
    ),
    ModelUnavailable: ProblemSpec(
        502,
        "model-unavailable",
        "Model unavailable",
        "The model did not answer (after its retries and fallback); the thread is unchanged.",
    ),
    Unavailable: ProblemSpec(
        503, "unavailable", "Service unavailable", "A storage backend is unavailable."
    ),
    AtCapacity: ProblemSpec(
        503, "at-capacity", "At capacity", "Too many runs in flight on this replica."
    ),
    CommitInDoubt: ProblemSpec(
        503,
        "commit-in-doubt",
        "Outcome unknown",
        "The store became unreachable while the round was being committed: it may or may not "
        "be stored. Retry with the same run_id to get the stored answer, or a new run.",
    ),
    RunTimeout: ProblemSpec(
        504,
        "run-timeout",
        "Run timed out",
        "The run did not finish within THREADKEEPER_RUN_TIMEOUT_SECONDS; the thread is unchanged.",
    ),
}
"""Every domain error the API answers with, one line each (the HTTP layer reads it)."""


def problem_spec(exc: DomainError) -> ProblemSpec | None:
    """The entry of ``exc``'s class, or of its nearest listed base class."""
    return next((PROBLEMS[cls] for cls in type(exc).__mro__ if cls in PROBLEMS), None)


@cache
def _unreachable() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "a store cannot be reached": the builtins', and those each
    registered profile's settings name (``unreachable``: its drivers' knowledge stays with the
    profile; ``ports.storage.PROFILE_ENTRY_POINTS``). A driver that is not installed (its
    profile's extra left out) is skipped."""
    import importlib
    from importlib.metadata import entry_points

    from threadkeeper.ports.storage import PROFILE_ENTRY_POINTS

    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for entry in entry_points(group=PROFILE_ENTRY_POINTS):
        try:
            settings = importlib.import_module(f"{entry.module}.settings").SETTINGS
        except ImportError:
            continue
        for spec in getattr(settings, "unreachable", ()):
            module_name, _, name = spec.partition(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in found:
                found.append(cls)
    return tuple(found)


def storage_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a storage server that cannot be reached."""
    unreachable = _unreachable()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, unreachable):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def run_failure(exc: Exception) -> DomainError:
    """What a run that failed answers with (SSE ``error`` / JSON problem): a domain error as
    it is, a store out of reach as ``Unavailable``, anything else as ``RunFailed``. Every one
    of them means the thread is as it was before the run (``CommitInDoubt`` excepted, which
    says so)."""
    if isinstance(exc, DomainError):
        return exc
    # imported here: langgraph.errors brings langgraph.types and LangChain's tracers (~0.5 s),
    # which the commands that only read storage never need (this module's types they do)
    from langgraph.errors import GraphRecursionError

    if isinstance(exc, GraphRecursionError):  # past the run's step limit (MAX_MODEL_CALLS)
        return RunFailed("the run kept calling tools past its step limit; nothing was stored")
    if storage_unreachable(exc):
        return Unavailable("a storage backend is unreachable; nothing was stored")
    return RunFailed(f"the run failed: {type(exc).__name__}")


class RunEvent(msgspec.Struct, frozen=True):
    """One SSE event: ``metadata``, ``messages``, ``custom``, ``end`` or ``error``."""

    event: Literal["metadata", "messages", "custom", "end", "error"]
    data: dict[str, Any] | RunResultOut
    """``end``: the run's outcome; any other event: a mapping."""


class CitationOut(msgspec.Struct, frozen=True):
    chunk_id: str
    doc_id: str
    title: str


class AnswerOut(msgspec.Struct, frozen=True):
    id: str
    role: Literal["ai"]
    content: str
    citations: list[CitationOut]


class UsageOut(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int
    source: Literal["provider", "counted"]
    """``provider``: the model's own figures (every call reported them); ``counted``:
    threadkeeper's count with ``THREADKEEPER_TOKENIZER`` (input as each call's window was
    counted, output as the replies count)."""


class RunResultOut(msgspec.Struct, frozen=True, omit_defaults=True):
    """A run's outcome: the JSON-mode body of a run, the data of its SSE ``end`` event and
    what its run record keeps (``RunRecord.response``, as builtins)."""

    run_id: str
    thread_id: str
    status: Literal["answered", "clarifying", "escalate"]
    message: AnswerOut
    usage: UsageOut
    handoff_context: dict[str, Any] | None = None
    """Only with ``status == "escalate"``: conversation_summary, profile, recent_messages."""


def stored_result(response: dict[str, Any]) -> RunResultOut:
    """A run record's ``response`` as the outcome it was (records written before usage had
    a ``source`` counted their tokens: they say ``counted``)."""
    usage = response.get("usage")
    if isinstance(usage, dict) and "source" not in usage:
        response = {**response, "usage": {**usage, "source": "counted"}}
    return msgspec.convert(response, RunResultOut)


class RunHandle(Protocol):
    """A started (or already completed) run."""

    run_id: str

    def events(self) -> AsyncGenerator[RunEvent, None]:
        """The run's events in order, ending with ``end``; a run that fails raises
        ``RunFailed`` from the generator instead. Closing the generator before the end (a
        client gone) cancels the run, which then leaves the thread as it was."""
        ...

    def batches(self) -> AsyncGenerator[list[RunEvent], None]:
        """``events()`` in lists, each of every event ready when it is asked for (at least
        one): an SSE relay writes each list at once. Closing it is closing ``events()``."""
        ...

    async def result(self) -> RunResultOut:
        """The outcome (the ``end`` event's data); waits for the run. Not cancelled by a
        client disconnect.

        Raises:
            RunFailed: the run did not complete.
        """
        ...


class MemoryEntry(msgspec.Struct, frozen=True):
    key: str
    value: str
    source: dict[str, Any]


class MemoryView(msgspec.Struct, frozen=True):
    profile: list[MemoryEntry]
    facts: list[MemoryEntry]
    pending: bool = False
    """Follow-up work of the user's rounds is still to do: the memory may yet change."""


class ThreadService(Protocol):
    async def start_run(self, caller: Caller, thread_id: str, request: RunRequest) -> RunHandle:
        """Validate and start one run. Nothing is stored when this raises.

        Raises:
            ThreadBusy: a run is in flight on the thread (names it).
            DuplicateMessage: the message id is in the thread under another run.
            MessageTooLarge: over 32 KiB of UTF-8 or alone over the token budget.
        """
        ...

    def count_refused(self, status: int, slug: str, *, deltas: bool) -> None:
        """Count a run refused before ``start_run`` saw it (a body or message too large) as
        ``start_run`` counts its own refusals (``threadkeeper.runs``)."""
        ...

    async def messages(
        self, caller: Caller, thread_id: str, *, limit: int, before: str | None
    ) -> TranscriptPage: ...

    async def delete_thread(self, caller: Caller, thread_id: str) -> None: ...

    async def storage(self, caller: Caller, thread_id: str) -> StorageUsage:
        """The bytes the caller's thread keeps, by kind.

        Raises:
            UnknownThread: no such thread of the caller (nothing is kept under its key).
        """
        ...

    async def add_feedback(
        self, caller: Caller, thread_id: str, run_id: str, score: int, comment: str | None
    ) -> None: ...

    async def memory(self, caller: Caller) -> MemoryView: ...

    async def reset_memory(self, caller: Caller) -> int: ...

    async def erase_user(self, caller: Caller) -> ErasureReceipt: ...

    async def ready(self) -> dict[str, str]:
        """Each backend's state (``"ok"`` or an error text); ready when all are ``"ok"``."""
        ...
