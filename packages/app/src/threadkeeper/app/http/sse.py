"""Relaying a run's events as Server-Sent Events.

The relay only forwards ``RunHandle.batches()``; the run itself lives in the service. When the
client goes away Litestar cancels the stream wherever it waits and runs no cleanup of its own,
so the relay closes the service's iterator in every case — stream finished, cancelled inside
the relay, or abandoned at a ``yield`` (the response's background task then closes it). Closing
that iterator is how the run learns its client left (and leaves the thread as it was).

Each batch — every event the run had queued when the relay asked for more — goes out as one
body chunk, so one ASGI message and one socket write, not one per token: a model streams its
tokens faster than a client is written to (the builtin model queues a whole answer at once).

While the run has nothing to send (a slow model, a tool) the relay sends a keep-alive comment
every ``heartbeat`` seconds (``THREADKEEPER_SSE_HEARTBEAT_SECONDS``), so that proxies and
clients do not take a quiet stream for a dead one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import anyio
import msgspec
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream

from threadkeeper.app.http.problems import domain_problem, problem_body, unexpected_problem
from threadkeeper.app.service import RunEvent
from threadkeeper.domain.errors import DomainError

SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
HEARTBEAT_SECONDS = 15.0
KEEP_ALIVE = b": keep-alive\r\n\r\n"
"""A comment and nothing else: an empty `data:` line would dispatch an empty event."""
CLOSE_TIMEOUT_SECONDS = 5.0
"""How long closing the service's iterator may take once the client is gone."""
TERMINAL_EVENTS = frozenset({"end", "error"})


_SPLITLINES_BREAKS = (
    (b"\xc2\x85", b"\\u0085"),
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
)
"""Characters JSON may hold unescaped that ``str.splitlines`` takes for line breaks (NEL, LINE
and PARAGRAPH SEPARATOR; JSON escapes the others, which are control characters), as UTF-8 and
as JSON escapes. SSE's own line breaks are CR and LF only (httpx-sse keeps to that), but a
client that reads the stream by lines with httpx's ``aiter_lines`` or ``splitlines`` — a
common hand-written client, this project's load harness among them — split a ``data:`` line
holding one of them in two, and the event's JSON broke."""


def encode_event(event: str, data: Any) -> bytes:
    """One event: its name and its data as one line of JSON, lines ended by CRLF. JSON escapes
    CR and LF inside strings; the other characters some clients split lines at are escaped
    too (``_SPLITLINES_BREAKS``), so the ``data:`` line is one line to every client."""
    body = msgspec.json.encode(data)
    if b"\xe2\x80" in body or b"\xc2\x85" in body:
        for raw, escaped in _SPLITLINES_BREAKS:
            body = body.replace(raw, escaped)
    return b"event: %s\r\ndata: %s\r\n\r\n" % (event.encode(), body)


class EventRelay:
    """Forwards one run's events; owns closing the service's event iterator."""

    def __init__(
        self, batches: AsyncIterator[Sequence[RunEvent]], heartbeat: float = HEARTBEAT_SECONDS
    ) -> None:
        self._events = batches
        self._heartbeat = heartbeat
        self._first: Sequence[RunEvent] = ()
        self._stream: AsyncGenerator[bytes, None] | None = None
        self._closed = False

    @classmethod
    async def start(
        cls, batches: AsyncIterator[Sequence[RunEvent]], heartbeat: float = HEARTBEAT_SECONDS
    ) -> EventRelay:
        """Take the first batch (it begins with ``metadata``) before the response starts.

        The service's iterator is then running, so closing it reaches the run even when the
        client leaves before the first byte (closing a generator never started runs none of
        its code); and an error raised before any event is a plain problem response.
        """
        relay = cls(batches, heartbeat)
        try:
            relay._first = await anext(batches)
        except StopAsyncIteration:
            relay._first = ()
        except BaseException:
            await relay.close_events()
            raise
        return relay

    def stream(self) -> AsyncGenerator[bytes, None]:
        """The response body: a chunk per batch (or keep-alive), until the run's last event."""
        self._stream = self._relay()
        return self._stream

    async def _relay(self) -> AsyncGenerator[bytes, None]:
        try:
            async for batch in self._with_heartbeats():
                if batch is None:
                    yield KEEP_ALIVE
                    continue
                chunk, ended = _encode(batch)
                yield chunk
                if ended:
                    return
        except Exception as exc:  # the service broke mid-stream: end the stream with `error`
            problem = (
                domain_problem(exc) if isinstance(exc, DomainError) else unexpected_problem(exc)
            )
            yield encode_event("error", problem_body(problem))
        finally:
            await self.close_events()

    async def _with_heartbeats(self) -> AsyncGenerator[Sequence[RunEvent] | None, None]:
        """The run's batches — the one ``start`` took first — and ``None`` whenever
        ``heartbeat`` seconds pass without one.

        The next batch is awaited in a task that survives the heartbeats (cancelling a wait
        for the next event would cancel the run); it is cancelled only when the relay ends.
        """
        if self._first:
            yield self._first
        pending: asyncio.Future[Sequence[RunEvent]] | None = None
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
                    batch = current.result()
                except StopAsyncIteration:
                    return
                yield batch
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

    def response(self) -> Stream:
        """``text/event-stream`` with the relay's chunks as they are (``litestar.response.
        ServerSentEvent`` would encode one message per item, and take a worker thread's turn
        before the first)."""
        return Stream(
            self.stream(),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
            background=BackgroundTask(self.close),
        )


def _encode(batch: Sequence[RunEvent]) -> tuple[bytes, bool]:
    """A batch's events up to the first terminal one (``end``, ``error``) as one chunk, and
    whether it had one."""
    parts: list[bytes] = []
    for event in batch:
        parts.append(encode_event(event.event, event.data))
        if event.event in TERMINAL_EVENTS:
            return b"".join(parts), True
    return b"".join(parts), False
