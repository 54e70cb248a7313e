"""``FakeProvider``: an OpenAI-compatible chat-completions server on loopback, for the tests.

Integration and end-to-end tests point the real client at it instead of a paid model —
``ChatOpenAI(base_url=provider.url)`` in process, or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
for a separate server process. It is real HTTP (a plain ASGI app under uvicorn, in a
background thread), not a mock: the openai SDK parses every byte, so what passes here passes
against the wire format of ``POST /v1/chat/completions`` — JSON bodies, server-sent events
with ``delta.role`` / ``delta.content`` / ``tool_calls`` deltas, the ``usage`` chunk sent only
for ``stream_options.include_usage``, and ``data: [DONE]``.

Answers are deterministic: :func:`default_answer` echoes the question and cites the
``<doc chunk_id="..">`` blocks of the system message as ``[chunk_id]`` (so threadkeeper's
citation parsing runs), an ``answer(body)`` callable replaces it, and scripted replies (text or
:class:`ToolCall`) come first. Fault modes (``hang``, ``hang_after``, ``error_500``, ``cut``,
``slow``) apply until changed or to the next N requests only, so timeouts, retries and broken
streams can be exercised; every request body and the mode that served it are recorded.
``first_byte_delay`` holds back the first byte of every response (a model's time to first
token, for latency benchmarks).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, get_args

import uvicorn

Mode = Literal["ok", "hang", "hang_after", "error_500", "cut", "slow"]
"""How the provider serves a request.

* ``ok``: the answer, at once.
* ``hang``: the request is read and nothing is ever sent (not even the status line) until the
  client goes away, or :meth:`FakeProvider.release` / ``reset`` / ``stop`` — then a 503.
* ``hang_after``: ``after_chunks`` stream chunks (or half of a JSON body), then silence with
  the connection kept open, until the client goes away or the provider releases it.
* ``error_500``: HTTP 500 with an OpenAI-style ``{"error": {...}}`` body.
* ``cut``: ``after_chunks`` stream chunks (or half of a JSON body), then the connection is
  closed without the rest — no ``[DONE]``, no terminating chunk.
* ``slow``: the answer, with ``delay`` seconds before every chunk (JSON: before the body, as
  long as the stream would have taken).
"""
MODES: tuple[Mode, ...] = get_args(Mode)

JsonObject = dict[str, Any]
Answer = Callable[[JsonObject], str]
"""Computes the text answer from the request body (the parsed JSON)."""
ModeFor = Callable[[JsonObject], Mode | None]
"""Picks the mode of one request from its body; ``None``: the queued or standing mode."""

_AsgiMessage = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_AsgiMessage]]
_Send = Callable[[_AsgiMessage], Awaitable[None]]

FINGERPRINT = "fp_threadkeeper_fake"
_WORD = re.compile(r"\w+")
_PIECE = re.compile(r"\s*\S+")
_JSON_PIECE = re.compile(r"\s*(?:\w+|[^\w\s]+)")
_COUNTED = re.compile(r"\w+|[^\w\s]")
_DOC_CHUNK = re.compile(r'<doc\b[^>]*?\bchunk_id="([^"]*)"')


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A scripted reply that calls the function ``name`` with ``arguments``.

    ``arguments`` is a JSON object (serialised compactly, as OpenAI does) or raw JSON text;
    ``id`` defaults to a fresh ``call_…`` id per response.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"), ensure_ascii=False)


Reply = str | ToolCall | Sequence[ToolCall]
"""A scripted reply: a text answer, one tool call, or several parallel tool calls."""


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a chat message: ``content`` as a string or its ``text`` parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the newest ``user`` message of a request ("" if there is none)."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message)
    return ""


def cited_chunk_ids(body: Mapping[str, Any]) -> list[str]:
    """The ``chunk_id`` of each ``<doc>`` block in the system messages, in order, once each."""
    ids: list[str] = []
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") in {"system", "developer"}:
            ids.extend(html.unescape(found) for found in _DOC_CHUNK.findall(message_text(message)))
    return list(dict.fromkeys(ids))


def default_answer(body: Mapping[str, Any]) -> str:
    """``Answer: <first words of the question>.``, then what the tools returned (when the
    newest messages are tool results), then a ``[chunk_id]`` marker per retrieved document."""
    words = _WORD.findall(last_user_text(body))[:8]
    text = "Answer: " + (" ".join(words) if words else "nothing was asked") + "."
    results: list[str] = []
    for message in reversed(body.get("messages") or []):
        if not (isinstance(message, dict) and message.get("role") == "tool"):
            break
        results.insert(0, " ".join(message_text(message).split()[:20]))
    if results:
        text += " Tool result: " + "; ".join(results) + "."
    if cited := cited_chunk_ids(body):
        text += " " + " ".join(f"[{chunk_id}]" for chunk_id in cited)
    return text


def split_tokens(text: str) -> list[str]:
    """The stream pieces of ``text``: one per word with its leading whitespace, joining back
    to exactly ``text``."""
    return _pieces(_PIECE, text)


def _pieces(pattern: re.Pattern[str], text: str) -> list[str]:
    """``pattern``'s matches (contiguous: each starts with optional whitespace), and the
    trailing whitespace they leave, so the pieces join back to ``text``."""
    pieces: list[str] = pattern.findall(text)
    rest = text[sum(map(len, pieces)) :]
    return [*pieces, rest] if rest else pieces


def count_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: words and punctuation marks."""
    return len(_COUNTED.findall(text))


def _offered_tools(body: Mapping[str, Any]) -> set[str]:
    tools = body.get("tools") or []
    return {
        str(tool["function"].get("name"))
        for tool in tools
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> JsonObject:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _error(message: str, kind: str, code: str | None = None) -> JsonObject:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _frame(payload: JsonObject | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


@dataclass(slots=True)
class _Completion:
    """One response to one request, rendered as a JSON body or as SSE frames."""

    body: JsonObject
    reply: str | list[ToolCall]
    reports_usage: bool = True
    """``False``: a provider that never reports token usage (some OpenAI-compatible servers)."""
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:29]}")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if isinstance(self.reply, list):
            self.reply = [
                call
                if call.id
                else ToolCall(call.name, call.arguments, f"call_{uuid.uuid4().hex[:24]}")
                for call in self.reply
            ]

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "fake-model")

    def _text(self) -> tuple[list[str], str]:
        """The pieces of a text answer and its finish reason (``length`` when
        ``max_completion_tokens`` / ``max_tokens`` cut it short)."""
        assert isinstance(self.reply, str)
        pieces = split_tokens(self.reply)
        limit = self.body.get("max_completion_tokens") or self.body.get("max_tokens")
        if isinstance(limit, int) and 0 < limit < len(pieces):
            return pieces[:limit], "length"
        return pieces, "stop"

    def _calls(self) -> list[ToolCall]:
        assert isinstance(self.reply, list)
        return self.reply

    def usage(self) -> JsonObject:
        prompt = sum(
            count_tokens(message_text(m)) for m in self.body["messages"] if isinstance(m, dict)
        )
        if isinstance(self.reply, str):
            completion = len(self._text()[0])
        else:
            completion = sum(count_tokens(c.name + c.arguments_json) for c in self._calls())
        return _usage(prompt, completion)

    def _head(self, kind: str) -> JsonObject:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "service_tier": "default",
            "system_fingerprint": FINGERPRINT,
        }

    def json_body(self) -> bytes:
        message: JsonObject = {"role": "assistant", "refusal": None, "annotations": []}
        if isinstance(self.reply, str):
            pieces, finish_reason = self._text()
            message["content"] = "".join(pieces)
        else:
            finish_reason = "tool_calls"
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for call in self._calls()
            ]
        payload = self._head("chat.completion") | {
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
        }
        if self.reports_usage:
            payload["usage"] = self.usage()
        return json.dumps(payload, ensure_ascii=False).encode()

    def frames(self) -> list[bytes]:
        """Every SSE frame of the stream, the ``[DONE]`` sentinel last."""
        options = self.body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        include_usage = include_usage and self.reports_usage

        def chunk(delta: JsonObject, finish_reason: str | None = None) -> bytes:
            payload = self._head("chat.completion.chunk") | {
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ]
            }
            if include_usage:
                payload["usage"] = None
            return _frame(payload)

        frames: list[bytes] = []
        if isinstance(self.reply, str):
            pieces, finish_reason = self._text()
            frames.append(chunk({"role": "assistant", "content": "", "refusal": None}))
            frames.extend(chunk({"content": piece}) for piece in pieces)
        else:
            finish_reason = "tool_calls"
            for index, call in enumerate(self._calls()):
                opening = {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
                delta: JsonObject = {"tool_calls": [opening]}
                if index == 0:
                    delta = {"role": "assistant", "content": None, **delta, "refusal": None}
                frames.append(chunk(delta))
                frames.extend(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                    for piece in _pieces(_JSON_PIECE, call.arguments_json)
                )
        frames.append(chunk({}, finish_reason))
        if include_usage:
            usage = {"choices": [], "usage": self.usage()}
            frames.append(_frame(self._head("chat.completion.chunk") | usage))
        frames.append(_frame("[DONE]"))
        return frames


class FakeProvider:
    """The fake provider; :meth:`start` it (or use it / :func:`fake_provider` as a context
    manager), point a client at :attr:`url`, and read :attr:`requests` afterwards.

    ``answer`` computes text answers (default :func:`default_answer`); ``tool_call`` /
    ``script`` are replies served first, one per request (a :class:`ToolCall` only to a request
    that offers that function among its ``tools``, so a stray summariser call does not eat it).
    ``mode`` is the standing fault mode; ``after_chunks`` is how many stream chunks ``cut`` and
    ``hang_after`` send (never the ``[DONE]``), ``delay`` the seconds per chunk of ``slow``, and
    ``retry_after_ms`` a ``retry-after-ms`` header on 500s (the openai client honours it, so a
    retry test need not sleep its 0.5–8 s backoff). ``first_byte_delay``: seconds before the
    first byte of every response to a chat-completions request, whatever it is (chat,
    memory extraction, summary; streamed or JSON; in every mode), as a provider's time to first
    token — on top of ``slow``'s per-chunk delay. All of these may be changed while running.

    ``mode_for`` (set it on the instance; kept by ``reset``) picks the mode of each request by
    its body, ahead of the queued and standing modes, so one kind of request (a memory
    extraction, a summary) can fail or hang while the others are answered.
    """

    mode_for: ModeFor | None = None

    def __init__(
        self,
        *,
        answer: Answer | None = None,
        tool_call: ToolCall | None = None,
        script: Sequence[Reply] = (),
        mode: Mode = "ok",
        after_chunks: int = 2,
        delay: float = 0.05,
        retry_after_ms: int | None = None,
        reports_usage: bool = True,
        first_byte_delay: float = 0.0,
    ) -> None:
        self.answer: Answer = answer or default_answer
        self.first_byte_delay = first_byte_delay
        self.reports_usage = reports_usage
        """``False``: never send ``usage``, even when the request asks for it."""
        self.after_chunks = after_chunks
        self.delay = delay
        self.retry_after_ms = retry_after_ms
        self.requests: list[JsonObject] = []
        """The JSON body of every chat-completions request, in arrival order."""
        self.headers: list[dict[str, str]] = []
        """The request headers (lower-case names), parallel to :attr:`requests`."""
        self.modes: list[Mode] = []
        """The mode that served each request, parallel to :attr:`requests`."""
        self.errors: list[str] = []
        """Failures of the ``answer`` callable (each was answered with a 500)."""
        self.port = 0
        self._condition = threading.Condition()
        self._mode: Mode = _checked(mode)
        self._pending: deque[Mode] = deque()
        self._script: deque[Reply] = deque([tool_call] if tool_call else [])
        self._script.extend(script)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self._stopping = False

    # -- configuration -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:<port>/v1`` (``OPENAI_BASE_URL``, ``base_url``)."""
        if not self.port:
            raise RuntimeError("the fake provider is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def mode(self) -> Mode:
        """The standing mode; setting it also drops modes queued by ``set_mode(times=…)``."""
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self.set_mode(mode)

    def set_mode(self, mode: Mode, *, times: int | None = None) -> None:
        """``mode`` from now on, or (``times``) for the next ``times`` requests only, after
        which the standing mode applies again — ``set_mode("error_500", times=1)`` fails once."""
        _checked(mode)
        with self._condition:
            if times is None:
                self._mode = mode
                self._pending.clear()
            else:
                self._pending.extend([mode] * times)

    def script(self, *replies: Reply) -> None:
        """Queue replies to be served before ``answer`` is asked (see the class docstring)."""
        with self._condition:
            self._script.extend(replies)

    def count(self, mode: Mode | None = None) -> int:
        """How many chat-completions requests arrived (served in ``mode``, if given)."""
        with self._condition:
            return len(self.modes) if mode is None else self.modes.count(mode)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[JsonObject]:
        """Block until ``count`` requests have arrived (``TimeoutError`` after ``timeout``);
        from async code, run it in a thread (``asyncio.to_thread``)."""
        with self._condition:
            if not self._condition.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} of {count} requests in {timeout} s")
            return list(self.requests)

    def release(self) -> None:
        """Let every request now held by ``hang`` / ``hang_after`` / ``slow`` go on."""
        self._fire(renew=True)

    def reset(self) -> None:
        """A fresh provider on the same port: mode ``ok``, nothing queued or recorded, held
        requests released (the ``answer`` callable and the knobs stay)."""
        with self._condition:
            self._mode = "ok"
            self._pending.clear()
            self._script.clear()
            self.requests.clear()
            self.headers.clear()
            self.modes.clear()
            self.errors.clear()
        self.release()

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Serve on a free loopback port, in a daemon thread; returns once it accepts."""
        if self._server is not None:
            raise RuntimeError("the fake provider is already started")
        # IPPROTO_TCP, not create_server's 0: asyncio sets TCP_NODELAY only on sockets that
        # say they are TCP, and without it every streamed response's body waited ~40 ms for
        # the client's delayed ACK (Nagle) -- a stall no real provider makes
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        config = uvicorn.Config(
            self._app,
            http="h11",
            ws="none",
            loop="asyncio",
            lifespan="off",
            interface="asgi3",
            log_config=None,  # leave the test process's logging configuration alone
            proxy_headers=False,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=self._run, args=(server, listener), name="fake-openai", daemon=True
        )
        self._stopping = False
        self._server, self._thread = server, thread
        self.port = int(listener.getsockname()[1])
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                listener.close()
                raise RuntimeError("the fake provider did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Release held requests and shut uvicorn down (quickly: nothing is left hanging)."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping = True
        self._fire(renew=False)
        server.should_exit = True
        thread.join(timeout=10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(timeout=5)
        self._server = self._thread = None
        self._loop = self._release = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, server: uvicorn.Server, listener: socket.socket) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
            await server.serve(sockets=[listener])

        try:
            asyncio.run(serve())
        finally:
            listener.close()

    def _fire(self, *, renew: bool) -> None:
        """Set the release event in the server's loop (and, ``renew``, start a new one for
        later requests); waits until done, so a request sent afterwards is not released."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def fire() -> None:
            if self._release is not None:
                self._release.set()
                if renew and not self._stopping:
                    self._release = asyncio.Event()

        if threading.current_thread() is self._thread:
            fire()
            return
        done = threading.Event()

        def fire_and_tell() -> None:
            fire()
            done.set()

        with suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fire_and_tell)
            done.wait(timeout=5)

    # -- the ASGI app --------------------------------------------------------------------

    async def _app(self, scope: _AsgiMessage, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        method, path = scope["method"], scope["path"].rstrip("/")
        if method == "POST" and path == "/v1/chat/completions":
            await self._chat_completions(scope, body, receive, send)
        elif method == "GET" and path == "/v1/models":
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "tests"}
            await _send_json(send, 200, {"object": "list", "data": [model]})
        else:
            message = f"Invalid URL ({method} {scope['path']})"
            await _send_json(send, 404, _error(message, "invalid_request_error"))

    async def _chat_completions(
        self, scope: _AsgiMessage, raw: bytes, receive: _Receive, send: _Send
    ) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            message = "We could not parse the JSON body of your request."
            await _send_json(send, 400, _error(message, "invalid_request_error"))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            message = "'messages' is a required property"
            await _send_json(send, 400, _error(message, "invalid_request_error"))
            return
        if not body.get("model"):
            message = "you must provide a model parameter"
            await _send_json(send, 400, _error(message, "invalid_request_error"))
            return

        release = self._release
        assert release is not None
        mode = self._admit(body, scope)
        await _pause(release, self.first_byte_delay)
        if mode == "hang":
            if not await _hold(receive, release):
                message = "The fake provider released this request."
                await _send_json(send, 503, _error(message, "server_error"))
            return
        if mode == "error_500":
            message = "The server had an error while processing your request. Sorry about that!"
            extra = []
            if self.retry_after_ms is not None:
                extra.append((b"retry-after-ms", str(self.retry_after_ms).encode()))
            await _send_json(send, 500, _error(message, "server_error"), extra)
            return

        complete = mode in {"ok", "slow"}
        try:
            reply = self._reply_for(body, consume=complete)
        except Exception as exc:
            self.errors.append(repr(exc))
            message = f"The fake provider's answer() raised {exc!r}"
            await _send_json(send, 500, _error(message, "server_error"))
            return
        completion = _Completion(body, reply, self.reports_usage)
        delay = self.delay if mode == "slow" else 0.0
        if body.get("stream") is True:
            await self._stream(completion.frames(), mode, delay, receive, send, release)
        else:
            delay *= len(completion.frames())  # as long as the stream would have taken
            await self._respond(completion.json_body(), mode, delay, receive, send, release)

    def _admit(self, body: JsonObject, scope: _AsgiMessage) -> Mode:
        """Record the request and take the mode that serves it."""
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
        }
        chosen = self.mode_for(body) if self.mode_for is not None else None
        with self._condition:
            if chosen is not None:
                mode = _checked(chosen)
            else:
                mode = self._pending.popleft() if self._pending else self._mode
            self.requests.append(body)
            self.headers.append(headers)
            self.modes.append(mode)
            self._condition.notify_all()
        return mode

    def _reply_for(self, body: JsonObject, *, consume: bool) -> str | list[ToolCall]:
        """The next scripted reply that fits the request (taken off the script only when the
        response is to be complete), else ``answer(body)``."""
        with self._condition:
            head = self._script[0] if self._script else None
            reply: str | list[ToolCall] | None = None
            if isinstance(head, str):
                reply = head
            elif head is not None:
                calls = [head] if isinstance(head, ToolCall) else list(head)
                if {call.name for call in calls} <= _offered_tools(body):
                    reply = calls
            if reply is not None and consume:
                self._script.popleft()
        return self.answer(body) if reply is None else reply

    async def _stream(
        self,
        frames: list[bytes],
        mode: Mode,
        delay: float,
        receive: _Receive,
        send: _Send,
        release: asyncio.Event,
    ) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-request-id", _request_id()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if mode in {"cut", "hang_after"}:
            for frame in frames[: max(0, min(self.after_chunks, len(frames) - 1))]:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            if mode == "hang_after":
                await _hold(receive, release)
            return  # uvicorn closes the connection: the chunked body never ends
        for frame in frames:
            await _pause(release, delay)
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _respond(
        self,
        body: bytes,
        mode: Mode,
        delay: float,
        receive: _Receive,
        send: _Send,
        release: asyncio.Event,
    ) -> None:
        if mode in {"cut", "hang_after"}:
            await _send_start(send, 200, len(body))
            await send(
                {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
            )
            if mode == "hang_after":
                await _hold(receive, release)
            return  # uvicorn closes the connection: the body is short of its content-length
        await _pause(release, delay)
        await _send_start(send, 200, len(body))
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _checked(mode: str) -> Mode:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    return mode


def _request_id() -> bytes:
    return f"req_{uuid.uuid4().hex}".encode()


async def _read_body(receive: _Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send_start(
    send: _Send, status: int, length: int, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(length).encode()),
        (b"x-request-id", _request_id()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _send_json(
    send: _Send, status: int, payload: JsonObject, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode()
    await _send_start(send, status, len(body), extra)
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _hold(receive: _Receive, release: asyncio.Event) -> bool:
    """Wait until the client disconnects (``True``) or the provider releases the request."""
    if release.is_set():
        return False
    gone = asyncio.ensure_future(receive())
    released = asyncio.ensure_future(release.wait())
    try:
        done, _ = await asyncio.wait({gone, released}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (gone, released):
            task.cancel()
        await asyncio.gather(gone, released, return_exceptions=True)
    return gone in done


async def _pause(release: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if the provider releases held requests meanwhile."""
    if seconds <= 0 or release.is_set():
        return
    with suppress(TimeoutError):
        await asyncio.wait_for(release.wait(), seconds)


@contextmanager
def fake_provider(**options: Any) -> Iterator[FakeProvider]:
    """A started :class:`FakeProvider` (``options`` are its keyword arguments), stopped after."""
    with FakeProvider(**options) as provider:
        yield provider


@contextmanager
def provider_in_env(monkeypatch: Any) -> Iterator[FakeProvider]:
    """A started :class:`FakeProvider` that ``openai:`` models reach: ``OPENAI_BASE_URL`` and
    ``OPENAI_API_KEY`` set through ``monkeypatch`` (pytest's) while it runs."""
    with FakeProvider() as provider:
        monkeypatch.setenv("OPENAI_BASE_URL", provider.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield provider


_CHAT_MODELS = itertools.count(1)


def fake_chat_model(streaming: bool = True) -> Any:
    """threadkeeper's model of the fake provider (``app.container.build_model``,
    ``openai:fake-model``; ``OPENAI_BASE_URL`` set to the provider's URL), with a timeout of
    its own: langchain-openai keeps one HTTP client per base URL and timeout for the process,
    and a later test's provider may get an earlier one's port — that client would belong to
    the earlier test's closed event loop."""
    from threadkeeper.app.container import build_model, unstreamed

    model = build_model("openai:fake-model", 0, timeout_seconds=30 + next(_CHAT_MODELS) / 997)
    return model if streaming else unstreamed(model)
