"""A deadline on reading a request's body (issue 29, item 2).

A client that sends fewer bytes than its ``Content-Length`` said (a crashed or malicious
client, a proxy that stalls) held its connection, and the request's task, with no answer and
no bound: uvicorn has no body timeout. Each body read here is bounded by what is left of
``seconds`` from the request's arrival; past it the request is answered 408
``request-timeout`` as problem+json with ``Connection: close`` (uvicorn then closes the
connection), whatever the route would have said about a body that never came. Once the body
is in, ``receive`` is left alone: an SSE stream waits on it for the client's disconnect.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

PROBLEM = {
    "type": "urn:threadkeeper:problem:request-timeout",
    "title": "Request Timeout",
    "status": 408,
}


class BodyDeadline:
    """ASGI middleware: the whole body within ``seconds`` of the request, or 408 and close."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a body deadline must be positive, not {seconds!r}")
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if str(scope["type"]) != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        state = {"reading": True, "timed_out": False, "started": False}

        async def bounded_receive() -> ReceiveMessage:
            if not state["reading"]:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message: Any = await receive()
            except TimeoutError:
                state["reading"], state["timed_out"] = False, True
                return {"type": "http.disconnect"}  # the route gives up on the body
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["reading"] = False
            return message  # type: ignore[no-any-return]  # as received

        async def guarded_send(message: Message) -> None:
            if state["timed_out"]:
                return  # the route's answer to a body that never came: replaced by the 408
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, bounded_receive, guarded_send)
        if state["timed_out"] and not state["started"]:
            body = msgspec.json.encode(
                {
                    **PROBLEM,
                    "detail": f"the request body did not arrive within {self.seconds:g} s "
                    "(THREADKEEPER_HTTP_BODY_TIMEOUT_SECONDS)",
                }
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 408,
                    "headers": [
                        (b"content-type", b"application/problem+json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body, "more_body": False})
