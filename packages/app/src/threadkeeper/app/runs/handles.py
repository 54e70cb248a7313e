"""A run as its caller holds it (``RunHandle``): one already completed, or one in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from threadkeeper.app.service import RunEvent, RunResultOut
from threadkeeper.domain.errors import DomainError


@dataclass
class CompletedRun:
    """A retry of a completed ``run_id``: its stored outcome, no new run."""

    run_id: str
    outcome: RunResultOut
    thread_id: str

    async def events(self) -> AsyncGenerator[RunEvent, None]:
        yield RunEvent("metadata", {"run_id": self.run_id, "thread_id": self.thread_id})
        yield RunEvent("end", self.outcome)

    async def result(self) -> RunResultOut:
        return self.outcome


@dataclass
class LiveRun:
    """A run executing in its own task, its events queued for an SSE client."""

    run_id: str
    task: asyncio.Task[None] | None = None
    finishing: bool = False
    """The graph has finished: the round is being stored and the run is no longer cancelled
    when its client leaves (a finished run is stored whole)."""
    queue: asyncio.Queue[RunEvent | DomainError | None] = field(default_factory=asyncio.Queue)
    outcome: asyncio.Future[RunResultOut] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def events(self) -> AsyncGenerator[RunEvent, None]:
        finished = False
        try:
            while (event := await self.queue.get()) is not None:
                if isinstance(event, DomainError):
                    finished = True
                    raise event
                yield event
            finished = True
        finally:
            task = self.task
            if not finished and task is not None and not task.done() and not self.finishing:
                task.cancel()  # the client is gone: the run must leave no trace

    async def result(self) -> RunResultOut:
        return await asyncio.shield(self.outcome)

    def succeed(self, outcome: RunResultOut) -> None:
        """The round is stored: ``end`` (after the thread's lock was released)."""
        if not self.outcome.done():
            self.outcome.set_result(outcome)
        self.queue.put_nowait(RunEvent("end", outcome))

    def fail(self, failure: DomainError) -> None:
        """Nothing was stored: ``error`` to an SSE client, the problem to a JSON one."""
        if not self.outcome.done():
            self.outcome.set_exception(failure)
        self.queue.put_nowait(failure)

    def close(self) -> None:
        self.queue.put_nowait(None)
        if self.outcome.done() and not self.outcome.cancelled():
            self.outcome.exception()  # mark retrieved: JSON mode may never ask
