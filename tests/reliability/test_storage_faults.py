"""Storage faults against real ``threadkeeper serve`` processes (issue 9, item 5, and the
storage part of "The project's own reliability suite").

Every store a server profile uses is reached through a TCP proxy between the service process
and the real server (the machine's PostgreSQL and MariaDB are shared: they are never stopped,
only the proxy in front of them). For each profile, store, fault kind and moment, one cycle:

- fault kinds: **cut** (``TcpProxy.cut()``: open connections reset, new ones refused — the
  server is down), **partition** (``PartitionProxy.partition()``: packets dropped both ways
  on a veth into a network namespace — the network is broken, nothing is closed) and **hang**
  (``TcpProxy.hang()``: connections accepted and kept, nothing answered — a stuck server or
  pooler; only the service's store deadline, ``THREADKEEPER_STORE_TIMEOUT_SECONDS``, ends a
  wait: issue 29, item 1);
- moments: **idle** (between runs), **mid-run** (at the first ``messages`` event of an SSE
  answer that streams for seconds: ``THREADKEEPER_MODEL_TOKEN_DELAY_MS=40``), and at the
  **commit** (``cut_after(b"COMMIT")`` / ``partition_after(b"COMMIT")`` on the store whose
  transaction stores the round: the COMMIT reaches the server, its reply never comes back) —
  mended ``COMMIT_HOLD`` seconds later (``commit``: the service can learn the outcome), or
  only once the client was answered (``commit-held``: the store stays away);
- the client's answer: 503 problem+json ``unavailable`` or an SSE ``error`` event, never a
  hang; for a commit whose outcome was lost, the stored answer or ``commit-in-doubt``, and then
  a retry with the same ``run_id`` must return the stored answer;
- ``GET /health/ready`` during the fault is 503; ``GET /messages`` answers (200 or 503);
- after ``restore()`` / ``heal()`` runs succeed again on the same process (no restart);
- the invariant (``tests.support.load.verify``): every acknowledged round stored whole and
  once, no round answered with an error stored, an in-doubt round at most once. On
  redis-mysql also: a checkpoint left in Redis holds every stored round of its thread (a stale
  cache hides a round from the model in every later run, though ``/messages`` shows it).

Plus, on redis-mysql, Redis ``FLUSHALL`` and a Redis restart (the private Redis Stack stopped
and started on its port) between runs and mid-run, and on both profiles the SIGKILL of a
replica mid-run: a second replica on the same storage gets the thread (at once on postgres,
after one lock TTL on redis-mysql: ``THREADKEEPER_LOCK_TTL_SECONDS=3``) and the killed
replica's round is not stored.

One server process (with its proxies) per profile and fault kind serves every check that
uses it, one after another, each on threads of its own (``ServerPool``; in CI the next server
starts while the current one is tested). A cycle runs to its end — recovery and invariant
included — before anything is asserted, so that a failing cycle still reports every figure
and leaves its server recovered for the next.

CI runs it reduced with generous bounds; ``THREADKEEPER_RELIABILITY_SIZE=full`` repeats every
cycle and reports the real figures through ``measure`` (targets: a 503 within 1 s of asking a
store that cannot be reached, readiness within 1 s, recovery by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from tests.api.conftest import Servers
from tests.reliability.conftest import FULL, Measure, sized
from tests.support.load import Outcome, question, transcript, verify
from tests.support.netns import netns_support
from tests.support.redis_stack import PrivateRedis
from tests.support.servers import ProfileServer, start_server, storage
from tests.support.tcp_proxy import PartitionProxy, TcpProxy, partition_supported
from threadkeeper.adapters.rounds import RESOLVE_SECONDS

Kind = Literal["cut", "partition", "hang"]

LOCK_TTL_SECONDS = 3
SLOW = {
    "THREADKEEPER_MODEL_TOKEN_DELAY_MS": "40",  # an answer streams for seconds
    "THREADKEEPER_LOCK_TTL_SECONDS": str(LOCK_TTL_SECONDS),  # redis-mysql
}
STORE_TIMEOUT_SECONDS = 2
HUNG = {"THREADKEEPER_STORE_TIMEOUT_SECONDS": str(STORE_TIMEOUT_SECONDS)}
"""The hang rigs' store deadline (the default is 5 s; a shorter one keeps CI's cycles short)."""
ROUND_STORE = {"postgres": "postgres", "redis-mysql": "mysql"}
"""The store whose transaction stores the round (where a commit can be in doubt)."""
PROBLEM = "urn:threadkeeper:problem:"
UNAVAILABLE = PROBLEM + "unavailable"
IN_DOUBT = PROBLEM + "commit-in-doubt"
BUSY = PROBLEM + "thread-busy"
PROBLEM_JSON = "application/problem+json"

ANSWER_BOUND = 30.0
"""CI bound on seconds from a fault to the client's answer (target: ≤ 1 s once the store is
asked; a mid-run fault adds the rest of the stream)."""
COMMIT_BOUND = RESOLVE_SECONDS + 20.0
"""A commit whose reply was lost: the service looks for its outcome for RESOLVE_SECONDS."""
PROBE_BOUND = 10.0
"""CI bound on ``/health/ready`` and ``GET /messages`` during a fault (target ≤ 1 s)."""
RECOVERY_BOUND = 20.0
"""CI bound on seconds from ``restore()`` / ``heal()`` to the first successful run."""
FREE_BOUND = 30.0
"""CI bound on seconds from a replica's SIGKILL until its thread is free elsewhere."""
REQUEST_TIMEOUT = 90.0
"""A client that waits this long reports a hang."""
COMMIT_HOLD = 3.0
"""``commit``: seconds the tripped fault stays before it is mended."""
CYCLES = sized(1, 5)
"""Fault cycles per check (each on a fresh thread)."""
SEED_ROUNDS = sized(1, 4)


# -- servers ---------------------------------------------------------------------------------


@dataclass
class Rig:
    """One server process whose stores are all reached through fault-injecting proxies."""

    profile: str
    kind: Kind
    server: ProfileServer
    direct: Servers
    """The stores' own URLs (inspection, other replicas)."""
    redis: PrivateRedis | None
    proxies: dict[str, TcpProxy]
    """store (``postgres``, ``mysql``, ``redis``) → its proxy."""

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def headers(self) -> dict[str, str]:
        return self.server.headers

    @property
    def redis_url(self) -> str | None:
        """The private Redis itself (not the proxy), where the profile has one."""
        return self.direct.redis_url

    def fault(self, store: str) -> None:
        proxy = self.proxies[store]
        if self.kind == "cut":
            proxy.cut()
        elif self.kind == "hang":
            proxy.hang()
        else:
            proxy.partition()

    def arm_commit(self, store: str) -> threading.Event:
        """The fault right after the next COMMIT has been forwarded; set once in place."""
        proxy = self.proxies[store]
        if self.kind == "cut":
            return proxy.cut_after(b"COMMIT")
        return proxy.partition_after(b"COMMIT")

    def mend(self) -> None:
        """Every proxy back to normal (idempotent)."""
        for proxy in self.proxies.values():
            proxy.disarm()
            if self.kind == "cut":
                proxy.restore()
            elif self.kind == "hang":
                proxy.unhang()
            else:
                proxy.heal()


def _host_port(url: str, default: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default


@contextlib.contextmanager
def open_rig(profile: str, kind: Kind, root: Path) -> Iterator[Rig]:
    with contextlib.ExitStack() as stack:
        direct, private = stack.enter_context(storage(profile))

        def proxy_for(url: str, default_port: int) -> TcpProxy:
            host, port = _host_port(url, default_port)
            proxy = PartitionProxy(host, port) if kind == "partition" else TcpProxy(host, port)
            stack.callback(proxy.close)
            return proxy

        proxies: dict[str, TcpProxy] = {}
        if profile == "postgres":
            assert direct.postgres_url is not None
            proxies["postgres"] = proxy_for(direct.postgres_url, 5432)
            proxied = Servers(postgres_url=proxies["postgres"].url(direct.postgres_url))
        else:
            assert direct.mysql_url is not None
            assert direct.redis_url is not None
            proxies["mysql"] = proxy_for(direct.mysql_url, 3306)
            proxies["redis"] = proxy_for(direct.redis_url, 6379)
            proxied = Servers(
                redis_url=proxies["redis"].url(direct.redis_url),
                mysql_url=proxies["mysql"].url(direct.mysql_url),
            )
        env = {**SLOW, **HUNG} if kind == "hang" else SLOW
        server = stack.enter_context(
            start_server(profile, root / f"{profile}-{kind}", proxied, private, **env)
        )
        rig = Rig(profile, kind, server, direct, private, proxies)
        try:
            yield rig
        finally:
            rig.mend()  # so that the server can shut down cleanly


Key = tuple[str, ...]
"""("rig", profile, kind) or ("replica", profile): a second replica on that profile's cut
rig's storage, reached directly (no proxy)."""


class ServerPool:
    """Opens servers on demand and keeps each until no later test of the session needs it.

    In CI the next server a later test needs starts in the background while the current one
    is tested (a server takes seconds to start); in the full run nothing starts beside a test
    (its figures are not to be disturbed)."""

    def __init__(self, root: Path, *, prefetch: bool) -> None:
        self.root = root
        self.prefetch_enabled = prefetch
        self._opened: dict[Key, Future[Any]] = {}
        self._stacks: dict[Key, contextlib.ExitStack] = {}
        self._lock = threading.Lock()

    def _open(self, key: Key) -> Any:
        stack = contextlib.ExitStack()
        try:
            if key[0] == "rig":
                value: Any = stack.enter_context(
                    open_rig(key[1], key[2], self.root)  # type: ignore[arg-type]
                )
            else:
                rig: Rig = self.get(("rig", key[1], "cut"))
                value = stack.enter_context(
                    start_server(
                        key[1], self.root / f"{key[1]}-replica", rig.direct, rig.redis, **SLOW
                    )
                )
        except BaseException:
            stack.close()
            raise
        with self._lock:
            self._stacks[key] = stack
        return value

    def _start(self, key: Key) -> Future[Any]:
        with self._lock:
            if key in self._opened:
                return self._opened[key]
            future: Future[Any] = Future()
            self._opened[key] = future

        def run() -> None:
            try:
                future.set_result(self._open(key))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name=f"open-{'-'.join(key)}", daemon=True).start()
        return future

    def get(self, key: Key) -> Any:
        return self._start(key).result(timeout=300)

    def opened(self, key: Key) -> bool:
        with self._lock:
            return key in self._opened

    def prefetch(self, key: Key) -> None:
        if self.prefetch_enabled:
            self._start(key)

    def close(self, key: Key) -> None:
        if key[0] == "rig":  # a replica lives on its rig's storage: it goes first
            self.close(("replica", key[1]))
        with self._lock:
            future = self._opened.pop(key, None)
        if future is None:
            return
        with contextlib.suppress(BaseException):
            future.result(timeout=300)
        with self._lock:
            stack = self._stacks.pop(key, None)
        if stack is not None:
            stack.close()

    def close_all(self) -> None:
        with self._lock:
            keys = sorted(self._opened, key=lambda k: k[0] != "replica")
        for key in keys:
            self.close(key)


def needs(item: pytest.Item) -> list[Key]:
    """The servers a collected test of this module uses."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "rig" not in callspec.params:
        return []
    profile, kind = callspec.params["rig"]
    if kind == "partition" and not partition_supported():
        return []  # skipped
    keys: list[Key] = [("rig", profile, kind)]
    if "replica" in getattr(item, "fixturenames", ()):
        keys.append(("replica", profile))
    return keys


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    servers = ServerPool(tmp_path_factory.mktemp("servers"), prefetch=not FULL)
    try:
        yield servers
    finally:
        servers.close_all()


def _later(request: pytest.FixtureRequest) -> list[pytest.Item]:
    items = request.session.items
    return items[items.index(request.node) + 1 :] if request.node in items else []


@pytest.fixture
def rig(request: pytest.FixtureRequest, pool: ServerPool) -> Iterator[Rig]:
    """The server of ``request.param`` = (profile, fault kind), shared by the tests using it."""
    profile, kind = request.param
    if kind == "partition" and not partition_supported():
        pytest.skip(f"a partition needs network namespaces (root, iproute2): {netns_support()[1]}")
    key: Key = ("rig", profile, kind)
    running: Rig = pool.get(key)
    if running.server.process.poll() is not None:
        pytest.fail(f"the {profile}/{kind} server died: {running.server.output()[-3000:]}")
    running.mend()
    later = [k for item in _later(request) for k in needs(item)]
    upcoming = [k for k in dict.fromkeys(later) if k != key and not pool.opened(k)]
    if upcoming:
        pool.prefetch(upcoming[0])  # one server starting beside the test at most
    yield running
    running.mend()
    if key not in later:
        pool.close(key)


@pytest.fixture
def replica(pool: ServerPool, rig: Rig) -> Iterator[ProfileServer]:
    """A second replica on ``rig``'s storage (direct URLs); closed after its test."""
    key: Key = ("replica", rig.profile)
    yield pool.get(key)
    pool.close(key)


RIG_ORDER: list[tuple[str, Kind]] = [
    ("redis-mysql", "cut"),
    ("postgres", "cut"),
    ("postgres", "partition"),
    ("redis-mysql", "partition"),
    ("redis-mysql", "hang"),
    ("postgres", "hang"),
]
"""The order the fault matrix visits the servers in (each starts once; see ``ServerPool``)."""


def rig_param(profile: str, kind: Kind) -> Any:
    return pytest.param((profile, kind), id=f"{profile}-{kind}")


PG_CUT = rig_param("postgres", "cut")
RM_CUT = rig_param("redis-mysql", "cut")


# -- clients ---------------------------------------------------------------------------------


@dataclass
class Answered:
    """One run as its client saw it, with the moments that matter."""

    outcome: Outcome
    started_at: float
    answered_at: float
    last_token_at: float | None = None
    events: list[str] = field(default_factory=list)

    @property
    def problem_type(self) -> str | None:
        return None if self.outcome.problem is None else str(self.outcome.problem.get("type"))

    def label(self) -> str:
        o = self.outcome
        if o.kind == "ok":
            return "answer (end)" if self.events else "200 answer"
        slug = str(self.problem_type).removeprefix(PROBLEM)
        if "error" in self.events:
            return f"sse error {slug}"
        return f"{o.status} {slug}" if o.status is not None else f"no answer ({slug})"


def new_outcome(thread: str, turn: int, content: str, run_id: str | None = None) -> Outcome:
    return Outcome(thread, turn, content, run_id or str(uuid.uuid4()))


def short(thread: str, turn: int) -> str:
    """A message the builtin model answers in a dozen tokens (a clarifying question)."""
    return f"hello {thread} {turn}"


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {"type": f"status {response.status_code}", "detail": response.text[:200]}
    problem = body if isinstance(body, dict) else {"detail": body}
    problem["content_type"] = response.headers.get("content-type", "")
    return problem


def _refused_or_error(outcome: Outcome) -> None:
    """As ``tests.support.load`` classifies it; an in-doubt answer may be stored or not, so
    ``verify`` must take it as unknown (at most once)."""
    assert outcome.status is not None
    assert outcome.problem is not None
    outcome.kind = "error" if outcome.status >= 500 else "refused"
    if outcome.problem.get("type") == UNAVAILABLE:
        outcome.kind = "refused"
    if outcome.problem.get("type") == IN_DOUBT:
        outcome.kind = "unknown"


async def json_run(client: httpx.AsyncClient, outcome: Outcome) -> Answered:
    body = {"message": {"content": outcome.content}, "run_id": outcome.run_id}
    started = time.monotonic()
    try:
        response = await client.post(
            f"/v1/threads/{outcome.thread}/runs",
            json=body,
            headers={"Accept": "application/json"},
            timeout=REQUEST_TIMEOUT,
        )
    except (TimeoutError, httpx.HTTPError) as exc:
        outcome.kind = "unknown"
        outcome.problem = {"type": type(exc).__name__, "detail": str(exc)[:200]}
    else:
        outcome.status = response.status_code
        if response.status_code == 200:
            outcome.kind, outcome.answer = "ok", response.json()["message"]["content"]
        else:
            outcome.problem = _problem(response)
            _refused_or_error(outcome)
    answered = Answered(outcome, started, time.monotonic())
    outcome.seconds = answered.answered_at - started
    return answered


async def sse_run(
    client: httpx.AsyncClient,
    outcome: Outcome,
    on_first_token: Callable[[], Awaitable[None]] | None = None,
) -> Answered:
    """An SSE run; ``on_first_token`` is awaited at its first ``messages`` event."""
    body = {"message": {"content": outcome.content}, "run_id": outcome.run_id}
    started = time.monotonic()
    answered = Answered(outcome, started, started)
    try:
        async with client.stream(
            "POST",
            f"/v1/threads/{outcome.thread}/runs",
            json=body,
            headers={"Accept": "text/event-stream"},
            timeout=REQUEST_TIMEOUT,
        ) as response:
            outcome.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                outcome.problem = _problem(response)
                _refused_or_error(outcome)
            else:
                outcome.kind = "unknown"  # unless `end` or `error` arrives
                outcome.problem = {"type": "stream ended without end or error"}
                await _read_events(response, answered, on_first_token)
    except (TimeoutError, httpx.HTTPError) as exc:
        outcome.kind = "unknown"
        outcome.problem = {"type": type(exc).__name__, "detail": str(exc)[:200]}
    answered.answered_at = time.monotonic()
    outcome.seconds = answered.answered_at - started
    return answered


async def _read_events(
    response: httpx.Response,
    answered: Answered,
    on_first_token: Callable[[], Awaitable[None]] | None,
) -> None:
    outcome = answered.outcome
    name, data = "message", []
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue  # a keep-alive comment
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            payload = json.loads("\n".join(data))
            data = []
            answered.events.append(name)
            if name == "messages":
                answered.last_token_at = time.monotonic()
                if outcome.first_token is None:
                    outcome.first_token = answered.last_token_at - answered.started_at
                    if on_first_token is not None:
                        await on_first_token()
            elif name == "end":
                outcome.kind, outcome.answer = "ok", payload["message"]["content"]
                outcome.problem = None
                return
            elif name == "error":
                outcome.kind, outcome.problem = "error", payload
                if payload.get("type") == IN_DOUBT:
                    outcome.kind = "unknown"
                return


@dataclass
class Probe:
    status: int | None
    seconds: float
    body: Any = None

    def describe(self) -> str:
        return f"{self.status} in {self.seconds:.2f} s"


async def probe(client: httpx.AsyncClient, path: str) -> Probe:
    started = time.monotonic()
    try:
        response = await client.get(path, timeout=REQUEST_TIMEOUT)
    except (TimeoutError, httpx.HTTPError) as exc:
        return Probe(None, time.monotonic() - started, type(exc).__name__)
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text[:200]
    return Probe(response.status_code, time.monotonic() - started, body)


async def seed(client: httpx.AsyncClient, thread: str, rounds: int) -> list[Outcome]:
    outcomes = []
    for turn in range(rounds):
        answered = await json_run(client, new_outcome(thread, turn, short(thread, turn)))
        assert answered.outcome.kind == "ok", f"seeding {thread} before any fault: {answered}"
        outcomes.append(answered.outcome)
    return outcomes


@dataclass
class Recovery:
    ready_seconds: float | None = None
    run_seconds: float | None = None
    attempts: int = 0
    refusals: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (
            f"ready after {self.ready_seconds} s, first run after {self.run_seconds} s; "
            f"{self.attempts} attempts, refused: {sorted(set(self.refusals))}"
        )


async def recover(
    client: httpx.AsyncClient,
    thread: str,
    first_turn: int,
    outcomes: list[Outcome],
    mended_at: float,
    deadline: float = RECOVERY_BOUND,
) -> Recovery:
    """Poll readiness and send runs on ``thread`` (same server process) until both work."""
    recovery = Recovery()
    turn = first_turn
    while time.monotonic() < mended_at + deadline:
        if recovery.ready_seconds is None:
            ready = await probe(client, "/health/ready")
            if ready.status == 200:
                recovery.ready_seconds = time.monotonic() - mended_at
        if recovery.run_seconds is None:
            attempt = await json_run(client, new_outcome(thread, turn, short(thread, turn)))
            turn += 1
            recovery.attempts += 1
            outcomes.append(attempt.outcome)
            if attempt.outcome.kind == "ok":
                recovery.run_seconds = attempt.answered_at - mended_at
            else:
                recovery.refusals.append(attempt.label())
        if recovery.ready_seconds is not None and recovery.run_seconds is not None:
            break
        await asyncio.sleep(0.25)
    return recovery


def redis_cache(redis_url: str, thread: str) -> tuple[bool, bytes]:
    """(whether the thread has a checkpoint in Redis, every byte Redis keeps for it)."""
    client: Any = redis.Redis.from_url(redis_url)  # bytes in, bytes out
    try:
        keys: list[bytes] = [
            k for k in client.keys(f"*{thread}*") if not k.startswith(b"tk:run-lock:")
        ]
        data = b""
        for key in keys:
            kind = client.type(key)
            if kind == b"ReJSON-RL":
                data += client.execute_command("JSON.GET", key) or b""
            elif kind == b"string":
                data += client.get(key) or b""
            elif kind == b"hash":
                data += b"".join(k + v for k, v in client.hgetall(key).items())
        return any(k.startswith(b"checkpoint:") for k in keys), data
    finally:
        client.close()


async def check_invariant(
    url: str,
    headers: dict[str, str],
    outcomes: list[Outcome],
    redis_url: str | None,
    problems: list[str],
    where: str,
) -> dict[str, Any]:
    """Acknowledged ↔ stored (``verify``), then Redis as a cache of the archive; figures."""
    result = await verify(url, headers, outcomes)
    if not result.ok:
        problems.append(f"{where}: acknowledged ↔ stored broken: {result.describe()}")
    figures: dict[str, Any] = {
        "invariant": result.ok,
        "acknowledged": result.acknowledged,
        "lost": len(result.lost),
        "stored_but_refused": len(result.stored_but_refused),
        "duplicated": len(result.duplicated),
        "unknown_stored": result.unknown_stored,
        "unknown_absent": result.unknown_absent,
    }
    if redis_url is not None:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            for thread in sorted({o.thread for o in outcomes}):
                stored = [
                    m["content"]
                    for m in await transcript(client, thread) or []
                    if m["role"] == "human"
                ]
                cached, data = redis_cache(redis_url, thread)
                missing = [c for c in stored if c.encode() not in data]
                figures["stale_cache"] = bool(cached and missing)
                if cached and missing:
                    problems.append(
                        f"{where}: the Redis checkpoint of {thread} lacks {len(missing)} of its "
                        f"{len(stored)} stored rounds ({missing[:2]}): the model no longer sees "
                        "them, though /messages does (the cache was neither updated nor dropped)"
                    )
    return figures


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# -- Redis flushed or restarted (redis-mysql) ------------------------------------------------


def lose_redis(rig: Rig, action: str) -> None:
    """FLUSHALL on the private Redis, or stop and start it on its port (no persistence)."""
    assert rig.redis is not None
    assert rig.redis_url is not None
    if action == "restart":
        rig.redis.restart()
        return
    client = redis.Redis.from_url(rig.redis_url)
    try:
        client.flushall()
    finally:
        client.close()


@pytest.mark.parametrize("rig", [RM_CUT], indirect=True)
@pytest.mark.parametrize("moment", ["between-runs", "mid-run"])
@pytest.mark.parametrize("action", ["flush", "restart"])
async def test_redis_lost_keeps_every_round(
    rig: Rig, action: str, moment: str, measure: Measure
) -> None:
    """Between runs the next run cold-starts from MySQL with every round; mid-run the run
    fails cleanly or is stored whole; either way the thread goes on, on the same process."""
    problems: list[str] = []
    for cycle in range(CYCLES):
        where = f"redis-mysql/redis {action} {moment} (cycle {cycle})"
        figures = await redis_lost_cycle(rig, action, moment, where, problems)
        measure("redis-lost", profile="redis-mysql", action=action, moment=moment, **figures)
    assert not problems, "\n".join(problems)


async def redis_lost_cycle(
    rig: Rig, action: str, moment: str, where: str, problems: list[str]
) -> dict[str, Any]:
    thread = f"redis-{action}-{moment}-{uuid.uuid4().hex[:6]}"
    figures: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=rig.url, headers=rig.headers, timeout=60) as client:
        outcomes = await seed(client, thread, SEED_ROUNDS + 1)
        turn = SEED_ROUNDS + 1
        if moment == "between-runs":
            await asyncio.to_thread(lose_redis, rig, action)
            lost_at = time.monotonic()
            after = await json_run(client, new_outcome(thread, turn, short(thread, turn)))
            outcomes.append(after.outcome)
            figures["answer"] = after.label()
            figures["seconds_to_answer"] = _seconds(after.answered_at - lost_at)
            if after.outcome.kind != "ok":
                problems.append(f"{where}: the next run was answered {after.label()}")
            assert rig.redis_url is not None
            cached, data = redis_cache(rig.redis_url, thread)
            seen = [o.content for o in outcomes if o.content.encode() in data]
            figures["cold_start_rounds"] = len(seen)
            if not cached or len(seen) != len(outcomes):
                problems.append(
                    f"{where}: after the next run Redis holds {len(seen)} of the thread's "
                    f"{len(outcomes)} rounds (checkpoint: {cached}): no whole cold start"
                )
        else:
            lost: list[float] = []

            async def lose_now() -> None:
                await asyncio.to_thread(lose_redis, rig, action)
                lost.append(time.monotonic())

            outcome = new_outcome(thread, turn, question(thread, turn))
            turn += 1
            answered = await sse_run(client, outcome, lose_now)
            outcomes.append(answered.outcome)
            lost_at = lost[0] if lost else answered.answered_at
            figures["answer"] = answered.label()
            figures["seconds_to_answer"] = _seconds(answered.answered_at - lost_at)
            if answered.outcome.kind == "unknown":
                problems.append(f"{where}: no clean answer: {answered.label()}")
            elif answered.answered_at - lost_at > ANSWER_BOUND:
                problems.append(f"{where}: answered {answered.answered_at - lost_at:.1f} s on")
            recovery = await recover(client, thread, turn, outcomes, time.monotonic())
            figures["seconds_to_recover"] = _seconds(recovery.run_seconds)
            if recovery.run_seconds is None:
                problems.append(f"{where}: no run succeeded afterwards: {recovery.describe()}")
    figures.update(
        await check_invariant(rig.url, rig.headers, outcomes, rig.redis_url, problems, where)
    )
    return figures


# -- a replica killed mid-run ----------------------------------------------------------------


@pytest.mark.parametrize("rig", [RM_CUT, PG_CUT], indirect=True)
async def test_a_killed_replica_frees_its_thread_and_stores_nothing(
    rig: Rig, replica: ProfileServer, measure: Measure
) -> None:
    """SIGKILL of the replica running a thread's run, at its first token: the other replica
    (``rig``'s server) gets the thread — at once on postgres (the lock session dies with the
    process), after one lock TTL on redis-mysql — and the killed run's round is not stored."""
    thread = f"kill-{uuid.uuid4().hex[:6]}"
    problems: list[str] = []
    figures: dict[str, Any] = {}
    async with (
        httpx.AsyncClient(base_url=rig.url, headers=rig.headers, timeout=60) as survivor,
        httpx.AsyncClient(base_url=replica.url, headers=replica.headers, timeout=60) as victim,
    ):
        outcomes = await seed(survivor, thread, SEED_ROUNDS)
        turn = SEED_ROUNDS
        killed: list[float] = []
        doomed = new_outcome(thread, turn, question(thread, turn))
        turn += 1

        async def kill_now() -> None:
            nonlocal turn
            busy = await json_run(survivor, new_outcome(thread, turn, short(thread, turn)))
            turn += 1
            outcomes.append(busy.outcome)
            figures["while_running"] = busy.label()
            running = (busy.outcome.problem or {}).get("running_run_id")
            if busy.problem_type != BUSY or running != doomed.run_id:
                problems.append(
                    f"while the run streams on the other replica: {busy.label()} naming "
                    f"{running!r}, not 409 naming {doomed.run_id}"
                )
            replica.process.kill()  # SIGKILL
            killed.append(time.monotonic())

        answered = await sse_run(victim, doomed, kill_now)
        if not killed:
            pytest.fail(f"the run never streamed on the replica: {answered.label()}")
        if answered.outcome.kind == "ok":
            problems.append("the killed replica's run was acknowledged")
        answered.outcome.kind = "error"  # killed before its commit: it must not be stored
        outcomes.append(answered.outcome)
        replica.process.wait(timeout=30)

        free_after: float | None = None
        refused = 0
        while time.monotonic() < killed[0] + FREE_BOUND:
            sent = time.monotonic()
            attempt = await json_run(survivor, new_outcome(thread, turn, short(thread, turn)))
            turn += 1
            outcomes.append(attempt.outcome)
            if attempt.outcome.status == 409:
                refused += 1
                await asyncio.sleep(0.05)
                continue
            free_after = sent - killed[0]
            figures["first_run"] = attempt.label()
            if attempt.outcome.kind != "ok":
                problems.append(f"the first run on the freed thread: {attempt.label()}")
            break
        figures["seconds_until_free"] = _seconds(free_after)
        figures["refused_409"] = refused
        if free_after is None:
            problems.append(f"the thread was not free {FREE_BOUND} s after the SIGKILL")
    figures.update(
        await check_invariant(
            rig.url,
            rig.headers,
            outcomes,
            rig.redis_url if rig.profile == "redis-mysql" else None,
            problems,
            f"{rig.profile} replica SIGKILL",
        )
    )
    measure(
        "replica-kill",
        profile=rig.profile,
        lock_ttl_seconds=LOCK_TTL_SECONDS if rig.profile == "redis-mysql" else None,
        **figures,
    )
    assert not problems, "\n".join(problems)


# -- the fault matrix ------------------------------------------------------------------------


def _matrix() -> list[Any]:
    """(rig, store, moment) cases, grouped by rig so that each server starts once."""
    cases = []
    for profile, kind in RIG_ORDER:
        for store in ("postgres",) if profile == "postgres" else ("mysql", "redis"):
            moments = ["idle", "mid-run"]
            if store == ROUND_STORE[profile] and kind != "hang":
                moments.append("commit")
                if kind == "cut" or FULL:  # 20 s each (RESOLVE_SECONDS): cut only in CI
                    moments.append("commit-held")
            cases += [
                pytest.param(
                    (profile, kind), store, moment, id=f"{profile}-{store}-{kind}-{moment}"
                )
                for moment in moments
            ]
    return cases


@pytest.mark.parametrize(("rig", "store", "moment"), _matrix(), indirect=["rig"])
async def test_a_store_fault_is_answered_at_once_and_recovered(
    rig: Rig, store: str, moment: str, measure: Measure
) -> None:
    problems: list[str] = []
    for cycle in range(CYCLES):
        figures = await fault_cycle(rig, store, moment, f"{rig.profile}/{store} {rig.kind} "
                                    f"{moment} (cycle {cycle})", problems)  # fmt: skip
        measure(
            "fault",
            profile=rig.profile,
            store=store,
            fault=rig.kind,
            moment=moment,
            cycle=cycle,
            **figures,
        )
    assert not problems, "\n".join(problems)


async def fault_cycle(
    rig: Rig, store: str, moment: str, where: str, problems: list[str]
) -> dict[str, Any]:
    thread = f"{store}-{rig.kind}-{moment}-{uuid.uuid4().hex[:6]}"
    figures: dict[str, Any] = {}
    logged = len(rig.server.log)  # what the server prints from here on explains a failure
    reported = len(problems)
    async with httpx.AsyncClient(base_url=rig.url, headers=rig.headers, timeout=60) as client:
        outcomes = await seed(client, thread, SEED_ROUNDS)
        turn = SEED_ROUNDS
        probes: list[asyncio.Task[Probe]] = []

        def probe_now() -> None:
            probes.append(asyncio.create_task(probe(client, "/health/ready")))
            probes.append(asyncio.create_task(probe(client, f"/v1/threads/{thread}/messages")))

        faulted: list[Answered] = []
        fault_at = 0.0
        mended_at: float | None = None
        try:
            if moment == "idle":
                await asyncio.to_thread(rig.fault, store)
                fault_at = time.monotonic()
                probe_now()
                await asyncio.gather(*probes)
                for run in (json_run, sse_run):
                    faulted.append(
                        await run(client, new_outcome(thread, turn, short(thread, turn)))
                    )
                    turn += 1
            elif moment == "mid-run":

                async def fault_now() -> None:
                    nonlocal fault_at
                    await asyncio.to_thread(rig.fault, store)
                    fault_at = time.monotonic()
                    probe_now()

                outcome = new_outcome(thread, turn, question(thread, turn))
                turn += 1
                faulted.append(await sse_run(client, outcome, fault_now))
                if not fault_at:
                    problems.append(f"{where}: the answer never streamed: {faulted[-1].label()}")
            else:  # commit, commit-held
                armed: list[threading.Event] = []

                async def arm() -> None:  # after the run's claim, before its round
                    armed.append(rig.arm_commit(store))

                outcome = new_outcome(thread, turn, short(thread, turn))
                turn += 1
                running = asyncio.create_task(sse_run(client, outcome, arm))
                deadline = time.monotonic() + 60
                while not (armed and armed[0].is_set()) and not running.done():
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.01)
                if armed and armed[0].is_set():
                    fault_at = time.monotonic()
                    probe_now()
                    if moment == "commit":
                        done, _ = await asyncio.wait({running}, timeout=COMMIT_HOLD)
                        if not done:
                            await asyncio.to_thread(rig.mend)
                            mended_at = time.monotonic()
                            figures["mended_after"] = round(mended_at - fault_at, 3)
                faulted.append(await running)
                if not fault_at:
                    problems.append(
                        f"{where}: no COMMIT went through the proxy ({faulted[-1].label()})"
                    )
            await asyncio.gather(*probes)
        finally:
            await asyncio.gather(*probes, return_exceptions=True)
            await asyncio.to_thread(rig.mend)
            if mended_at is None:
                mended_at = time.monotonic()
        outcomes += [answered.outcome for answered in faulted]
        fault_at = fault_at or mended_at

        # what the client got
        bound = COMMIT_BOUND if moment.startswith("commit") else ANSWER_BOUND
        answers = []
        for answered in faulted:
            since = answered.answered_at - max(fault_at, answered.started_at)
            answers.append([answered.label(), round(since, 3)])
            if since > bound:
                problems.append(f"{where}: answered {since:.1f} s after the fault (> {bound} s)")
            problems += [f"{where}: {wrong}" for wrong in judge(rig, store, moment, answered)]
        figures["answers"] = answers
        if faulted:
            figures["answer"], figures["seconds_to_answer"] = answers[0]
            first = faulted[0]
            if moment == "mid-run" and first.last_token_at is not None:
                after = first.answered_at - first.last_token_at
                figures["seconds_after_last_token"] = round(after, 3)

        # the probes during the fault
        if len(probes) == 2:
            ready, messages = probes[0].result(), probes[1].result()
            figures["ready"], figures["ready_seconds"] = ready.status, _seconds(ready.seconds)
            figures["messages"] = messages.status
            figures["messages_seconds"] = _seconds(messages.seconds)
            if ready.status != 503:
                problems.append(f"{where}: /health/ready during the fault: {ready.describe()}")
            elif ready.seconds > PROBE_BOUND:
                problems.append(f"{where}: /health/ready took {ready.seconds:.1f} s")
            if messages.status not in (200, 503):
                problems.append(f"{where}: GET /messages during the fault: {messages.describe()}")
            elif messages.seconds > PROBE_BOUND:
                problems.append(f"{where}: GET /messages took {messages.seconds:.1f} s")

        # recovery on the same process
        recovery = await recover(client, thread, turn, outcomes, mended_at)
        figures["seconds_to_ready"] = _seconds(recovery.ready_seconds)
        figures["seconds_to_recover"] = _seconds(recovery.run_seconds)
        figures["recovery_attempts"] = recovery.attempts
        figures["recovery_refusals"] = sorted(set(recovery.refusals))
        if recovery.run_seconds is None or recovery.ready_seconds is None:
            problems.append(
                f"{where}: not recovered {RECOVERY_BOUND} s after the mend: {recovery.describe()}"
            )
            await dump_tasks(rig)  # where the server's tasks wait, into its log

        # an in-doubt answer: a retry with the same run_id learns the outcome
        for answered in faulted:
            o = answered.outcome
            if o.problem is None or o.problem.get("type") != IN_DOUBT:
                continue
            retry = await json_run(client, new_outcome(thread, o.turn, o.content, o.run_id))
            outcomes.append(retry.outcome)
            figures["in_doubt_retry"] = retry.label()
            if retry.outcome.kind != "ok":
                problems.append(f"{where}: the retry of the in-doubt run: {retry.label()}")
    figures.update(
        await check_invariant(
            rig.url,
            rig.headers,
            outcomes,
            rig.redis_url if rig.profile == "redis-mysql" else None,
            problems,
            where,
        )
    )
    if len(problems) > reported:
        problems.append(
            f"{where}: the server's log since the cycle began:\n" + server_log(rig, logged)
        )
    return figures


async def dump_tasks(rig: Rig) -> None:
    """``kill -USR1``: the server logs every asyncio task and where it waits
    (``threadkeeper.app.taskdump``)."""
    if rig.server.process.poll() is None:
        rig.server.process.send_signal(signal.SIGUSR1)
        await asyncio.sleep(1.0)


def server_log(rig: Rig, since: int, lines: int = 400) -> str:
    """The last ``lines`` the server printed after its ``since``-th line."""
    printed = rig.server.log[since:]
    return "".join(printed[-lines:]) or "(nothing)"


def judge(rig: Rig, store: str, moment: str, answered: Answered) -> list[str]:
    """What is wrong with the answer to a run that met the fault."""
    o = answered.outcome
    problem_type = answered.problem_type
    if o.kind == "ok":
        needed = moment == "idle" or store == ROUND_STORE[rig.profile]
        if needed and not moment.startswith("commit"):
            return [f"acknowledged ({answered.label()}) although {store} was out of reach"]
        return []
    if problem_type == IN_DOUBT:
        if not moment.startswith("commit"):
            return [f"commit-in-doubt at {moment}, where no commit was under way"]
        return []
    if o.kind == "unknown":
        return [f"no answer (a hang or a broken stream): {answered.label()} {o.problem}"]
    wrong = []
    if problem_type != UNAVAILABLE:
        detail = (o.problem or {}).get("detail")
        wrong.append(f"answered {answered.label()} ({detail}), not 503 `unavailable`")
    if "error" not in answered.events:  # a plain problem response
        if o.status != 503:
            wrong.append(f"status {o.status}, not 503")
        content_type = str((o.problem or {}).get("content_type", ""))
        if not content_type.startswith(PROBLEM_JSON):
            wrong.append(f"content type {content_type!r}, not {PROBLEM_JSON}")
    return wrong
