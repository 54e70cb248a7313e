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
        for event in self._events():
            yield event

    async def batches(self) -> AsyncGenerator[list[RunEvent], None]:
        yield self._events()

    def _events(self) -> list[RunEvent]:
        return [
            RunEvent("metadata", {"run_id": self.run_id, "thread_id": self.thread_id}),
            RunEvent("end", self.outcome),
        ]

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
    client_gone: bool = False
    """Its SSE client left before the run ended, and the run was cancelled for it."""
    queue: asyncio.Queue[RunEvent | DomainError | None] = field(default_factory=asyncio.Queue)
    outcome: asyncio.Future[RunResultOut] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def events(self) -> AsyncGenerator[RunEvent, None]:
        batches = self.batches()
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()

    async def batches(self) -> AsyncGenerator[list[RunEvent], None]:
        """The events in lists: each holds every event queued by the time it is asked for
        (at least one). The model streams its tokens faster than a client is written to; an SSE
        relay writes a list at once instead of one write per token."""
        finished = False
        try:
            while True:
                batch: list[RunEvent] = []
                item = await self.queue.get()
                while True:
                    if item is None or isinstance(item, DomainError):
                        finished = True
                        if batch:
                            yield batch
                        if item is None:
                            return
                        raise item
                    batch.append(item)
                    if self.queue.empty():
                        break
                    item = self.queue.get_nowait()
                yield batch
        finally:
            if not finished:
                self.abandon()

    def abandon(self) -> bool:
        """Its client is gone: cancel the run — it must leave no trace — unless it is storing
        its round (a finished run is stored whole). Whether it was cancelled."""
        task = self.task
        if task is None or task.done() or self.finishing:
            return False
        self.client_gone = True
        task.cancel()
        return True

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
