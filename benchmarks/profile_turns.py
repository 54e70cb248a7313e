"""What a late turn costs that an early one does not: py-spy over one ``threadkeeper serve``,
late turns of a long thread against early turns of short threads, back to back.

Starts the server (``--profile``; embedded, postgres or redis-mysql, each on fresh storage as
the benchmarks make it; spans and metrics exported to a loopback OTLP sink as the benchmarks
run it), drives one thread to ``--turns`` turns and four threads to 8, then samples (``py-spy
record --gil``, 500 Hz) 100 more turns of the long thread, then 4 x 25 turns of the short ones,
and writes

* ``<out>-long.txt`` / ``<out>-short.txt`` — py-spy's collapsed stacks of each phase;
* ``<out>.md`` — the server's CPU per run in each phase (``/proc/<pid>/stat``), the thread's
  stored bytes by kind (``GET /v1/threads/{id}/storage``), the full garbage collections seen in
  the server with their pauses (``--gc``: the server runs under a ``gc.callbacks`` probe), and
  the functions whose inclusive samples per run grew the most (ms of GIL-holding samples per
  run, long − short).

Reproduce the figures in docs/benchmarks.md ("Flat turns") with::

    uv tool run py-spy --version   # py-spy is a tool, not a project dependency
    .venv/bin/python benchmarks/profile_turns.py --profile embedded --gc \
        --out docs/benchmarks/profile-turns-embedded-after
    .venv/bin/python benchmarks/profile_turns.py --profile redis-mysql --turns 120 \
        --out docs/benchmarks/profile-turns-redis-mysql-after

(ptrace must be allowed; postgres and redis-mysql need the servers the integration suite uses.)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.profile_server import QUESTIONS, cpu_seconds, free_port, start_server, wait_ready
from benchmarks.service_support import TOKEN, start_sink

SAMPLE_HZ = 500
LONG_TURNS, SHORT_THREADS, SHORT_START, SHORT_TURNS = 100, 4, 8, 25
_PROBE = r"""
import gc, json, os, runpy, sys, threading, time
pauses, started = [], [0.0]
def probe(phase, info):
    if info["generation"] != 2:
        return
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        pauses.append(round((time.perf_counter() - started[0]) * 1000, 1))
gc.callbacks.append(probe)
def dump():
    while True:
        time.sleep(1)
        with open(os.environ["TK_GC_OUT"], "w") as out:
            json.dump({"pauses_ms": pauses, "frozen": gc.get_freeze_count()}, out)
threading.Thread(target=dump, daemon=True).start()
sys.argv = ["threadkeeper", *sys.argv[1:]]
runpy.run_module("threadkeeper.app.cli", run_name="__main__")
"""


def inclusive(raw: Path) -> tuple[int, collections.Counter[str]]:
    """Samples in all, and per function the samples it is on the stack of (once per stack)."""
    total, counts = 0, collections.Counter[str]()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        seen = set()
        for frame in stack.split(";"):
            match = re.match(r"(.*?) \((.*?):\d+\)", frame)
            seen.add(f"{match.group(2)} {match.group(1)}" if match else frame)
        for key in seen:
            counts[key] += int(n)
    return total, counts


@contextlib.contextmanager
def storage_env(profile: str, data: Path) -> Any:
    env = {**os.environ, "THREADKEEPER_PROFILE": profile, "THREADKEEPER_DATA_DIR": str(data)}
    with contextlib.ExitStack() as stack:
        if profile == "postgres":
            from tests.support.postgres import fresh_schema

            env["THREADKEEPER_POSTGRES_URL"] = stack.enter_context(fresh_schema())
        elif profile == "redis-mysql":
            from tests.api.conftest import Servers
            from tests.support.mysql import fresh_database
            from tests.support.redis_stack import private_redis

            redis = stack.enter_context(private_redis())
            servers = Servers(redis_url=redis.url, mysql_url=stack.enter_context(fresh_database()))
            env.update(servers.env())
        if profile != "embedded":
            env["THREADKEEPER_SERVICE_TOKEN"] = TOKEN
        yield env


async def drive(client: httpx.AsyncClient, thread: str, turns: range, rng: random.Random) -> None:
    for turn in turns:
        response = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": f"{rng.choice(QUESTIONS)} ({turn})"}},
        )
        response.raise_for_status()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="embedded")
    parser.add_argument("--turns", type=int, default=200, help="the long thread's turns first")
    parser.add_argument("--gc", action="store_true", help="probe the server's full collections")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path.home() / ".local/bin/py-spy")
    data = Path(tempfile.mkdtemp(prefix="tk-turns-"))
    gc_out = data / "gc.json"
    report: list[str] = []
    with storage_env(args.profile, data) as env:
        sink = start_sink(data)
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url, OTEL_SERVICE_NAME="threadkeeper-profile")
        env["TK_GC_OUT"] = str(gc_out)
        head = ["-c", _PROBE] if args.gc else ["-m", "threadkeeper.app.cli"]
        server, url = start_server(head, free_port(), env)
        try:
            wait_ready(url)
            report = asyncio.run(campaign(args, url, server.pid, py_spy))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
            sink.stop()
    if args.gc and gc_out.exists():
        probe = json.loads(gc_out.read_text())
        pauses = probe["pauses_ms"]
        report[3:3] = [
            f"Full garbage collections in the server: {len(pauses)}, pauses "
            f"{', '.join(f'{p:g}' for p in pauses)} ms ({probe['frozen']} objects frozen "
            "at start-up).",
            "",
        ]
    shutil.rmtree(data, ignore_errors=True)
    args.out.with_suffix(".md").write_text("\n".join(report))
    print("\n".join(report))
    return 0


async def campaign(args: argparse.Namespace, url: str, pid: int, py_spy: str) -> list[str]:
    headers = {"X-Tenant-Id": "bench", "X-User-Id": "profile-user", "Accept": "application/json"}
    if args.profile != "embedded":
        headers["Authorization"] = f"Bearer {TOKEN}"
    rng, stamp = random.Random(1), time.monotonic_ns()
    long_thread = f"long-{stamp}"
    shorts = [f"short{i}-{stamp}" for i in range(SHORT_THREADS)]
    phases: dict[str, tuple[float, int, Path]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as client:
        await drive(client, long_thread, range(args.turns), rng)
        for thread in shorts:
            await drive(client, thread, range(SHORT_START), rng)
        for label in ("long", "short"):
            raw = args.out.with_name(f"{args.out.name}-{label}.txt")
            spy = await asyncio.create_subprocess_exec(
                *(py_spy, "record", "-p", str(pid), "-r", str(SAMPLE_HZ), "--gil"),
                *("-f", "raw", "-o", str(raw), "--nonblocking"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await asyncio.sleep(1.0)
            before = cpu_seconds(pid)
            if label == "long":
                await drive(client, long_thread, range(args.turns, args.turns + LONG_TURNS), rng)
                runs = LONG_TURNS
            else:
                for thread in shorts:
                    await drive(client, thread, range(SHORT_START, SHORT_START + SHORT_TURNS), rng)
                runs = SHORT_THREADS * SHORT_TURNS
            cpu = cpu_seconds(pid) - before
            await asyncio.sleep(0.3)
            spy.send_signal(signal.SIGINT)
            await asyncio.wait_for(spy.wait(), timeout=60)
            phases[label] = (cpu / runs * 1000, runs, raw)
        weights = {}
        for label, thread in (("long", long_thread), ("short", shorts[0])):
            weights[label] = (await client.get(f"/v1/threads/{thread}/storage")).json()["bytes"]
    per_sample = 1000 / SAMPLE_HZ
    rows = {}
    for label, (_, runs, raw) in phases.items():
        _, counts = inclusive(raw)
        rows[label] = {k: v * per_sample / runs for k, v in counts.items()}
    grown = sorted(
        ((rows["long"].get(k, 0) - rows["short"].get(k, 0), k) for k in rows["long"]),
        reverse=True,
    )
    skip = ("asyncio/", "<frozen runpy>", "app/cli/", "threading.py", "<string>")
    return [
        f"# Late turns against early ones: {args.profile}",
        "",
        f"Command: `.venv/bin/python benchmarks/profile_turns.py --profile {args.profile} "
        f"--turns {args.turns}{' --gc' if args.gc else ''} --out {args.out}` (spans and "
        "metrics exported over OTLP to a loopback sink)",
        f"Server CPU per run: turns {args.turns + 1}-{args.turns + LONG_TURNS} of one thread "
        f"**{phases['long'][0]:.1f} ms**; turns {SHORT_START + 1}-{SHORT_START + SHORT_TURNS} "
        f"of {SHORT_THREADS} threads **{phases['short'][0]:.1f} ms** "
        f"({phases['long'][0] / phases['short'][0]:.2f}x).",
        "",
        "Stored bytes of the long thread / a short one (`GET /v1/threads/{id}/storage`): "
        + ", ".join(
            f"{kind} {weights['long'][kind]:,} / {weights['short'][kind]:,}"
            for kind in weights["long"]
            if weights["long"][kind] or weights["short"][kind]
        )
        + ".",
        "",
        "Functions whose samples per run grew the most (inclusive, ms of GIL-holding samples "
        f"per run at {SAMPLE_HZ} Hz; the raw stacks are beside this file):",
        "",
        "| long − short | long | short | function |",
        "|---|---|---|---|",
        *(
            f"| {d:+.2f} | {rows['long'].get(k, 0):.2f} | {rows['short'].get(k, 0):.2f} | `{k}` |"
            for d, k in [g for g in grown if not g[1].startswith(skip)][:30]
        ),
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
