"""Turn latency with a real model's delay, memory and summary on: is the answer held back by
the work around it?

Setup: per profile (embedded, postgres, redis-mysql) a real ``threadkeeper serve`` process on
fresh storage (``service_support.start_threadkeeper``: uvicorn, traces exported to a loopback
sink; the three started at once, then measured one after the other) whose model is the fake
OpenAI-compatible provider of ``tests/support/fake_openai.py`` (``THREADKEEPER_MODEL=
openai:fake-model``) holding back the first byte of every response by a fixed **D** — the chat
call, the memory extraction and the summary alike: with a real model configured, the extractor
(``ModelExtractor``) and the summarizer (``ModelSummarizer``) call that model. Memory is on
(the fake answers the extraction prompt with one product fact per turn, a new one each time;
``THREADKEEPER_MEMORY_MAX_FACTS=8`` evicts old ones, so the cycle of products stays new), and
so is the rolling summary (``THREADKEEPER_TOKEN_BUDGET=1500``,
``THREADKEEPER_SUMMARY_AFTER_TURNS=4``; redis-mysql, whose default pipeline has none:
``THREADKEEPER_HOOKS=truncate_tool_results,summarize,compact``): with messages of ≈ 60 tokens
the window is full after five or six turns, and from then on every turn's window moves.

Load: ``threads`` × ``turns`` (reduced 4 × 10, full 20 × 30; D = 0.4 s, the issue's D, in both),
each thread its own user, all at once in JSON mode; each thread sends its next message the
instant the previous answer arrives. The threads' first messages are spread over one D (thread
*j* starts *j*·D/threads in): started together, with a fixed D, they would stay in lockstep and
every turn's CPU would queue behind the others' — a convoy no independent users make. The
threads' first turns are measured too (the thread is created by its first run); the server is
warmed first on a thread of its own until it has folded a summary once.

Measured:

* **turn latency** — client send → the 200 response (the acknowledgement: the round is
  stored); p50 and p99 in multiples of D (``p50_over_D``, ``p99_over_D``) and in ms;
* **409s right after an answer** — a 409 to a message sent the instant the previous answer
  arrived (``conflicts_409``; must be 0); the message is sent again 10 ms later and the turn's
  latency counts from the first send;
* **memory staleness** — answer → the turn's fact visible in ``GET /v1/users/{id}/memory``: a
  fact whose ``source.message_id`` is that turn's message (the client sets the ids). The fact
  cannot exist before the fake provider has answered that turn's extraction call, so a watcher
  per turn waits for that answer (seen in process), then polls every 20 ms until the fact is
  there: an upper bound off by at most 20 ms and a round trip, for one or two requests per
  turn (polling from the answer on would cost the server as much CPU as the memory work
  itself). ``staleness_p50_ms`` / ``_p99_ms`` (and × D); ``staleness_server_mean_ms``: the
  server's own histogram (``threadkeeper_memory_staleness_seconds``, work recorded → memory
  written); ``facts_not_seen``: turns whose fact never appeared (``STALENESS_TIMEOUT``);
* **summary folds** — ``folds_metric``: what ``GET /metrics`` counted over the campaign
  (``threadkeeper_summary_folds_total``: folds a run waited for; any other
  ``threadkeeper_summary_*`` series is reported too); and from the fake provider's side every
  summary call, attributed to its thread by the message markers it folds: **in-run** when
  answered after a turn of that thread was sent and before that turn's chat call went out (the
  run waited for it), **ahead** otherwise (``folds_in_run``, ``folds_ahead``); ``fold_turns``:
  the share of turns that waited for one, with the p50 of those turns and of the others
  (``p50_fold_turns_over_D``, ``p50_other_turns_over_D``);
* server CPU per turn (``cpu_ms_per_turn``: the process, every thread, over the campaign —
  the runs, their follow-up work and the watchers' reads).

Gates (``report.py`` ``gate_max``, every profile): ``conflicts_409 ≤ 0`` and
``folds_metric_in_run ≤ 2`` (runs that had to fold themselves: folds are made ahead) bind;
``p50_over_D ≤ 1.15`` and ``p99_over_D ≤ 1.6`` are the issue's targets, reported but not
binding yet (``gate_unmet``, reasons in ``P50_UNMET`` / ``P99_UNMET``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("psutil", reason="the service arms need the bench group (tox -e bench)")

from benchmarks.conftest import BenchSize, record_arm
from benchmarks.service_support import (
    TENANT,
    TOKEN,
    ServerProcess,
    percentile,
    start_sink,
    start_threadkeeper,
)
from tests.support.fake_openai import (
    FakeProvider,
    JsonObject,
    default_answer,
    last_user_text,
    message_text,
)
from tests.support.servers import storage
from threadkeeper.app.memory import EXTRACTION_PROMPT
from threadkeeper.domain.extraction import PRODUCTS
from threadkeeper.hooks.model_summarizer import INSTRUCTIONS


@dataclass(frozen=True)
class FollowupSize:
    threads: int
    turns: int
    delay: float
    """D: seconds before the first byte of every model call."""


SIZES = {
    "reduced": FollowupSize(threads=4, turns=10, delay=0.4),
    "full": FollowupSize(threads=20, turns=30, delay=0.4),
}
PROFILES = ("embedded", "postgres", "redis-mysql")
P50_MAX_OVER_D = 1.15
P99_MAX_OVER_D = 1.6
IN_RUN_FOLDS_MAX = 2
"""Runs that had to fold themselves (``threadkeeper_summary_folds_total{fold="in_run"}``): the
folds are asked for three runs ahead, so none should (0 in every run here; 2 allow for a
worker held up on a busy machine). Folds asked for one run ahead lost the race about half
the time."""
P50_UNMET = (
    "not met on every profile: the server's CPU per turn — its run and follow-up work "
    "together, 41-75 ms in reduced runs on the 2-core machine — is served by one event loop, "
    "so 4 threads queue behind each other and behind the follow-up work: p50 1.08-1.11 "
    "(embedded), 1.12-1.14 (postgres), 1.11-1.21 (redis-mysql) × D, within 4 % of the bound "
    "(2026-12-07, docs/benchmarks.md); full size "
    "(20 threads) saturates the process: it needs the CPU per turn cut (issue 28)"
)
"""Why the p50 gate does not bind yet (``report.py``: ``gate_unmet``)."""
P99_UNMET = (
    "met in reduced runs here (1.16-1.35 × D, no run waiting for a fold), but the p99 of 40 "
    "turns is their second slowest: one stall on a busy CI machine decides it; it binds once "
    "the full size meets it (issue 28's CPU work)"
)
"""Why the p99 gate does not bind yet (``report.py``: ``gate_unmet``)."""
SERVER_ENV = {
    "THREADKEEPER_MODEL": "openai:fake-model",
    "OPENAI_API_KEY": "bench-key",
    "THREADKEEPER_TOKEN_BUDGET": "1500",
    "THREADKEEPER_SUMMARY_AFTER_TURNS": "4",
    "THREADKEEPER_MEMORY_MAX_FACTS": "8",
}
HOOKS = {"redis-mysql": "truncate_tool_results,summarize,compact"}
"""Profiles whose default pipeline has no rolling summary: the one that folds with compaction."""
WARMUP_MAX_TURNS = 12
POLL_SECONDS = 0.02
STALENESS_TIMEOUT = 120.0
CONFLICT_RETRY_SECONDS = 0.01
MAX_CONFLICTS = 100
_MARK = re.compile(r"\[fu (\d+)/(\d+)\]")
_SENTENCES = (
    "We are planning a long trip across several countries next summer with the whole family.",
    "I would like to know what my policy includes for lost luggage and delayed flights.",
    "Our house is near the river and I wonder how a flood would be handled.",
    "My car is nine years old and I am not sure the comprehensive cover is still worth it.",
    "We adopted a dog last month and the breeder suggested we look at cover for him.",
    "I am self-employed and would like to keep an income if I cannot work for a while.",
    "Could you also explain how long a claim usually takes and what papers you need?",
    "I pay every month at the moment; is there a discount if I pay once a year instead?",
)


def message(thread: int, turn: int) -> str:
    """Turn ``turn`` of thread ``thread``: a marker (the fake reads it back), then ≈ 60 tokens."""
    rng = random.Random(thread * 1000 + turn)
    return f"[fu {thread}/{turn}] " + " ".join(rng.sample(_SENTENCES, 3))


def _system_text(body: JsonObject) -> str:
    return "".join(
        message_text(m)
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") in {"system", "developer"}
    )


class Script:
    """The fake provider's answers, and what it saw when (``time.perf_counter``, which every
    thread of this process shares): extraction answers per turn (waking the turn's watcher),
    summary calls per thread, chat calls per turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, turns: int) -> None:
        self.loop = loop
        self.threads = threads
        self.extracted = {(j, k): asyncio.Event() for j in range(threads) for k in range(turns)}
        self.summaries: list[tuple[float, set[int]]] = []
        self.chats: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()

    def answer(self, body: JsonObject) -> str:
        """Called in the provider's thread once the first-byte delay has passed."""
        now = time.perf_counter()
        system, human = _system_text(body), last_user_text(body)
        if system.startswith(EXTRACTION_PROMPT[:60]):
            found = _MARK.search(human)
            if found is None:
                return "[]"
            thread, turn = int(found[1]), int(found[2])
            event = self.extracted.get((thread, turn))
            if event is not None:
                self.loop.call_soon_threadsafe(event.set)
            product = PRODUCTS[turn % len(PRODUCTS)]
            return json.dumps([{"kind": "facts", "key": product.key, "value": product.name}])
        if system.startswith(INSTRUCTIONS[:60]):
            folded = {int(m[0]) for m in _MARK.findall(human)}
            if folded & set(range(self.threads)):  # not the warm-up thread's
                with self._lock:
                    self.summaries.append((now, folded))
            return "The customer asked about their cover for a trip, their home and their car."
        found = _MARK.search(human)
        if found is not None:
            with self._lock:
                self.chats.setdefault((int(found[1]), int(found[2])), now)
        return default_answer(body)


@dataclass
class Turn:
    thread: int
    turn: int
    message_id: str
    sent: float = 0.0
    acked: float = 0.0
    conflicts: int = 0
    seen: float | None = None
    folded: bool = False

    @property
    def latency(self) -> float:
        return self.acked - self.sent


@dataclass
class ProfileRun:
    profile: str
    server: ServerProcess
    headers: dict[str, str]
    turns: list[Turn] = field(default_factory=list)


def _metric_sums(text: str, prefix: str) -> dict[str, float]:
    """Every sample of ``GET /metrics`` whose name starts with ``prefix``, summed over labels."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        value = float(line.rsplit(" ", 1)[1])
        sums[name] = sums.get(name, 0.0) + value
        for fold in ("in_run", "ahead"):  # the summary's folds by where they were made
            if name == "threadkeeper_summary_folds_total" and f'fold="{fold}"' in line:
                sums[f"{name}:{fold}"] = sums.get(f"{name}:{fold}", 0.0) + value
        if name == "threadkeeper_followups_total":  # the work by kind and outcome
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = f"{name}:{labels.get('kind')}:{labels.get('outcome')}"
            sums[key] = sums.get(key, 0.0) + value
    return sums


@pytest.fixture(scope="module")
def followup_size(size: BenchSize) -> FollowupSize:
    return SIZES[size.name]


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tk-bench-followup-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def provider(followup_size: FollowupSize) -> Iterator[FakeProvider]:
    with FakeProvider(first_byte_delay=followup_size.delay) as running:
        yield running


@pytest.fixture(scope="module")
def profile_servers(
    request: pytest.FixtureRequest, provider: FakeProvider, work: Path
) -> Iterator[dict[str, ServerProcess]]:
    """A server per profile this session runs, on fresh storage, started at once: most of a
    start is importing (compiling, with ``PYTHONDONTWRITEBYTECODE``) and 2 cores overlap it."""
    chosen = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and callspec is not None:
            chosen.add(callspec.params.get("profile"))
    wanted = [p for p in PROFILES if p in chosen]
    with contextlib.ExitStack() as stack:
        sink = start_sink(work)
        stack.callback(sink.stop)
        storages = {p: stack.enter_context(storage(p)) for p in wanted}

        def start(profile: str) -> ServerProcess:
            env = {**SERVER_ENV, "OPENAI_BASE_URL": provider.url}
            if profile in HOOKS:
                env["THREADKEEPER_HOOKS"] = HOOKS[profile]
            return start_threadkeeper(profile, storages[profile][0], work, sink, env)

        with ThreadPoolExecutor(max_workers=len(wanted) or 1) as pool:
            futures = {p: pool.submit(start, p) for p in wanted}
        servers = {}
        for profile, future in futures.items():
            if future.exception() is None:
                servers[profile] = future.result()
                stack.callback(servers[profile].stop)
        for future in futures.values():
            future.result()  # raises the first failure, the started servers stopped
        yield servers


async def _drive(
    client: httpx.AsyncClient, run: ProfileRun, script: Script, size: FollowupSize
) -> None:
    """Every thread at once (their first messages spread over one D), each next message sent
    the instant the previous answer arrived; a watcher per turn waits for its fact."""
    watchers: list[asyncio.Task[None]] = []

    async def watch(turn: Turn, user: str) -> None:
        extracted = script.extracted[(turn.thread, turn.turn)]
        deadline = turn.sent + STALENESS_TIMEOUT
        try:
            await asyncio.wait_for(extracted.wait(), STALENESS_TIMEOUT)
        except TimeoutError:
            return
        while time.perf_counter() < deadline:
            await asyncio.sleep(POLL_SECONDS)  # the write follows the extraction's answer
            response = await client.get(
                f"{run.server.url}/v1/users/{user}/memory",
                headers={**run.headers, "X-User-Id": user},
            )
            response.raise_for_status()
            if any(
                fact["source"]["message_id"] == turn.message_id for fact in response.json()["facts"]
            ):
                turn.seen = time.perf_counter()
                return

    async def chat(j: int) -> None:
        await asyncio.sleep(j * size.delay / size.threads)  # arrivals spread over one D
        user = f"bench-fu-{j}"
        headers = {**run.headers, "X-User-Id": user, "Accept": "application/json"}
        url = f"{run.server.url}/v1/threads/fu-{j}/runs"
        for k in range(size.turns):
            turn = Turn(j, k, f"fu-{j}-{k}")
            body = {"message": {"content": message(j, k), "id": turn.message_id}}
            turn.sent = time.perf_counter()
            while True:
                response = await client.post(url, json=body, headers=headers)
                if response.status_code != 409 or turn.conflicts >= MAX_CONFLICTS:
                    break
                turn.conflicts += 1
                await asyncio.sleep(CONFLICT_RETRY_SECONDS)
            turn.acked = time.perf_counter()
            if response.status_code != 200:
                raise RuntimeError(f"{run.profile}: {response.status_code} {response.text[:500]}")
            run.turns.append(turn)
            watchers.append(asyncio.create_task(watch(turn, user)))

    await asyncio.gather(*(chat(j) for j in range(size.threads)))
    await asyncio.gather(*watchers)


async def _warm(client: httpx.AsyncClient, run: ProfileRun, size: FollowupSize) -> None:
    """Turns on a thread and user of its own (marked as thread ``size.threads``, which is not
    measured) until the server has folded a summary once (at most ``WARMUP_MAX_TURNS``): every
    path the campaign takes — the model client, extraction, the summarizer — has run once."""
    warm = size.threads
    headers = {**run.headers, "X-User-Id": "bench-fu-warm", "Accept": "application/json"}
    for k in range(WARMUP_MAX_TURNS):
        body = {"message": {"content": message(warm, k)}}
        response = await client.post(
            f"{run.server.url}/v1/threads/fu-warm/runs", json=body, headers=headers
        )
        response.raise_for_status()
        if (await _metrics(client, run)).get("threadkeeper_summary_folds_total", 0.0) > 0:
            return


async def _metrics(client: httpx.AsyncClient, run: ProfileRun) -> dict[str, float]:
    response = await client.get(f"{run.server.url}/metrics", headers=run.headers)
    response.raise_for_status()
    return _metric_sums(response.text, "threadkeeper_")


def _attribute_folds(run: ProfileRun, script: Script, delay: float) -> tuple[int, int]:
    """(in-run, ahead) summary calls: in-run when answered after a turn of its thread was sent
    and no later than that turn's chat call went out (the call's answer time less D)."""
    in_run = ahead = 0
    by_thread: dict[int, list[Turn]] = {}
    for turn in run.turns:
        by_thread.setdefault(turn.thread, []).append(turn)
    for answered, threads in script.summaries:
        waited = None
        for thread in threads:
            for turn in by_thread.get(thread, []):
                chat = script.chats.get((turn.thread, turn.turn))
                if chat is not None and turn.sent <= answered <= chat - delay + 0.005:
                    waited = turn
        if waited is None:
            ahead += 1
        else:
            in_run += 1
            waited.folded = True
    return in_run, ahead


@pytest.mark.parametrize("profile", PROFILES)
def test_followup_latency(  # type: ignore[no-untyped-def]
    benchmark,
    profile: str,
    followup_size: FollowupSize,
    provider: FakeProvider,
    profile_servers: dict[str, ServerProcess],
) -> None:
    size = followup_size
    delay = size.delay
    server = profile_servers[profile]
    headers = {"X-Tenant-Id": TENANT}
    if profile != "embedded":
        headers["Authorization"] = f"Bearer {TOKEN}"
    provider.reset()
    loop = asyncio.new_event_loop()
    script = Script(loop, size.threads, size.turns)
    provider.answer = script.answer
    run = ProfileRun(profile, server, headers)
    client = httpx.AsyncClient(
        timeout=120,
        limits=httpx.Limits(max_connections=4 * size.threads, max_keepalive_connections=None),
    )

    try:
        loop.run_until_complete(_warm(client, run, size))
        before = loop.run_until_complete(_metrics(client, run))
        cpu = server.cpu()
        benchmark.group = "service campaigns"
        benchmark.extra_info.update(
            role="measurement", profile=profile, threads=size.threads, turns=size.turns
        )
        benchmark.pedantic(
            lambda: loop.run_until_complete(_drive(client, run, script, size)),
            rounds=1,
            iterations=1,
        )
        cpu = server.cpu() - cpu
        after = loop.run_until_complete(_metrics(client, run))
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    turns = run.turns
    assert len(turns) == size.threads * size.turns
    latencies = [t.latency for t in turns]
    staleness = [t.seen - t.acked for t in turns if t.seen is not None]
    in_run, ahead = _attribute_folds(run, script, delay)
    folded = [t.latency for t in turns if t.folded]
    others = [t.latency for t in turns if not t.folded]
    staleness_count = delta("threadkeeper_memory_staleness_seconds_count")
    info: dict[str, Any] = {
        "target": "threadkeeper",
        "profile": profile,
        "mode": "JSON",
        "threads": size.threads,
        "turns": size.turns,
        "D_ms": round(delay * 1e3),
        "p50_over_D": round(percentile(latencies, 50) / delay, 3),
        "p99_over_D": round(percentile(latencies, 99) / delay, 3),
        "p50_ms": round(percentile(latencies, 50) * 1e3, 1),
        "p99_ms": round(percentile(latencies, 99) * 1e3, 1),
        "max_ms": round(max(latencies) * 1e3, 1),
        "conflicts_409": sum(t.conflicts for t in turns),
        "staleness_p50_ms": round(percentile(staleness, 50) * 1e3, 1),
        "staleness_p99_ms": round(percentile(staleness, 99) * 1e3, 1),
        "staleness_p50_over_D": round(percentile(staleness, 50) / delay, 3),
        "staleness_p99_over_D": round(percentile(staleness, 99) / delay, 3),
        "staleness_server_mean_ms": round(
            delta("threadkeeper_memory_staleness_seconds_sum") / staleness_count * 1e3, 1
        )
        if staleness_count
        else None,
        "facts_not_seen": sum(t.seen is None for t in turns),
        "folds_metric": delta("threadkeeper_summary_folds_total"),
        "folds_metric_in_run": delta("threadkeeper_summary_folds_total:in_run"),
        "folds_metric_ahead": delta("threadkeeper_summary_folds_total:ahead"),
        "summary_work_done": delta("threadkeeper_followups_total:summary:done"),
        "summary_work_dropped": delta("threadkeeper_followups_total:summary:dropped"),
        "memory_work_done": delta("threadkeeper_followups_total:memory:done"),
        "folds_in_run": in_run,
        "folds_ahead": ahead,
        "cpu_ms_per_turn": round(cpu / len(turns) * 1e3, 1),
        "fold_turns": round(len(folded) / len(turns), 3),
        "p50_fold_turns_over_D": round(percentile(folded, 50) / delay, 3) if folded else None,
        "p50_other_turns_over_D": round(percentile(others, 50) / delay, 3) if others else None,
        "gate_max": {
            "p50_over_D": P50_MAX_OVER_D,
            "p99_over_D": P99_MAX_OVER_D,
            "conflicts_409": 0,
            "folds_metric_in_run": IN_RUN_FOLDS_MAX,
        },
        "gate_unmet": {"p50_over_D": P50_UNMET, "p99_over_D": P99_UNMET},
    }
    record_arm(
        f"follow-up latency, D = {delay:g} s", f"threadkeeper HTTP ({profile})", latencies, info
    )
    assert info["facts_not_seen"] == 0, f"{profile}: facts never became visible"
