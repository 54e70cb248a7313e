"""What the service arms share: the processes they measure, the clients that drive them, and
the statistics they report.

* ``Fleet`` (the ``service_fleet`` fixture of ``benchmarks/conftest.py``): one asyncio loop for
  every arm, one ``httpx.AsyncClient`` for both servers, and — each started on first use and
  stopped at the end of the session —
  - a threadkeeper server per profile: ``python -m threadkeeper.app.cli serve`` (uvicorn) on a
    free loopback port, configured by ``THREADKEEPER_*`` only (builtin model, the profile's
    default hooks) with tracing on: ``OTEL_EXPORTER_OTLP_ENDPOINT`` names ``OtlpSink``, a
    loopback OTLP/HTTP receiver in its own process that answers every export with 200;
  - the same agent and saver in this process (``make_container``: the graph the server
    compiles, on its own data directory or schema), driven by ``ainvoke``/``astream``;
  - the peer: the LangGraph Agent Server (``langgraph dev`` from ``langgraph-cli[inmem]``, the
    ``bench`` dependency group) serving ``benchmarks/peer/graphs.py`` (``echo``, ``agent``).
* CPU of a process is the sum of ``/proc/<pid>/task/*/schedstat`` (nanoseconds on a CPU, every
  thread) over it and its children; RSS is ``psutil``'s, summed the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    import psutil

ROOT = Path(__file__).resolve().parent.parent
PEER_DIR = Path(__file__).resolve().parent / "peer"
TENANT = "bench-tenant"
USER = "bench-user"
TOKEN = "bench-service-token"
QUESTIONS = (
    "Is dental treatment covered by my health insurance?",
    "How do I file a claim for a hospital stay?",
    "Does my plan cover physiotherapy?",
    "What is the waiting period for maternity cover?",
)
PEER_ENV = {
    "LANGSMITH_TRACING": "false",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "1",
    "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",  # persistence off: nothing pickled to disk
}


@dataclass(frozen=True)
class PeerSetting:
    """One setting of the Agent Server's throughput knobs: ``--n-jobs-per-worker`` (runs its
    in-memory queue executes at once; ``langgraph dev --help``: default 10) and
    ``BG_JOB_ISOLATED_LOOPS`` (each run on an event loop of its own thread; off by default)."""

    jobs: int
    isolated_loops: bool = False

    @property
    def label(self) -> str:
        return f"jobs {self.jobs}" + (", isolated loops" if self.isolated_loops else "")


PEER_BEST = PeerSetting(jobs=5)
"""The setting the sweep found best at concurrency 20 (docs/benchmarks.md, "The peer at its
best": 67.8 runs/s at 5 jobs, 55.6 at 2, 51.1 at 1, 48.4 at 10, 29.7 at 10 with isolated
loops, 17.8 at 20, 2026-12-07; issue 28 had measured 10 best, 5 second): its sequential arms
and ``echo`` run at it."""
PEER_REDUCED = (PeerSetting(5), PeerSetting(10))
"""The reduced run's throughput arms of the peer: the two best of the sweeps on record (the
faster of the two in the run is the baseline)."""
PEER_SWEEP = (
    PeerSetting(1),
    PeerSetting(2),
    PeerSetting(5),
    PeerSetting(10),
    PeerSetting(20),
    PeerSetting(10, isolated_loops=True),
)


def question(i: int) -> str:
    return QUESTIONS[i % len(QUESTIONS)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- processes ------------------------------------------------------------------------------


def _task_cpu_ns(pid: int) -> int:
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as handle:
                total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


def process_tree(pid: int) -> list[psutil.Process]:
    import psutil  # the bench group's; imported here so that profile_server.py needs only httpx

    root = psutil.Process(pid)
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return [root]


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its children, every thread, in seconds (ns resolution)."""
    return sum(_task_cpu_ns(p.pid) for p in process_tree(pid)) / 1e9


def rss_bytes(pid: int) -> int:
    import psutil

    total = 0
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


@dataclass
class ServerProcess:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def wait_ready(self, path: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log.read_text(errors='replace')}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}{path}", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready:\n{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _spawn(name: str, argv: list[str], env: dict[str, str], cwd: Path, url: str) -> ServerProcess:
    log = cwd / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return ServerProcess(name, process, url, log)


_SINK = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
    """
)


def start_sink(work: Path) -> ServerProcess:
    """A loopback OTLP/HTTP receiver: threadkeeper's spans are exported and thrown away."""
    port = free_port()
    sink = _spawn(
        "otlp-sink",
        [sys.executable, "-c", _SINK, str(port)],
        dict(os.environ),
        work,
        f"http://127.0.0.1:{port}",
    )
    sink.wait_ready("/", timeout=30)
    return sink


def threadkeeper_env(
    profile: str, servers: Any, data_dir: Path, sink: ServerProcess
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("THREADKEEPER_", "OTEL_")) or k == "THREADKEEPER_BENCH_SIZE"
    }
    env.update(
        THREADKEEPER_PROFILE=profile,
        THREADKEEPER_DATA_DIR=str(data_dir),
        OTEL_EXPORTER_OTLP_ENDPOINT=sink.url,
        OTEL_SERVICE_NAME="threadkeeper-bench",
    )
    if servers is not None:
        env.update(servers.env())
    if profile != "embedded":
        env["THREADKEEPER_SERVICE_TOKEN"] = TOKEN
    return env


def start_threadkeeper(
    profile: str,
    servers: Any,
    work: Path,
    sink: ServerProcess,
    extra_env: dict[str, str] | None = None,
    name: str | None = None,
) -> ServerProcess:
    """``threadkeeper serve`` as the benchmarks run it (``threadkeeper_env``), ``extra_env``
    over that; ``name`` (default: the profile) names its data directory."""
    port = free_port()
    data_dir = work / f"data-{name or profile}"
    data_dir.mkdir(exist_ok=True)
    server = _spawn(
        f"threadkeeper-{profile}",
        [
            sys.executable,
            "-m",
            "threadkeeper.app.cli",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        {**threadkeeper_env(profile, servers, data_dir, sink), **(extra_env or {})},
        work,
        f"http://127.0.0.1:{port}",
    )
    server.wait_ready("/health/ready")
    return server


def start_peer(work: Path, setting: PeerSetting) -> ServerProcess:
    """``langgraph dev`` on loopback at ``setting``: no browser, no reload, no file
    persistence, no tracing."""
    langgraph = Path(sys.executable).parent / "langgraph"
    if not langgraph.exists():
        found = shutil.which("langgraph")
        if found is None:
            raise RuntimeError("langgraph-cli is not installed: use the bench group (tox -e bench)")
        langgraph = Path(found)
    peer = work / f"peer-{setting.jobs}{'-isolated' if setting.isolated_loops else ''}"
    peer.mkdir(exist_ok=True)
    graphs = PEER_DIR / "graphs.py"
    config = {  # graph paths are resolved against the working directory: make them absolute
        "dependencies": [str(PEER_DIR)],
        "graphs": {"echo": f"{graphs}:echo", "agent": f"{graphs}:agent"},
    }
    (peer / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(PEER_ENV, BG_JOB_ISOLATED_LOOPS=str(setting.isolated_loops).lower())
    server = _spawn(
        "agent-server",
        [
            str(langgraph),
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n-jobs-per-worker",
            str(setting.jobs),
            "--server-log-level",
            "WARNING",
            "--config",
            "langgraph.json",
        ],
        env,
        peer,
        f"http://127.0.0.1:{port}",
    )
    server.wait_ready("/ok")
    return server


# -- one run, per kind of target ------------------------------------------------------------


@dataclass
class RunTiming:
    latency: float
    """Seconds from sending the request to the whole answer."""
    ttft: float | None = None
    """Seconds from sending the request to the first token (streamed runs)."""


class Target:
    """One arm's system under test: it opens threads and runs one turn on one of them."""

    name: str
    kind: str  # "threadkeeper" | "in-process" | "agent-server"
    profile: str
    pid: int

    async def new_thread(self) -> str:
        raise NotImplementedError

    async def run(self, thread: str, text: str, stream: bool) -> RunTiming:
        raise NotImplementedError

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)


class ThreadkeeperHttp(Target):
    kind = "threadkeeper"

    def __init__(self, client: httpx.AsyncClient, server: ServerProcess, profile: str) -> None:
        self.client, self.server, self.profile = client, server, profile
        self.name = f"threadkeeper HTTP ({profile})"
        self.pid = server.pid
        self.headers = {"X-Tenant-Id": TENANT, "X-User-Id": USER}
        if profile != "embedded":
            self.headers["Authorization"] = f"Bearer {TOKEN}"

    async def new_thread(self) -> str:
        return f"t-{uuid.uuid4().hex[:16]}"  # a thread is created by its first run

    async def run(self, thread: str, text: str, stream: bool) -> RunTiming:
        url = f"{self.server.url}/v1/threads/{thread}/runs"
        body = {"message": {"content": text}}
        started = time.perf_counter()
        if not stream:
            response = await self.client.post(
                url, json=body, headers={**self.headers, "Accept": "application/json"}
            )
            latency = time.perf_counter() - started
            if response.status_code != 200:
                raise RuntimeError(f"{self.name}: {response.status_code} {response.text}")
            return RunTiming(latency)
        ttft, event, ended = None, "", False
        async with self.client.stream(
            "POST", url, json=body, headers={**self.headers, "Accept": "text/event-stream"}
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"{self.name}: {response.status_code} {response.text}")
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                    ended = ended or event == "end"
                    if event == "error":
                        raise RuntimeError(f"{self.name}: error event")
                elif line.startswith("data:") and event == "messages" and ttft is None:
                    ttft = time.perf_counter() - started
        latency = time.perf_counter() - started
        if not ended or ttft is None:
            raise RuntimeError(f"{self.name}: the stream ended without tokens or `end`")
        return RunTiming(latency, ttft)


class AgentServerHttp(Target):
    kind = "agent-server"
    profile = "in-memory"

    def __init__(
        self, client: httpx.AsyncClient, server: ServerProcess, graph: str, setting: PeerSetting
    ) -> None:
        self.client, self.server, self.graph, self.setting = client, server, graph, setting
        self.name = f"Agent Server `{graph}` graph ({setting.label})"
        self.pid = server.pid

    async def new_thread(self) -> str:
        response = await self.client.post(f"{self.server.url}/threads", json={})
        response.raise_for_status()
        return str(response.json()["thread_id"])

    async def run(self, thread: str, text: str, stream: bool) -> RunTiming:
        body: dict[str, Any] = {
            "assistant_id": self.graph,
            "input": {"messages": [{"role": "user", "content": text}]},
        }
        started = time.perf_counter()
        if not stream:
            response = await self.client.post(
                f"{self.server.url}/threads/{thread}/runs/wait", json=body
            )
            latency = time.perf_counter() - started
            if response.status_code != 200 or "__error__" in response.text[:200]:
                raise RuntimeError(f"{self.name}: {response.status_code} {response.text[:500]}")
            return RunTiming(latency)
        # tokens as ``messages`` events; the echo node streams no tokens: its answer is the
        # first ``updates`` event that carries an AI message
        body["stream_mode"] = ["messages-tuple", "updates"]
        ttft, event = None, ""
        async with self.client.stream(
            "POST", f"{self.server.url}/threads/{thread}/runs/stream", json=body
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"{self.name}: {response.status_code} {response.text}")
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                    if event == "error":
                        raise RuntimeError(f"{self.name}: error event")
                elif line.startswith("data:") and ttft is None and event == "messages":
                    chunk = json.loads(line[5:])[0]
                    if chunk.get("type", "").startswith("AI") and chunk.get("content"):
                        ttft = time.perf_counter() - started
                elif line.startswith("data:") and ttft is None and event == "updates":
                    nodes = json.loads(line[5:]).values()
                    if any(
                        m.get("type") == "ai" and m.get("content")
                        for update in nodes
                        if isinstance(update, dict)
                        for m in update.get("messages", [])
                    ):
                        ttft = time.perf_counter() - started
        latency = time.perf_counter() - started
        if ttft is None:
            raise RuntimeError(f"{self.name}: the stream carried no token")
        return RunTiming(latency, ttft)


class InProcess(Target):
    """The compiled agent of ``make_container(settings)`` — the graph, middleware, model and
    (atomic) saver the server runs — invoked directly, with the service's config and
    ``durability="exit"`` (as ``RunExecutor``), without HTTP, the run lock, the round, run
    records or memory."""

    kind = "in-process"

    def __init__(self, container: Any, agent: Any, profile: str) -> None:
        self.container, self.agent, self.profile = container, agent, profile
        self.name = f"in-process ainvoke ({profile})"
        self.pid = os.getpid()

    async def new_thread(self) -> str:
        return f"t-{uuid.uuid4().hex[:16]}"

    def _config(self, thread: str) -> dict[str, Any]:
        return {
            "configurable": {
                "thread_id": f"{TENANT}:{USER}:{thread}",
                "tenant_id": TENANT,
                "user_id": USER,
                "locale": "",
                "thread": thread,
            }
        }

    async def run(self, thread: str, text: str, stream: bool) -> RunTiming:
        from langchain_core.messages import AIMessageChunk, HumanMessage

        config = self._config(thread)
        human = HumanMessage(text, id=str(uuid.uuid4()))
        started = time.perf_counter()
        if not stream:
            out = await self.agent.ainvoke({"messages": [human]}, config, durability="exit")
            latency = time.perf_counter() - started
            if not out["messages"][-1].content:
                raise RuntimeError(f"{self.name}: no answer")
            return RunTiming(latency)
        ttft = None
        async for chunk, metadata in self.agent.astream(
            {"messages": [human]}, config, stream_mode="messages", durability="exit"
        ):
            if (
                ttft is None
                and isinstance(chunk, AIMessageChunk)
                and metadata.get("langgraph_node") == "model"
                and chunk.content
            ):
                ttft = time.perf_counter() - started
        latency = time.perf_counter() - started
        if ttft is None:
            raise RuntimeError(f"{self.name}: no token streamed")
        return RunTiming(latency, ttft)


# -- statistics -----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(prefix: str, seconds: list[float]) -> dict[str, float]:
    return {
        f"{prefix}p50_ms": round(percentile(seconds, 50) * 1e3, 3),
        f"{prefix}p95_ms": round(percentile(seconds, 95) * 1e3, 3),
        f"{prefix}p99_ms": round(percentile(seconds, 99) * 1e3, 3),
    }


@dataclass
class ArmSamples:
    """What one arm measured across its interleaved windows."""

    target: Target
    samples: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    cpu: float = 0.0
    runs: int = 0
    wall: float = 0.0
    rss: int = 0
    failure: str | None = None
    """A reference arm (in process, the Agent Server) that failed under load: why; it is not
    measured again. threadkeeper's own arms never tolerate a failure (the test fails)."""


# -- the fleet ------------------------------------------------------------------------------


class Fleet:
    """Everything the service arms drive, started lazily, stopped by ``close``."""

    def __init__(self, size_name: str, max_concurrency: int) -> None:
        self.size_name = size_name
        self.loop = asyncio.new_event_loop()
        self.work = Path(tempfile.mkdtemp(prefix="tk-bench-"))
        self.max_concurrency = max_concurrency
        self.client = httpx.AsyncClient(
            timeout=120,
            limits=httpx.Limits(
                max_connections=4 * max_concurrency,
                max_keepalive_connections=None,
                # below every server's idle timeout (the Agent Server's uvicorn closes at 5 s,
                # httpx's default expiry): the client drops an idle connection first
                keepalive_expiry=2.0,
            ),
        )
        self._stack = contextlib.ExitStack()
        self._servers: dict[str, ServerProcess] = {}
        self._databases: dict[str, Any] = {}
        self._targets: dict[str, Target] = {}
        self._in_process: list[Any] = []

    def run(self, work: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(work)

    # the pieces, on first use

    def _sink(self) -> ServerProcess:
        if "sink" not in self._servers:
            self._servers["sink"] = start_sink(self.work)
        return self._servers["sink"]

    def _database(self, key: str, profile: str) -> Any:
        """Fresh storage for one process of ``profile`` (a schema, a database + Redis)."""
        if key in self._databases:
            return self._databases[key]
        from tests.api.conftest import Servers

        servers = None
        if profile == "postgres":
            from tests.support.postgres import fresh_schema

            servers = Servers(postgres_url=self._stack.enter_context(fresh_schema()))
        elif profile == "redis-mysql":
            from tests.support.mysql import fresh_database
            from tests.support.redis_stack import private_redis

            redis = self._stack.enter_context(private_redis())
            servers = Servers(
                redis_url=redis.url, mysql_url=self._stack.enter_context(fresh_database())
            )
        self._databases[key] = servers
        return servers

    def threadkeeper(self, profile: str, *, sampled: float | None = None) -> Target:
        """``serve`` on ``profile``, tracing every run — or, with ``sampled``, that share of
        them, by OpenTelemetry's own variables (``OTEL_TRACES_SAMPLER=
        parentbased_traceidratio``, ``OTEL_TRACES_SAMPLER_ARG``)."""
        key = f"http-{profile}" + ("" if sampled is None else f"-sampled-{sampled:g}")
        if key not in self._targets:
            extra = None
            if sampled is not None:
                extra = {
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": f"{sampled:g}",
                }
            server = start_threadkeeper(
                profile, self._database(key, profile), self.work, self._sink(), extra, key
            )
            self._servers[key] = server
            target = ThreadkeeperHttp(self.client, server, profile)
            if sampled is not None:
                target.name = f"threadkeeper HTTP ({profile}, traces sampled {sampled:.0%})"
            self._targets[key] = target
        return self._targets[key]

    def in_process(self, profile: str) -> Target:
        key = f"in-process-{profile}"
        if key not in self._targets:
            self._install_tracing()
            servers = self._database(key, profile)  # migrations run their own loop: first
            self._targets[key] = self.run(self._open_in_process(profile, servers))
        return self._targets[key]

    def agent_server(self, graph: str, setting: PeerSetting = PEER_BEST) -> Target:
        """The Agent Server serving ``graph``, one process per setting."""
        server_key = f"peer {setting.label}"
        key = f"{server_key} {graph}"
        if key not in self._targets:
            if server_key not in self._servers:
                self._servers[server_key] = start_peer(self.work, setting)
            server = self._servers[server_key]
            self._targets[key] = AgentServerHttp(self.client, server, graph, setting)
        return self._targets[key]

    def _install_tracing(self) -> None:
        """This process exports the in-process agent's spans as ``serve`` does (same sink)."""
        if getattr(self, "_tracing", None) is not None:
            return
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "tk-in-process"}))
        exporter = OTLPSpanExporter(endpoint=f"{self._sink().url}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        self._tracing = provider

    async def _open_in_process(self, profile: str, servers: Any) -> Target:
        from tests.api.conftest import settings_for
        from threadkeeper.app.container import make_container

        key = f"in-process-{profile}"
        root = self.work / key
        root.mkdir(exist_ok=True)
        settings = settings_for(profile, root, servers)
        container = make_container(settings)
        service = await container.service()
        self._in_process.append(container)
        return InProcess(container, service.agent, profile)

    def server_of(self, target: Target) -> ServerProcess | None:
        for server in self._servers.values():
            if server.pid == target.pid:
                return server
        return None

    def close(self) -> None:
        async def shutdown() -> None:
            await self.client.aclose()
            for container in self._in_process:
                with contextlib.suppress(Exception):
                    await container.shutdown_resources()

        with contextlib.suppress(Exception):
            self.run(shutdown())
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in pending:  # e.g. the in-process stores' batch loops
            task.cancel()
        if pending:
            with contextlib.suppress(Exception):
                self.run(asyncio.gather(*pending, return_exceptions=True))
        tracing = getattr(self, "_tracing", None)
        if tracing is not None:  # flushed while the sink still listens
            with contextlib.suppress(Exception):
                tracing.shutdown()
        for server in reversed(list(self._servers.values())):
            server.stop()
        self._stack.close()
        self.loop.close()
        shutil.rmtree(self.work, ignore_errors=True)


# -- measuring ------------------------------------------------------------------------------


_WARMED: set[tuple[int, str, bool]] = set()


async def warm(target: Target, runs: int, stream: bool) -> None:
    """``runs`` untimed runs on a new thread, once per target and mode (per process)."""
    key = (id(target), target.name, stream)
    if key in _WARMED:
        return
    _WARMED.add(key)
    if target.kind == "agent-server":
        runs = min(runs, 2)  # ~1 s each, sequentially (its queue's idle poll)
    thread = await target.new_thread()
    for i in range(runs):
        await target.run(thread, question(i), stream)


async def sequential_round(
    arms: list[ArmSamples],
    runs: int,
    stream: bool,
    turns_per_thread: int,
    offset: int,
    sparse: dict[int, int] | None = None,
) -> None:
    """``runs`` runs per arm, one at a time, arm after arm (interleaved run by run); each
    arm's thread is renewed every ``turns_per_thread`` runs of it. ``sparse`` (arm index →
    runs): arms that run only that many times, spread evenly over the campaign (the Agent
    Server's ~1 s per sequential run would otherwise dominate the CI budget). The target's CPU
    is read around each run (nothing else runs meanwhile)."""
    threads: dict[int, str] = {}
    done: dict[int, int] = {}
    for i in range(runs):
        for index, arm in enumerate(arms):
            quota = (sparse or {}).get(index)
            if quota is not None and (
                done.get(index, 0) >= quota or i * quota // runs < done.get(index, 0)
            ):
                continue
            if done.get(index, 0) % turns_per_thread == 0:
                threads[index] = await arm.target.new_thread()
            done[index] = done.get(index, 0) + 1
            cpu = arm.target.cpu()
            timing = await arm.target.run(threads[index], question(offset + i), stream)
            arm.cpu += arm.target.cpu() - cpu
            arm.runs += 1
            arm.wall += timing.latency
            arm.latencies.append(timing.latency)
            arm.samples.append(
                timing.ttft if stream and timing.ttft is not None else timing.latency
            )
            if timing.ttft is not None:
                arm.ttfts.append(timing.ttft)
        if i == runs - 1:
            for arm in arms:
                arm.rss = max(arm.rss, arm.target.rss())


async def concurrent_window(
    arm: ArmSamples, concurrency: int, runs_per_worker: int, stream: bool
) -> None:
    """``concurrency`` workers, each on its own new thread, ``runs_per_worker`` runs each;
    one sample: the time per run **while saturated** — from the ``concurrency``-th run's end to
    the ``concurrency``-th from last's, ÷ the runs that ended in between (the ramp up and down
    are not measured: a server whose queue sleeps when idle, as the Agent Server's does for up
    to a second, is not charged for waking up in each window). CPU is taken over the same
    span."""
    if runs_per_worker < 3:
        raise ValueError("a saturated window needs at least 3 runs per worker")
    threads = [await arm.target.new_thread() for _ in range(concurrency)]
    latencies: list[float] = []
    ttfts: list[float] = []
    total = concurrency * runs_per_worker
    first, last = concurrency, total - concurrency  # the ends that open and close the span
    marks: dict[int, tuple[float, float]] = {}  # end index -> (clock, server CPU)

    def ended() -> None:
        index = len(latencies)
        if index in (first, last):
            marks[index] = (time.perf_counter(), arm.target.cpu())

    async def worker(thread: str, w: int) -> None:
        for i in range(runs_per_worker):
            timing = await arm.target.run(thread, question(w + i), stream)
            latencies.append(timing.latency)
            if timing.ttft is not None:
                ttfts.append(timing.ttft)
            ended()

    if arm.failure is not None:
        return
    outcomes = await asyncio.gather(
        *(worker(t, w) for w, t in enumerate(threads)), return_exceptions=True
    )
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        if arm.target.kind == "threadkeeper":
            raise failed[0]
        first_error = " ".join(f"{type(failed[0]).__name__}: {failed[0]}".split())[:160]
        arm.failure = (
            f"{len(failed)} of {concurrency} clients failed at concurrency {concurrency}: "
            f"{first_error}"
        )
        return
    runs = last - first
    wall = marks[last][0] - marks[first][0]
    arm.cpu += marks[last][1] - marks[first][1]
    arm.rss = max(arm.rss, arm.target.rss())
    arm.runs += runs
    arm.wall += wall
    arm.samples.append(wall / runs)
    arm.latencies += latencies
    arm.ttfts += ttfts


def arm_info(arm: ArmSamples, *, mode: str, concurrency: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "target": arm.target.kind,
        "profile": arm.target.profile,
        "mode": mode,
        "concurrency": concurrency,
        "runs": arm.runs,
        "runs_per_s": round(arm.runs / arm.wall, 2) if arm.wall else 0.0,
        **latency_summary("", arm.latencies),
    }
    if arm.ttfts:
        info.update(latency_summary("ttft_", arm.ttfts))
    info["cpu_ms_per_run"] = round(arm.cpu / arm.runs * 1e3, 3) if arm.runs else 0.0
    info["cpu_of"] = "bench process" if arm.target.kind == "in-process" else "server process"
    info["rss_mb"] = round(arm.rss / 2**20, 1)
    return info


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


Runner = Callable[[Awaitable[Any]], Any]


@contextlib.contextmanager
def fleet_for(size_name: str, max_concurrency: int) -> Iterator[Fleet]:
    fleet = Fleet(size_name, max_concurrency)
    try:
        yield fleet
    finally:
        fleet.close()
