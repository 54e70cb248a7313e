"""Domain errors: each names a rule that was broken, and the API maps each to one status."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error a threadkeeper rule raises."""


class MessageTooLarge(DomainError):
    """The newest human message alone does not fit the token budget (HTTP 413).

    Raised before anything is stored: a silent cut would answer a question the user did not ask.
    """

    def __init__(self, tokens: int, budget: int) -> None:
        super().__init__(f"message needs {tokens} tokens; the budget is {budget}")
        self.tokens = tokens
        self.budget = budget


class ContextOverflow(DomainError):
    """The fixed part of the model input (system prompt, framing) leaves no room for the
    newest human message — a configuration problem, not the user's."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(
            f"system prompt and newest message need {needed} tokens; the budget is {budget}"
        )
        self.needed = needed
        self.budget = budget


class ThreadBusy(DomainError):
    """Another run holds the thread (HTTP 409, naming the running run).

    ``running_run_id`` is ``None`` when the holder could not be named because it was letting
    go of the thread at that moment (a run ending): the caller may retry at once.
    """

    def __init__(self, running_run_id: str | None) -> None:
        if running_run_id is None:
            super().__init__("a run on this thread is ending; retry")
        else:
            super().__init__(f"thread is busy with run {running_run_id}")
        self.running_run_id = running_run_id


class ClaimLost(DomainError):
    """The run no longer holds its claim on the thread when it comes to store its round: its
    lock was lost (a lock store flushed, a session gone) and another run may have taken the
    thread, or the user was erased while it ran. Nothing of the round was stored (HTTP 409)."""


class ModelUnavailable(DomainError):
    """The model (and its fallback) failed every attempt (HTTP 502); nothing was stored."""


class RunTimeout(DomainError):
    """The run passed ``THREADKEEPER_RUN_TIMEOUT_SECONDS``; nothing was stored (HTTP 504)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the run did not finish within {seconds:g} s; nothing was stored")
        self.seconds = seconds


class CommitInDoubt(DomainError):
    """The connection to the store broke while the round's transaction was committing, and
    the store could not be reached again in time to learn whether it had committed (HTTP 503).
    A retry with the same ``run_id`` returns the stored answer if it was stored, or runs."""


class AtCapacity(DomainError):
    """This replica runs as many runs as it can hold locks for (HTTP 503 with Retry-After)."""

    retry_after_seconds = 1


class UnknownThread(DomainError):
    """No such thread in this tenant/user scope (HTTP 404)."""


class UnknownMessage(DomainError):
    """A paging cursor names a message the thread does not have (HTTP 404)."""


class InvalidDuration(DomainError, ValueError):
    """A duration such as ``90d`` could not be read."""


class StoredDataRefused(DomainError):
    """A stored value — a checkpoint, a pending write, a message of the ledger — names a type
    threadkeeper never stores, so something other than threadkeeper wrote it; it was refused,
    not read: nothing it names was imported, constructed or called (HTTP 500). The thread
    cannot be read until an operator repairs or deletes it.

    ``refused`` is what was named (``module.name``, or a storage format); ``thread`` is the
    thread as log lines name it (``threads.log_name``), once the read that met it is known.
    Neither tells anything of the stored content.
    """

    def __init__(self, refused: str, thread: str | None = None) -> None:
        super().__init__(f"stored data names {refused}, which threadkeeper does not store")
        self.refused = refused
        self.thread = thread
