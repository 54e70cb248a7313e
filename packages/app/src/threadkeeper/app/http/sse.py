"""Relaying a run's events as Server-Sent Events.

The relay only forwards ``RunHandle.events()``; the run itself lives in the service. When the
client goes away Litestar cancels the stream wherever it waits and runs no cleanup of its own,
so the relay closes the service's iterator in every case — stream finished, cancelled inside
the relay, or abandoned at a ``yield`` (the response's background task then closes it). Closing
that iterator is how the run learns its client left (and leaves the thread as it was).

While the run has nothing to send (a slow model, a tool) the relay sends a keep-alive comment
every ``heartbeat`` seconds (``THREADKEEPER_SSE_HEARTBEAT_SECONDS``), so that proxies and
clients do not take a quiet stream for a dead one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio
import msgspec
from litestar.background_tasks import BackgroundTask
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from threadkeeper.app.http.problems import domain_problem, problem_body, unexpected_problem
from threadkeeper.app.service import RunEvent
from threadkeeper.domain.errors import DomainError

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
HEARTBEAT_SECONDS = 15.0
KEEP_ALIVE = ServerSentEventMessage(data=None, comment="keep-alive")
"""A comment and nothing else: an empty `data:` line would dispatch an empty event."""
CLOSE_TIMEOUT_SECONDS = 5.0
"""How long closing the service's iterator may take once the client is gone."""
TERMINAL_EVENTS = frozenset({"end", "error"})


def encode_event(event: str, data: Any) -> ServerSentEventMessage:
    return ServerSentEventMessage(event=event, data=msgspec.json.encode(data).decode())


class EventRelay:
    """Forwards one run's events; owns closing the service's event iterator."""

    def __init__(
        self, events: AsyncIterator[RunEvent], heartbeat: float = HEARTBEAT_SECONDS
    ) -> None:
        self._events = events
        self._heartbeat = heartbeat
        self._first: RunEvent | None = None
        self._stream: AsyncGenerator[ServerSentEventMessage, None] | None = None
        self._closed = False

    @classmethod
    async def start(
        cls, events: AsyncIterator[RunEvent], heartbeat: float = HEARTBEAT_SECONDS
    ) -> EventRelay:
        """Take the first event (``metadata``) before the response starts.

        The service's iterator is then running, so closing it reaches the run even when the
        client leaves before the first byte (closing a generator never started runs none of
        its code); and an error raised before any event is a plain problem response.
        """
        relay = cls(events, heartbeat)
        try:
            relay._first = await anext(events)
        except StopAsyncIteration:
            relay._first = None
        except BaseException:
            await relay.close_events()
            raise
        return relay

    def stream(self) -> AsyncGenerator[ServerSentEventMessage, None]:
        self._stream = self._relay()
        return self._stream

    async def _relay(self) -> AsyncGenerator[ServerSentEventMessage, None]:
        try:
            if self._first is not None:
                yield encode_event(self._first.event, self._first.data)
                if self._first.event in TERMINAL_EVENTS:
                    return
            async for event in self._with_heartbeats():
                if event is None:
                    yield KEEP_ALIVE
                    continue
                yield encode_event(event.event, event.data)
                if event.event in TERMINAL_EVENTS:
                    return
        except Exception as exc:  # the service broke mid-stream: end the stream with `error`
            problem = (
                domain_problem(exc) if isinstance(exc, DomainError) else unexpected_problem(exc)
            )
            yield encode_event("error", problem_body(problem))
        finally:
            await self.close_events()

    async def _with_heartbeats(self) -> AsyncGenerator[RunEvent | None, None]:
        """The run's events, and ``None`` whenever ``heartbeat`` seconds pass without one.

        The next event is awaited in a task that survives the heartbeats (cancelling a wait
        for the next event would cancel the run); it is cancelled only when the relay ends.
        """
        pending: asyncio.Future[RunEvent] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(self._events))
                done, _ = await asyncio.wait({pending}, timeout=self._heartbeat)
                if not done:
                    yield None
                    continue
                current, pending = pending, None
                try:
                    event = current.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending

    async def close_events(self) -> None:
        """Close the service's iterator once (shielded: the request may be cancelled)."""
        if self._closed:
            return
        self._closed = True
        aclose = getattr(self._events, "aclose", None)
        if aclose is None:
            return
        with anyio.move_on_after(CLOSE_TIMEOUT_SECONDS, shield=True):
            await aclose()

    async def close(self) -> None:
        """After the response (finished or client gone): close the relay, then the events."""
        if self._stream is not None:
            await self._stream.aclose()
        await self.close_events()

    def response(self) -> ServerSentEvent:
        return ServerSentEvent(
            self.stream(), headers=SSE_HEADERS, background=BackgroundTask(self.close)
        )
