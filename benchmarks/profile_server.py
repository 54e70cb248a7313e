"""Where a run's CPU goes: py-spy over a real ``threadkeeper serve`` under load.

Starts the server (embedded profile unless ``--profile``; a fresh data directory), warms it,
then drives ``--threads`` threads x ``--turns`` turns of JSON runs with ``--concurrency`` in
flight while ``py-spy record --gil`` samples the server, and writes

* ``<out>.txt`` — py-spy's raw collapsed stacks (feed them to any flame-graph tool), and
* ``<out>.md`` — the server's CPU per run (``/proc/<pid>/stat``) and the samples by area
  (the innermost frame that names an area) and by threadkeeper function.

``--profile postgres`` runs it on a fresh schema of the test server, ``--profile redis-mysql``
on a private Redis Stack and a fresh MySQL database (``tests.support``).
``--long N`` instead runs one thread of N turns and samples its last turns (what grows with
the thread). Reproduce the figures in docs/benchmarks.md with::

    uv tool run py-spy --version   # py-spy is a tool, not a project dependency
    .venv/bin/python benchmarks/profile_server.py --out docs/benchmarks/profile-after
    .venv/bin/python benchmarks/profile_server.py --long 240 --out docs/benchmarks/profile-long

(ptrace must be allowed: root, or ``kernel.yama.ptrace_scope=0``.)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.service_support import start_sink

QUESTIONS = (
    "Is dental treatment covered by my health insurance?",
    "How do I file a claim for my car accident?",
    "بیمه درمان تکمیلی من هزینه بستری را پوشش می‌دهد؟",
    "请问我的医疗保险是否包括住院费用？",
    "My name is Sara and I live in Tehran. What does travel insurance cover?",
)
AREAS = (  # the first that matches a frame, innermost frame first
    # py-spy names a frame by its path below the nearest directory without an __init__.py, so
    # LangGraph's namespace packages appear as pregel/…, channels/…, sqlite/aio.py (the
    # checkpointer and store), serde/…, base/… — not under langgraph/
    ("builtin model", ("adapters/builtin_model.py",)),
    ("token counting", ("domain/tokens.py", "domain/estimate.py", "tiktoken")),
    (
        "history hooks (trim, summary, truncation)",
        ("hooks/", "domain/history.py", "domain/summary.py"),
    ),
    (
        "memory (extraction, PII, store)",
        (
            "domain/extraction.py",
            "domain/pii.py",
            "domain/memory.py",
            "app/runs/remember.py",
            "app/memory.py",
            "langgraph/store",
        ),
    ),
    ("retrieval", ("adapters/knowledge/", "bm25s")),
    (
        "checkpoints and SQL",
        (
            "langgraph/checkpoint",
            "aiosqlite",
            "sqlite3",
            "sqlalchemy",
            "psycopg",
            "asyncmy",
            "adapters/",
            "sqlite/aio.py",
            "sqlite/base.py",
            "postgres/aio.py",
            "postgres/base.py",
            "mysql/",
            "serde/",
            "base/batch.py",
            "redis/",
            "redisvl/",
        ),
    ),
    (
        "telemetry",
        (
            "opentelemetry",
            "app/telemetry.py",
            "app/instrumentation.py",
            "app/metrics.py",
            "prometheus",
            "trace/",
            "metrics/_internal",
            "common/_internal",
            "_shared_internal/",
            "http/trace_exporter",
            "http/metric_exporter",
            "attributes/",
            "resources/",
            "_semconv.py",
            "asgi/__init__.py",
            "(_decorator.py",
        ),
    ),
    ("HTTP (Litestar, uvicorn)", ("litestar", "uvicorn", "h11", "httptools", "anyio")),
    ("pydantic", ("pydantic",)),
    (
        "LangGraph / LangChain runtime",
        (
            "langgraph/",
            "langchain_core",
            "langchain/",
            "langsmith",
            "pregel/",
            "channels/",
            "graph/",
            "managed/",
            "_internal/_runnable.py",
            "_internal/_config.py",
            "_internal/_future.py",
        ),
    ),
)
RUN_SERVICE = "threadkeeper run service"
OURS = ("app/", "hooks/", "domain/", "adapters/")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    head: list[str], port: int, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    """``python <head…> serve --port <port>`` with ``env``; the process and its URL."""
    server = subprocess.Popen(
        [sys.executable, *head, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server, f"http://127.0.0.1:{port}"


def wait_ready(url: str, seconds: float = 120) -> None:
    """Until ``/health/ready`` answers 200, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


TOKEN = "profile-service-token"
"""The service token of a server profile (postgres)."""


async def drive(url: str, threads: int, turns: int, concurrency: int) -> int:
    gate = asyncio.Semaphore(concurrency)
    headers = {"X-Tenant-Id": "bench", "Accept": "application/json"}
    if os.environ.get("THREADKEEPER_SERVICE_TOKEN") == TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as client:

        async def one(index: int) -> int:
            rng, thread = random.Random(index), f"p-{index}-{time.monotonic_ns()}"
            for turn in range(turns):
                async with gate:
                    response = await client.post(
                        f"/v1/threads/{thread}/runs",
                        json={"message": {"content": f"{rng.choice(QUESTIONS)} ({turn})"}},
                        headers={"X-User-Id": f"user-{index}"},
                    )
                    response.raise_for_status()
            return turns

        return sum(await asyncio.gather(*(one(i) for i in range(threads))))


def area_of(frames: list[str]) -> str:
    """The area of the innermost frame that names one; threadkeeper's own code (``app/``,
    ``domain/``) not named by an area is "threadkeeper run service", unless a frame outside it
    names one (the builtin model's ``domain/text.py`` is the builtin model's)."""
    ours = False
    for frame in reversed(frames):
        if "(app/cli/" in frame:  # serve's frame is under every stack, the event loop's too
            continue
        mine = "(app/" in frame or "(domain/" in frame
        for name, needles in AREAS:
            if any(needle in frame for needle in needles):
                return RUN_SERVICE if ours and not mine else name
        ours = ours or mine
    return RUN_SERVICE if ours else "other (event loop, threads)"


def ours_of(frames: list[str]) -> str | None:
    for frame in reversed(frames):
        match = re.match(r"(.*?) \((.*?):\d+\)", frame)
        if match and match.group(2).startswith(OURS) and not match.group(2).startswith("app/cli/"):
            return f"{match.group(2)} {match.group(1)}"
    return None


def breakdown(raw: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    total, areas, ours = 0, collections.Counter[str](), collections.Counter[str]()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        frames, n = stack.split(";"), int(count)
        total += n
        areas[area_of(frames)] += n
        if (mine := ours_of(frames)) is not None:
            ours[mine] += n
    return total, areas, ours


def area_table(total: int, areas: collections.Counter[str]) -> list[str]:
    return [
        "| area | share of samples |",
        "|---|---|",
        *(f"| {name} | {n / total:.1%} |" for name, n in areas.most_common()),
    ]


def rescan(raw: Path) -> None:
    """Rewrite the area table of ``raw``'s ``.md`` from its raw stacks with today's ``AREAS``."""
    total, areas, _ = breakdown(raw)
    page = raw.with_suffix(".md")
    lines = page.read_text().splitlines()
    start = lines.index("| area | share of samples |")
    end = lines.index("", start)
    note = f"(Areas as `benchmarks/profile_server.py --rescan {raw}` files them today.)"
    if lines[end + 1].startswith("(Areas as"):
        del lines[end + 1 : end + 3]
    lines[start:end] = [*area_table(total, areas), "", note]
    page.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="embedded")
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--long", type=int, default=0, help="one thread of this many turns")
    parser.add_argument("--seconds", type=float, default=20.0, help="py-spy's window")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--no-otlp",
        action="store_true",
        help="no OTLP endpoint (the benchmarks export spans and metrics to a loopback sink)",
    )
    parser.add_argument(
        "--rescan",
        type=Path,
        nargs="+",
        metavar="RAW",
        help="only re-file the samples of these raw stacks (.txt) into the area table of their .md",
    )
    args = parser.parse_args()
    if args.rescan:
        for raw in args.rescan:
            rescan(raw)
        return 0
    if args.out is None:
        parser.error("--out is required")
    with contextlib.ExitStack() as stack:
        if args.profile not in ("embedded", "postgres", "redis-mysql"):
            parser.error(
                "--profile: embedded, postgres (a fresh schema of the test server) or "
                "redis-mysql (a private Redis Stack and a fresh MySQL database)"
            )
        given = {"postgres": "THREADKEEPER_POSTGRES_URL", "redis-mysql": "THREADKEEPER_MYSQL_URL"}
        if args.profile in given and given[args.profile] not in os.environ:
            from tests.support.servers import storage  # the tests' fresh storage per profile

            servers, _ = stack.enter_context(storage(args.profile))
            os.environ.update(servers.env(), THREADKEEPER_SERVICE_TOKEN=TOKEN)
        return profile(args)


def profile(args: argparse.Namespace) -> int:
    py_spy = shutil.which("py-spy") or str(Path.home() / ".local/bin/py-spy")
    port, data = free_port(), tempfile.mkdtemp(prefix="tk-profile-")
    env = {**os.environ, "THREADKEEPER_PROFILE": args.profile, "THREADKEEPER_DATA_DIR": data}
    sink = None if args.no_otlp else start_sink(Path(data))
    if sink is not None:  # as the benchmarks run it: tracing and metrics exported
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url, OTEL_SERVICE_NAME="threadkeeper-profile")
    server, url = start_server(["-m", "threadkeeper.app.cli"], port, env)
    try:
        wait_ready(url)
        asyncio.run(drive(url, 5, 3, 5))  # warm: imports, caches, the first tenant index
        out = str(args.out.with_suffix(".txt"))
        record = f"{py_spy} record -p {server.pid} -d {int(args.seconds)} -r 200 --gil -f raw"
        if args.long:  # one thread; py-spy samples its last turns (what grows with it)
            threads, turns, concurrency = 1, args.long, 1
            probe = time.perf_counter()
            asyncio.run(drive(url, 1, 10, 1))
            wait = (time.perf_counter() - probe) / 10 * turns * 0.7
        else:
            threads, turns, concurrency, wait = args.threads, args.turns, args.concurrency, 0.5
        spy = subprocess.Popen(
            f"sleep {wait:.1f}; exec {record} -o {out} --nonblocking",
            shell=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        before, started = cpu_seconds(server.pid), time.perf_counter()
        runs = asyncio.run(drive(url, threads, turns, concurrency))
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server.pid) - before
        spy.wait(timeout=args.seconds + wait + 60)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        if sink is not None:
            sink.stop()
        shutil.rmtree(data, ignore_errors=True)
    total, areas, ours = breakdown(args.out.with_suffix(".txt"))
    lines = [
        f"# py-spy profile: {args.profile}, "
        + (
            f"one thread of {args.long} turns (its last turns sampled)"
            if args.long
            else f"{threads} threads x {turns} turns, {concurrency} in flight"
        ),
        "",
        f"Command: `.venv/bin/python benchmarks/profile_server.py {' '.join(sys.argv[1:])}`"
        + ("" if args.no_otlp else " (spans and metrics exported over OTLP to a loopback sink)"),
        "",
        f"{runs} runs in {elapsed:.1f} s ({runs / elapsed:.1f} runs/s); server CPU "
        f"{cpu / runs * 1000:.1f} ms per run; {total} samples (`--gil`: the thread holding "
        "the GIL).",
        "",
        *area_table(total, areas),
        "",
        "Innermost threadkeeper function on the stack (top 25):",
        "",
        "| function | share |",
        "|---|---|",
        *(f"| `{name}` | {n / total:.1%} |" for name, n in ours.most_common(25)),
        "",
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
