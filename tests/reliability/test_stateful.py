"""The HTTP API as a Hypothesis state machine, against the real application of each profile.

Each rule is one action of the product backend on behalf of a user: a run (JSON or SSE), a
retry of an earlier ``run_id``, the same ``run_id`` in another thread, user or tenant, the same
``run_id`` with another message, two simultaneous sends to one thread, an SSE client that goes
away after the first token, a thread deleted or a user erased while a run is in flight, deleting
a thread, resetting memory, erasing a user, and reading a transcript page by page. The machine
remembers what the clients were told (``ThreadModel``) and, after every step, reads every
thread's transcript and compares it with the acknowledged rounds (DESIGN.md, "Runs are atomic"
and "HTTP contract"):

- a transcript holds exactly the acknowledged rounds, each once, in order (the human message and
  the answer text, id and citations the client was given), and nothing of a run that was
  refused, failed, disconnected or deleted;
- a thread nobody acknowledged a round on, or that was deleted or erased, is 404;
- a ``409 thread-busy`` is only ever an answer to a send that overlapped another run;
- a retry of an acknowledged ``run_id`` gets the stored answer and adds nothing; the same
  ``run_id`` with another message is ``409 idempotency-mismatch``; the same ``run_id`` in
  another thread key (tenant + user + thread) is an independent run, never the other one's answer.

Why a real HTTP server: ``litestar.testing.AsyncTestClient`` runs each request to completion
through a blocking portal (two requests sent with ``asyncio.gather`` run one after the other)
and buffers the whole response (no client can leave mid-stream). So each machine serves its app
with uvicorn — what ``threadkeeper serve`` runs — on a socket of its own, inside the machine's
event loop, and talks to it with ``httpx``. Each machine (each Hypothesis example) has its own
app and fresh storage: a data directory (embedded), a migrated schema (postgres), or a migrated
MariaDB database and a flushed private Redis Stack (redis-mysql).

Settings: ``HYPOTHESIS_PROFILE=reliability-full`` (or ``THREADKEEPER_RELIABILITY_SIZE=full``)
runs many more, longer examples and shrinks a failure to its shortest step sequence (that takes
minutes: every example the shrinker tries is a new app on new storage); anything else selects
``reliability``: a few short examples per profile, without shrinking, so that a failure is
reported quickly. Either way the report lists the steps up to the failing one, each followed by
``# ↳`` lines saying what its requests were answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)
from litestar import Litestar

from tests.api.conftest import PROFILES, Servers, flush, headers_for, parse_sse, settings_for
from tests.support.followups import asettled_memory, kept
from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis, private_redis
from threadkeeper.app.application import create_app

# --- settings -------------------------------------------------------------------------------

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
FULL = "reliability-full"
FAST = "reliability"
_COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,  # every example is a new app and new storage: replaying saves little
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile(
    FAST,
    settings(
        max_examples=4,
        stateful_step_count=14,
        phases=[Phase.explicit, Phase.generate],
        **_COMMON,
    ),
)
settings.register_profile(
    FULL, settings(max_examples=40, stateful_step_count=30, print_blob=True, **_COMMON)
)


def machine_settings() -> settings:
    """This file's profile, chosen by ``HYPOTHESIS_PROFILE`` (or the suite's
    ``THREADKEEPER_RELIABILITY_SIZE=full``) without loading it globally."""
    full = (
        os.environ.get(PROFILE_VARIABLE) == FULL
        or os.environ.get("THREADKEEPER_RELIABILITY_SIZE") == "full"
    )
    return settings.get_profile(FULL if full else FAST)


MODEL_TOKEN_DELAY_MS = 2.0
"""Per streamed token of the builtin model: a run lasts long enough (tens of tokens) for a
second send to overlap it and for an SSE client to leave mid-answer; no assertion is timed."""
IDLE_TIMEOUT_SECONDS = 30.0
"""How long a run whose client left may take to end (a liveness bound, not a timing check)."""
PROBLEM = "urn:threadkeeper:problem:"

# --- the world: 2 tenants × 2 users × 3 threads -----------------------------------------------

TENANTS = ("acme", "globex")
USERS = ("u1", "u2")
THREADS = ("t1", "t2", "t3")


class Key(NamedTuple):
    """A thread key as the service scopes it (``THREADKEEPER_THREAD_SCOPE=user``)."""

    tenant: str
    user: str
    thread: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.user}/{self.thread}"

    @property
    def caller(self) -> Caller:
        return Caller(self.tenant, self.user)


class Caller(NamedTuple):
    tenant: str
    user: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.user}"


ALL_KEYS = tuple(Key(t, u, th) for t in TENANTS for u in USERS for th in THREADS)
ALL_CALLERS = tuple(Caller(t, u) for t in TENANTS for u in USERS)

LONG = (
    "Is dental treatment covered by my health insurance?",
    "How do I file a claim?",
)
"""Questions with long answers (about a hundred streamed tokens)."""
CONTENTS = (
    *LONG,
    "I have two kids. Does my health insurance cover dental care?",  # remembered
    "blorp zzxq?",  # a clarifying question
    "I want to talk to a human agent please",  # escalation
    "Please give me the full details of the maternity cover.",  # a tool call first
    "我的保险包括牙科治疗吗？",
)

keys = st.sampled_from(ALL_KEYS)
callers = st.sampled_from(ALL_CALLERS)
contents = st.sampled_from(CONTENTS)
long_contents = st.sampled_from(LONG)
Mode = Literal["json", "sse"]
modes: st.SearchStrategy[Mode] = st.sampled_from(["json", "sse"])

# --- what the machine remembers ---------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """A run request that was sent: retries and reuses pick one of these."""

    key: Key
    run_id: str
    content: str


@dataclass(frozen=True)
class Round:
    """An acknowledged round, as the client was given it."""

    run_id: str
    human: str
    answer_id: str
    answer: str
    citations: tuple[tuple[str, str, str], ...]


@dataclass
class ThreadModel:
    rounds: list[Round] = field(default_factory=list)
    """The acknowledged rounds still stored, oldest first: the expected transcript."""
    completed: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """run_id → (the request's content, the essentials of its stored answer)."""
    attempted: set[str] = field(default_factory=set)
    """Every run_id sent on this thread key (acknowledged or not, deleted or not)."""


@dataclass
class Answer:
    """What one run request was answered."""

    status: int
    kind: Literal["ok", "refused", "error"]
    body: dict[str, Any] | None = None
    problem: dict[str, Any] | None = None
    streamed: str | None = None
    """SSE: the ``messages`` deltas joined (``None`` for JSON)."""

    def describe(self) -> str:
        if self.kind == "ok" and self.body is not None:
            message = self.body["message"]
            return f"{self.status} {self.body['status']} answer {message['id']}"
        if self.problem is not None:
            return f"{self.status} {self.kind}: {json.dumps(self.problem, ensure_ascii=False)}"
        return f"{self.status} {self.kind}"


def essentials(body: dict[str, Any]) -> dict[str, Any]:
    """The parts of a run's answer a retry must repeat exactly (a memory reset may change
    the stored escalation profile, and usage is not part of the answer)."""
    message = body["message"]
    return {
        "run_id": body["run_id"],
        "thread_id": body["thread_id"],
        "status": body["status"],
        "message": {
            "id": message["id"],
            "content": message["content"],
            "citations": message["citations"],
        },
    }


def round_from(run_id: str, content: str, body: dict[str, Any]) -> Round:
    message = body["message"]
    return Round(
        run_id=run_id,
        human=content,
        answer_id=message["id"],
        answer=message["content"],
        citations=tuple((c["chunk_id"], c["doc_id"], c["title"]) for c in message["citations"]),
    )


def short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def show(messages: list[tuple[Any, ...]]) -> str:
    if not messages:
        return "    (nothing: 404)"
    return "\n".join(f"    {i}. {' | '.join(map(str, m))}" for i, m in enumerate(messages, 1))


def expected_messages(rounds: list[Round]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for r in rounds:
        out.append(("human", short(r.human)))
        out.append(("ai", r.answer_id, short(r.answer), r.citations))
    return out


def actual_messages(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m["role"] == "human":
            out.append(("human", short(m["content"])))
        else:
            citations = tuple((c["chunk_id"], c["doc_id"], c["title"]) for c in m["citations"])
            out.append((m["role"], m["id"], short(m["content"]), citations))
    return out


def full_expected(rounds: list[Round]) -> list[tuple[str, str | None, str]]:
    """(role, id or None for the human message, exact content) per message."""
    out: list[tuple[str, str | None, str]] = []
    for r in rounds:
        out += [("human", None, r.human), ("ai", r.answer_id, r.answer)]
    return out


def full_actual(messages: list[dict[str, Any]]) -> list[tuple[str, str | None, str]]:
    return [(m["role"], None if m["role"] == "human" else m["id"], m["content"]) for m in messages]


# --- storage and the server ---------------------------------------------------------------


@contextlib.contextmanager
def fresh_storage(
    profile: str, redis: PrivateRedis | None
) -> Iterator[tuple[Path, Servers | None]]:
    """A data directory, and the fresh schema / database (and flushed Redis) the profile needs."""
    root = Path(tempfile.mkdtemp(prefix="tk-stateful-"))
    try:
        if profile == "postgres":
            with fresh_schema() as url:
                yield root, Servers(postgres_url=url)
        elif profile == "redis-mysql":
            assert redis is not None
            flush(redis.url)
            with fresh_database() as url:
                yield root, Servers(redis_url=redis.url, mysql_url=url)
        else:
            yield root, None
    finally:
        shutil.rmtree(root, ignore_errors=True)


class InProcessServer(uvicorn.Server):
    """uvicorn inside the machine's loop; signals stay with pytest."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # accepted connections inherit it: no 40 ms Nagle / delayed-ACK stall per response
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Events of a streamed ``text/event-stream`` response, as they arrive."""
    name, data = "message", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        yield name, json.loads("\n".join(data))


# --- the machine --------------------------------------------------------------------------


class ThreadkeeperMachine(RuleBasedStateMachine):
    """One app with fresh storage per instance; see the module docstring."""

    profile: ClassVar[str] = "embedded"
    redis: ClassVar[PrivateRedis | None] = None

    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[Key, ThreadModel] = {key: ThreadModel() for key in ALL_KEYS}
        self.told: list[str] = []
        """What the current step's requests were answered (printed under the step)."""
        self.answers_of_run: dict[str, dict[str, Key]] = {}
        """run_id → {answer message id: the thread key it was given in} (every answer ever)."""
        self.stack = contextlib.ExitStack()
        self.loop = asyncio.new_event_loop()
        self.app: Litestar | None = None
        self.server: InProcessServer | None = None
        self.serving: asyncio.Task[None] | None = None
        self.client: httpx.AsyncClient | None = None
        try:
            root, servers = self.stack.enter_context(fresh_storage(self.profile, self.redis))
            self.loop.run_until_complete(self._start(root, servers))
        except BaseException:
            self._close()
            raise

    # -- plumbing ---------------------------------------------------------------------------

    async def _start(self, root: Path, servers: Servers | None) -> None:
        self.app = create_app(
            settings_for(self.profile, root, servers, model_token_delay_ms=MODEL_TOKEN_DELAY_MS)
        )
        sock = listening_socket()
        self.stack.callback(sock.close)
        config = uvicorn.Config(
            self.app, lifespan="on", log_level="warning", timeout_graceful_shutdown=10
        )
        self.server = InProcessServer(config)
        self.serving = asyncio.create_task(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self.serving.done():
                self.serving.result()  # an exception from the server
                raise RuntimeError(f"the {self.profile} app did not start (see the log)")
            await asyncio.sleep(0.01)
        port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.client = httpx.AsyncClient(base_url=self.base_url, timeout=60)

    async def _stop(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        if self.server is not None and self.serving is not None:
            self.server.should_exit = True
            with contextlib.suppress(Exception):
                await self.serving

    def _close(self) -> None:
        try:
            if not self.loop.is_closed():
                with contextlib.suppress(Exception):
                    self.loop.run_until_complete(self._stop())
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
                self.loop.close()
        finally:
            self.stack.close()

    def teardown(self) -> None:
        self._close()

    def go(self, coroutine: Any) -> Any:
        try:
            return self.loop.run_until_complete(coroutine)
        except BaseException:
            self.flush_told()  # the failing step: its answers above it
            raise

    def tell(self, text: str) -> None:
        self.told.append(text)

    def flush_told(self) -> None:
        for text in self.told:
            note(f"    # ↳ {text}")
        self.told.clear()

    @property
    def http(self) -> httpx.AsyncClient:
        assert self.client is not None
        return self.client

    def headers(self, caller: Caller | Key) -> dict[str, str]:
        headers = headers_for(self.profile)
        headers["X-Tenant-Id"] = caller.tenant
        headers["X-User-Id"] = caller.user
        return headers

    async def wait_runs_idle(self, why: str) -> None:
        """Until every run in flight in the service has ended (the one whose client left).

        Uses the service's own ``wait_idle`` (what shutdown waits for); if that is not
        reachable, the thread's lock must be free within one second (DESIGN.md)."""
        assert self.app is not None
        try:
            service = self.app.state.container.service()
            if inspect.isawaitable(service):
                service = await service
            wait_idle = service.wait_idle
        except Exception:  # pragma: no cover - the app's wiring changed
            await asyncio.sleep(1.0)
            return
        try:
            await asyncio.wait_for(wait_idle(), IDLE_TIMEOUT_SECONDS)
        except TimeoutError:
            raise AssertionError(
                f"{why}: a run was still in flight {IDLE_TIMEOUT_SECONDS:.0f} s after its "
                "client left (a run whose client is gone must be cancelled)"
            ) from None

    def record_answer_id(self, run_id: str, answer_id: str, key: Key) -> None:
        self.answers_of_run.setdefault(run_id, {})[answer_id] = key

    # -- requests ---------------------------------------------------------------------------

    def run_body(self, content: str, run_id: str) -> dict[str, Any]:
        return {"message": {"content": content}, "run_id": run_id}

    async def send(self, key: Key, content: str, run_id: str, mode: Mode) -> Answer:
        """One run request, read to its end."""
        accept = "application/json" if mode == "json" else "text/event-stream"
        response = await self.http.post(
            f"/v1/threads/{key.thread}/runs",
            json=self.run_body(content, run_id),
            headers={**self.headers(key), "Accept": accept},
        )
        return self.answer_of(response, key, run_id, mode)

    def answer_of(self, response: httpx.Response, key: Key, run_id: str, mode: Mode) -> Answer:
        status = response.status_code
        ctype = response.headers.get("content-type", "")
        if status != 200:
            problem = response.json() if "json" in ctype else {"text": response.text[:300]}
            kind: Literal["refused", "error"] = "error" if status >= 500 else "refused"
            if status == 503:
                kind = "refused"
            return Answer(status, kind, problem=problem)
        if mode == "json":
            assert ctype.startswith("application/json"), f"JSON run answered {ctype!r}"
            return self.checked(Answer(200, "ok", body=response.json()), key, run_id)
        assert ctype.startswith("text/event-stream"), f"SSE run answered {ctype!r}"
        return self.from_events([(e.event, e.data) for e in parse_sse(response.text)], key, run_id)

    def from_events(
        self, events: list[tuple[str, dict[str, Any]]], key: Key, run_id: str
    ) -> Answer:
        kinds = [name for name, _ in events]
        assert kinds, f"run {run_id} on {key}: an empty event stream"
        assert kinds[0] == "metadata", f"run {run_id} on {key}: events {kinds}"
        assert events[0][1] == {"run_id": run_id, "thread_id": key.thread}, (
            f"run {run_id} on {key}: metadata {events[0][1]}"
        )
        streamed = "".join(d["delta"] for name, d in events if name == "messages")
        last, data = events[-1]
        if last == "end":
            assert set(kinds[1:-1]) <= {"messages", "custom"}, f"run {run_id}: events {kinds}"
            return self.checked(Answer(200, "ok", body=data, streamed=streamed), key, run_id)
        if last == "error":
            return Answer(200, "error", problem=data, streamed=streamed)
        return Answer(200, "error", problem={"detail": f"stream ended after {kinds}"})

    def checked(self, answer: Answer, key: Key, run_id: str) -> Answer:
        body = answer.body
        assert body is not None
        assert body["run_id"] == run_id, f"asked run {run_id} on {key}, answered {body['run_id']}"
        assert body["thread_id"] == key.thread, (
            f"run {run_id} on {key} answered thread_id {body['thread_id']!r}"
        )
        message = body["message"]
        assert message["role"] == "ai", f"run {run_id} on {key}: not an answer: {message}"
        assert message["content"].strip(), f"run {run_id} on {key}: an empty answer: {message}"
        if answer.streamed:  # a live run streams its answer; a stored one only sends `end`
            assert answer.streamed == message["content"], (
                f"run {run_id} on {key}: the streamed deltas differ from the `end` answer"
            )
        return answer

    async def transcript(self, key: Key, limit: int = 100) -> list[dict[str, Any]] | None:
        """Every message of the thread, oldest first, following ``next_before``; None: 404."""
        pages: list[list[dict[str, Any]]] = []
        before: str | None = None
        seen: set[str | None] = set()
        while True:
            params: dict[str, Any] = {"limit": limit}
            if before is not None:
                params["before"] = before
            response = await self.http.get(
                f"/v1/threads/{key.thread}/messages", params=params, headers=self.headers(key)
            )
            if response.status_code == 404 and before is None:
                problem = response.json()
                assert problem.get("type") == f"{PROBLEM}unknown-thread", (
                    f"GET messages of {key}: 404 {problem}"
                )
                return None
            assert response.status_code == 200, (
                f"GET messages of {key} (before={before}): {response.status_code} {response.text}"
            )
            page = response.json()
            assert 1 <= len(page["messages"]) <= limit, (
                f"GET messages of {key} (limit={limit}, before={before}): "
                f"{len(page['messages'])} messages"
            )
            pages.append(page["messages"])
            before = page["next_before"]
            if before is None:
                break
            assert before not in seen, f"GET messages of {key}: next_before {before} repeats"
            seen.add(before)
        return [m for page in reversed(pages) for m in page]

    # -- the model checks -------------------------------------------------------------------

    async def check_thread(self, key: Key, *, limit: int = 100, why: str = "") -> None:
        expected = self.threads[key].rounds
        messages = await self.transcript(key, limit)
        actual = messages or []
        context = f" ({why})" if why else ""
        problem = None
        if full_actual(actual) != full_expected(expected):
            problem = "the transcript is not exactly the acknowledged rounds"
        elif [
            tuple((c["chunk_id"], c["doc_id"], c["title"]) for c in m["citations"])
            for m in actual
            if m["role"] == "ai"
        ] != [r.citations for r in expected]:
            problem = "the citations differ from those the client was given"
        elif len({m["id"] for m in actual}) != len(actual):
            problem = "a message id appears twice"
        if problem is not None:
            served = {m["id"] for m in actual}
            missing = [
                f"{r.run_id[:8]} ({r.answer_id})" for r in expected if r.answer_id not in served
            ]
            known = {r.answer_id for r in expected}
            extra = [m["id"] for m in actual if m["role"] == "ai" and m["id"] not in known]
            detail = "".join(
                [
                    f"\n  acknowledged but missing: runs {', '.join(missing)}" if missing else "",
                    f"\n  stored but never acknowledged: answers {', '.join(extra)}"
                    if extra
                    else "",
                ]
            )
            raise AssertionError(
                f"thread {key}{context}: {problem}{detail}\n"
                f"  expected (acknowledged, in order):\n{show(expected_messages(expected))}\n"
                f"  served by GET /messages:\n{show(actual_messages(actual))}"
            )

    async def memory(self, caller: Caller) -> dict[str, Any]:
        """The caller's memory once the follow-up work of every acknowledged round is done
        (a run is acknowledged before the memory it teaches is written): what is kept, without
        ``pending``, which must then be false."""
        await self.wait_runs_idle(f"reading the memory of {caller}")
        body = await asettled_memory(self.http, caller.user, self.headers(caller))
        return kept(body)

    def expect_ok(
        self, answer: Answer, key: Key, run_id: str, what: str, *, alone: bool = True
    ) -> dict[str, Any]:
        """The answer's body; fails unless the run was acknowledged."""
        if answer.kind == "ok" and answer.body is not None:
            return answer.body
        busy = answer.problem is not None and answer.problem.get("type") == f"{PROBLEM}thread-busy"
        if busy and alone:
            reason = "409 thread-busy, with no other run in flight on the thread"
        else:
            reason = "not acknowledged"
        raise AssertionError(f"{what}: run {run_id} on {key}: {reason}: {answer.describe()}")

    def expect_new_answer(self, body: dict[str, Any], key: Key, run_id: str, what: str) -> None:
        """A run that must really run: its answer is new, not one given earlier for this
        run_id (in this or another thread key)."""
        earlier = self.answers_of_run.get(run_id, {})
        answer_id = body["message"]["id"]
        if answer_id in earlier:
            where = earlier[answer_id]
            scope = "the same thread, before it was deleted" if where == key else f"{where}"
            raise AssertionError(
                f"{what}: run {run_id} on {key} was answered with the answer {answer_id} "
                f"given earlier for that run_id in {scope} — no new run, nothing stored here"
            )

    def store_round(self, key: Key, run_id: str, content: str, body: dict[str, Any]) -> None:
        model = self.threads[key]
        model.rounds.append(round_from(run_id, content, body))
        model.completed[run_id] = (content, essentials(body))
        self.record_answer_id(run_id, body["message"]["id"], key)

    async def new_run(self, key: Key, content: str, run_id: str, mode: Mode, what: str) -> Answer:
        """A run that must be acknowledged and stored as a new round."""
        self.threads[key].attempted.add(run_id)
        answer = await self.send(key, content, run_id, mode)
        self.tell(f"{what}: {run_id[:8]} on {key} [{mode}] → {answer.describe()}")
        body = self.expect_ok(answer, key, run_id, what)
        self.expect_new_answer(body, key, run_id, what)
        self.store_round(key, run_id, content, body)
        return answer

    # -- rules: runs ----------------------------------------------------------------------

    @rule(target=attempts, key=keys, mode=modes, content=contents)
    def run(self, key: Key, mode: Mode, content: str) -> Attempt:
        """A new message with a fresh run_id."""
        run_id = str(uuid.uuid4())
        self.go(self.new_run(key, content, run_id, mode, "run"))
        return Attempt(key, run_id, content)

    @rule(attempt=attempts, mode=modes)
    def retry(self, attempt: Attempt, mode: Mode) -> None:
        """The identical request again (same thread key, run_id and message)."""
        self.go(self._retry(attempt, mode))

    async def _retry(self, attempt: Attempt, mode: Mode) -> None:
        key, run_id = attempt.key, attempt.run_id
        stored = self.threads[key].completed.get(run_id)
        if stored is None:  # never acknowledged, or its thread was deleted since: runs anew
            await self.new_run(key, attempt.content, run_id, mode, "retry of an unstored run")
            return
        answer = await self.send(key, stored[0], run_id, mode)  # the request it stored
        self.tell(f"retry {run_id[:8]} on {key} [{mode}] → {answer.describe()}")
        what = "retry of an acknowledged run"
        body = self.expect_ok(answer, key, run_id, what)
        if essentials(body) != stored[1]:
            raise AssertionError(
                f"{what}: run {run_id} on {key} must get its stored answer\n"
                f"  stored: {json.dumps(stored[1], ensure_ascii=False)[:400]}\n"
                f"  got:    {json.dumps(essentials(body), ensure_ascii=False)[:400]}"
            )

    @rule(
        target=attempts,
        attempt=attempts,
        where=st.sampled_from(["thread", "user", "tenant"]),
        same_content=st.booleans(),
        mode=modes,
    )
    def reuse_run_id_elsewhere(
        self, attempt: Attempt, where: str, same_content: bool, mode: Mode
    ) -> Any:
        """The same run_id in another thread (same user), or under the other user or tenant
        (same thread id): an independent run, stored there like any other."""
        target = self.elsewhere(attempt, where)
        if target is None:
            self.tell(
                f"(run_id {attempt.run_id[:8]} was already sent everywhere near {attempt.key})"
            )
            return multiple()
        content = attempt.content if same_content else self.other_content(attempt.content)
        self.go(
            self.new_run(target, content, attempt.run_id, mode, f"run_id of {attempt.key} reused")
        )
        return Attempt(target, attempt.run_id, content)

    def elsewhere(self, attempt: Attempt, where: str) -> Key | None:
        key = attempt.key
        if where == "thread":
            i = THREADS.index(key.thread)
            options = [key._replace(thread=THREADS[(i + n) % len(THREADS)]) for n in (1, 2)]
        elif where == "user":
            options = [key._replace(user=u) for u in USERS if u != key.user]
        else:
            options = [key._replace(tenant=t) for t in TENANTS if t != key.tenant]
        fresh = [k for k in options if attempt.run_id not in self.threads[k].attempted]
        return fresh[0] if fresh else None

    @staticmethod
    def other_content(content: str) -> str:
        return CONTENTS[(CONTENTS.index(content) + 1) % len(CONTENTS)]

    @rule(attempt=attempts, mode=modes)
    def same_run_id_other_message(self, attempt: Attempt, mode: Mode) -> None:
        """The run_id of an earlier request on the same thread key with another message:
        409 idempotency-mismatch if that run_id is stored there; otherwise a normal run."""
        self.go(self._mismatch(attempt, mode))

    async def _mismatch(self, attempt: Attempt, mode: Mode) -> None:
        key, run_id = attempt.key, attempt.run_id
        stored = self.threads[key].completed.get(run_id)
        content = self.other_content(attempt.content if stored is None else stored[0])
        if stored is None:
            await self.new_run(key, content, run_id, mode, "unstored run_id, another message")
            return
        answer = await self.send(key, content, run_id, mode)
        self.tell(f"{run_id[:8]} on {key} with another message [{mode}] → {answer.describe()}")
        problem = answer.problem or {}
        if answer.status == 409 and problem.get("type") == f"{PROBLEM}idempotency-mismatch":
            return
        told = answer.describe()
        if answer.kind == "ok" and answer.body is not None:
            if essentials(answer.body) == stored[1]:
                told = "200 with the stored answer to the other message"
            else:
                told = f"200 with a new answer {answer.body['message']['id']} (a second round)"
                self.store_round(key, run_id, content, answer.body)  # for the invariant's report
        raise AssertionError(
            f"run_id {run_id} completed on {key} for {stored[0]!r}, sent again with "
            f"{content!r}: expected 409 {PROBLEM}idempotency-mismatch, got {told}"
        )

    @rule(target=attempts, key=keys, first=modes, second=modes, content=contents)
    def double_send(self, key: Key, first: Mode, second: Mode, content: str) -> Any:
        """Two sends to one thread at once (a double click): one answer and one 409
        thread-busy naming it — or two answers if they did not overlap."""
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        second_content = self.other_content(content)
        self.go(self._double_send(key, (a, content, first), (b, second_content, second)))
        return multiple(Attempt(key, a, content), Attempt(key, b, second_content))

    async def _double_send(
        self, key: Key, one: tuple[str, str, Mode], two: tuple[str, str, Mode]
    ) -> None:
        model = self.threads[key]
        model.attempted |= {one[0], two[0]}
        answers = await asyncio.gather(
            self.send(key, one[1], one[0], one[2]), self.send(key, two[1], two[0], two[2])
        )
        sends = list(zip((one, two), answers, strict=True))
        for (run_id, _, mode), answer in sends:
            self.tell(f"double send {run_id[:8]} on {key} [{mode}] → {answer.describe()}")
        acked = [(s, a) for s, a in sends if a.kind == "ok"]
        refused = [(s, a) for s, a in sends if a.kind != "ok"]
        if not acked:
            raise AssertionError(
                f"double send on {key}: neither send was acknowledged: "
                + "; ".join(a.describe() for _, a in sends)
            )
        for (run_id, _, _), answer in refused:
            problem = answer.problem or {}
            others = [s[0] for s, _ in acked]
            if (answer.status, problem.get("type")) != (409, f"{PROBLEM}thread-busy"):
                raise AssertionError(
                    f"double send on {key}: run {run_id} was answered {answer.describe()} "
                    "(only 409 thread-busy may refuse a send that overlaps another)"
                )
            # named, or (no name) the other run was letting go of the thread at that moment
            assert problem.get("running_run_id") in [*others, None], (
                f"double send on {key}: run {run_id} was refused as busy with "
                f"{problem.get('running_run_id')}, but the run acknowledged is {others}"
            )
        for (run_id, _, _), answer in acked:
            assert answer.body is not None
            self.expect_new_answer(answer.body, key, run_id, "double send")
        if len(acked) == 1:
            (run_id, content, _), answer = acked[0]
            assert answer.body is not None
            self.store_round(key, run_id, content, answer.body)
            return
        # both answered: they ran one after the other; the transcript says in which order
        ids = [m["id"] for m in await self.transcript(key) or []]

        def position(sent: tuple[tuple[str, str, Mode], Answer]) -> int:
            answer_id = (sent[1].body or {})["message"]["id"]
            return ids.index(answer_id) if answer_id in ids else len(ids)

        for (run_id, content, _), answer in sorted(acked, key=position):
            assert answer.body is not None
            self.store_round(key, run_id, content, answer.body)

    @rule(target=attempts, key=keys, content=long_contents)
    def client_leaves_after_first_token(self, key: Key, content: str) -> Attempt:
        """An SSE run whose client disconnects after the first ``messages`` event: nothing of
        the round may be stored, and the thread is free again."""
        run_id = str(uuid.uuid4())
        self.go(self._leave(key, content, run_id))
        return Attempt(key, run_id, content)

    async def _leave(self, key: Key, content: str, run_id: str) -> None:
        self.threads[key].attempted.add(run_id)
        events: list[tuple[str, dict[str, Any]]] = []
        async with (
            httpx.AsyncClient(base_url=self.base_url, timeout=60) as one_off,
            one_off.stream(
                "POST",
                f"/v1/threads/{key.thread}/runs",
                json=self.run_body(content, run_id),
                headers={**self.headers(key), "Accept": "text/event-stream"},
            ) as response,
        ):
            if response.status_code != 200:
                await response.aread()
                answer = self.answer_of(response, key, run_id, "sse")
                self.expect_ok(answer, key, run_id, "SSE run (client leaving mid-answer)")
            async for name, data in sse_events(response):
                events.append((name, data))
                if name in ("messages", "end", "error"):
                    break
        # the connection is closed here, mid-answer
        kinds = [name for name, _ in events]
        self.tell(f"SSE {run_id[:8]} on {key}: client left after {kinds}")
        if kinds and kinds[-1] == "end":  # answered before any token: an acknowledged round
            answer = self.from_events(events, key, run_id)
            assert answer.body is not None
            self.store_round(key, run_id, content, answer.body)
        await self.wait_runs_idle(f"SSE run {run_id} on {key}")

    # -- rules: deletions -----------------------------------------------------------------

    def forget_thread(self, key: Key) -> None:
        model = self.threads[key]
        model.rounds.clear()
        model.completed.clear()

    @rule(key=keys)
    def delete_thread(self, key: Key) -> None:
        response = self.go(self.http.delete(f"/v1/threads/{key.thread}", headers=self.headers(key)))
        self.tell(f"DELETE thread {key} → {response.status_code}")
        assert response.status_code == 204, f"DELETE thread {key}: {response.text}"
        self.forget_thread(key)

    def others(self, caller: Caller) -> list[Caller]:
        return [c for c in ALL_CALLERS if c != caller]

    @rule(caller=callers)
    def reset_memory(self, caller: Caller) -> None:
        self.go(self._reset_memory(caller))

    async def _reset_memory(self, caller: Caller) -> None:
        before = {c: await self.memory(c) for c in self.others(caller)}
        response = await self.http.delete(
            f"/v1/users/{caller.user}/memory", headers=self.headers(caller)
        )
        self.tell(f"DELETE memory of {caller} → {response.status_code} {response.text}")
        assert response.status_code == 200, f"DELETE memory of {caller}: {response.text}"
        count = response.json()["memory_items"]
        assert isinstance(count, int), f"DELETE memory of {caller}: {response.text}"
        assert count >= 0, f"DELETE memory of {caller}: {response.text}"
        left = await self.memory(caller)
        assert left == {"profile": [], "facts": []}, f"memory of {caller} after reset: {left}"
        for other, memory in before.items():
            assert await self.memory(other) == memory, (
                f"resetting the memory of {caller} changed the memory of {other}"
            )

    @rule(caller=callers)
    def erase_user(self, caller: Caller) -> None:
        self.go(self._erase(caller))

    async def _erase(self, caller: Caller) -> None:
        before = {c: await self.memory(c) for c in self.others(caller)}
        mine = [k for k in ALL_KEYS if k.caller == caller]
        stored = [k for k in mine if self.threads[k].rounds]
        messages = 2 * sum(len(self.threads[k].rounds) for k in mine)
        response = await self.http.delete(f"/v1/users/{caller.user}", headers=self.headers(caller))
        self.tell(f"DELETE user {caller} → {response.status_code} {response.text}")
        assert response.status_code == 200, f"DELETE user {caller}: {response.text}"
        for key in mine:
            self.forget_thread(key)
        receipt = response.json()
        assert (receipt["threads"], receipt["messages"], receipt["feedback"]) == (
            len(stored),
            messages,
            0,
        ), (
            f"erasure receipt of {caller}: {receipt}, but {len(stored)} thread(s) with "
            f"{messages} messages were stored ({', '.join(map(str, stored)) or 'none'})"
        )
        left = await self.memory(caller)
        assert left == {"profile": [], "facts": []}, f"memory of {caller} after erasure: {left}"
        for other, memory in before.items():
            assert await self.memory(other) == memory, (
                f"erasing {caller} changed the memory of {other}"
            )

    @rule(target=attempts, key=keys, content=long_contents)
    def delete_thread_mid_run(self, key: Key, content: str) -> Attempt:
        """``DELETE /v1/threads/{id}`` sent while a run streams on it: the deletion waits for
        the run, which is acknowledged, and then deletes the thread with that round."""
        run_id = str(uuid.uuid4())
        self.go(self._mid_run(key, content, run_id, "thread"))
        return Attempt(key, run_id, content)

    @rule(target=attempts, key=keys, content=long_contents)
    def erase_user_mid_run(self, key: Key, content: str) -> Attempt:
        """``DELETE /v1/users/{id}`` sent while a run streams on one of the user's threads:
        afterwards nothing of the user is left in the tenant — that round and what it
        remembered included. The run is either acknowledged (the erasure waited for it, as
        docs/api.md says) or ends ``claim-lost`` (the erasure revoked it); nothing else."""
        run_id = str(uuid.uuid4())
        self.go(self._mid_run(key, content, run_id, "user"))
        return Attempt(key, run_id, content)

    async def _mid_run(self, key: Key, content: str, run_id: str, deletion: str) -> None:
        self.threads[key].attempted.add(run_id)
        path = f"/v1/threads/{key.thread}" if deletion == "thread" else f"/v1/users/{key.user}"
        what = f"DELETE {'thread' if deletion == 'thread' else 'user'} sent mid-run"
        before = {c: await self.memory(c) for c in self.others(key.caller)}
        deleting: asyncio.Task[httpx.Response] | None = None
        events: list[tuple[str, dict[str, Any]]] = []
        async with self.http.stream(
            "POST",
            f"/v1/threads/{key.thread}/runs",
            json=self.run_body(content, run_id),
            headers={**self.headers(key), "Accept": "text/event-stream"},
        ) as response:
            if response.status_code != 200:
                await response.aread()
                answer = self.answer_of(response, key, run_id, "sse")
                self.expect_ok(answer, key, run_id, f"SSE run before the {what}")
            async for name, data in sse_events(response):
                events.append((name, data))
                if name == "messages" and deleting is None:
                    deleting = asyncio.create_task(
                        self.http.delete(path, headers=self.headers(key))
                    )
        mid_run = deleting is not None
        if deleting is None:  # no token streamed: the deletion comes after the run
            deleting = asyncio.create_task(self.http.delete(path, headers=self.headers(key)))
        deleted = await deleting
        answer = self.from_events(events, key, run_id)
        self.tell(
            f"{run_id[:8]} on {key} [sse] → {answer.describe()}; DELETE {path} "
            f"{'mid-run' if mid_run else 'after it'} → {deleted.status_code}"
        )
        problem = answer.problem or {}
        if deletion == "user" and problem.get("type") == f"{PROBLEM}claim-lost":
            pass  # the erasure revoked the run's claim: not acknowledged, nothing stored
        else:
            body = self.expect_ok(answer, key, run_id, what, alone=False)
            self.expect_new_answer(body, key, run_id, what)
            self.record_answer_id(run_id, body["message"]["id"], key)
        expected_status = 204 if deletion == "thread" else 200
        assert deleted.status_code == expected_status, f"{what} on {key}: {deleted.text}"
        gone = [key] if deletion == "thread" else [k for k in ALL_KEYS if k.caller == key.caller]
        for k in gone:
            self.forget_thread(k)
        # the acknowledged round was deleted with its thread: nothing of it may be left
        left = await self.transcript(key)
        if left is not None:
            raise AssertionError(
                f"{what} on {key}: the deletion answered {deleted.status_code}, yet the thread "
                f"still holds the round of run {run_id}, acknowledged to the client "
                f"({answer.describe()}):\n{show(actual_messages(left))}"
            )
        if deletion == "user":
            memory = await self.memory(key.caller)
            assert memory == {"profile": [], "facts": []}, (
                f"{what} on {key}: memory of {key.caller} after the erasure: {memory}"
            )
        for other, memory in before.items():
            assert await self.memory(other) == memory, (
                f"{what} on {key} changed the memory of {other}"
            )

    # -- rules: reads ---------------------------------------------------------------------

    @rule(key=keys, limit=st.integers(1, 5))
    def read_transcript(self, key: Key, limit: int) -> None:
        """``GET /messages`` page by page (small pages, following ``next_before``)."""
        self.go(self.check_thread(key, limit=limit, why=f"read with limit={limit}"))

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def every_transcript_is_the_acknowledged_rounds(self) -> None:
        """Every thread key of the world, read whole after every step."""
        self.flush_told()

        async def check_all() -> None:
            for key in ALL_KEYS:
                await self.check_thread(key)

        self.go(check_all())


# --- the tests -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_stack() -> Iterator[PrivateRedis]:
    """A private Redis Stack for this module (flushed for every machine)."""
    with private_redis() as server:
        yield server


@pytest.mark.parametrize("profile", PROFILES)
def test_the_http_api_as_a_state_machine(profile: str, request: pytest.FixtureRequest) -> None:
    redis = request.getfixturevalue("redis_stack") if profile == "redis-mysql" else None
    machine = type(
        f"Threadkeeper_{profile.replace('-', '_')}",
        (ThreadkeeperMachine,),
        {"profile": profile, "redis": redis},
    )
    quiet = logging.getLogger("httpx")  # one line per request would bury the report
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        run_state_machine_as_test(machine, settings=machine_settings())
    finally:
        quiet.setLevel(level)
