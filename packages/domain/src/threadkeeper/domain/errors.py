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
    """Another run holds the thread (HTTP 409, naming the running run)."""

    def __init__(self, running_run_id: str) -> None:
        super().__init__(f"thread is busy with run {running_run_id}")
        self.running_run_id = running_run_id


class AtCapacity(DomainError):
    """This replica runs as many runs as it can hold locks for (HTTP 503 with Retry-After)."""

    retry_after_seconds = 1


class UnknownThread(DomainError):
    """No such thread in this tenant/user scope (HTTP 404)."""


class UnknownMessage(DomainError):
    """A paging cursor names a message the thread does not have (HTTP 404)."""


class InvalidDuration(DomainError, ValueError):
    """A duration such as ``90d`` could not be read."""
