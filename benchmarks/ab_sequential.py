"""Two trees side by side through real servers, one run at a time: ``threadkeeper serve`` from
this tree and from ``--other`` (a worktree; its packages go first on the server's
``PYTHONPATH``), each on its own fresh storage of ``--profile`` (a fresh schema on postgres)
with tracing on into a loopback OTLP sink, as the service arms run them. The two servers take
turns run by run — which goes first alternates — on new threads of ``--turns`` turns, so both
see the same minute of a busy machine. Prints each tree's median latency and server CPU per run
(``/proc/<pid>/task/*/schedstat``) and the differences; with ``--sse`` the runs are streamed
and the time to the first token is printed too. ``--other .`` with ``--other-env KEY=VALUE``
compares this tree with itself under another environment (``OTEL_TRACES_EXPORTER=none``: what
tracing costs)::

    git worktree add /tmp/hp/base <rev>
    /work/benchvenv/bin/python benchmarks/ab_sequential.py --other /tmp/hp/base --profile postgres
    /work/benchvenv/bin/python benchmarks/ab_sequential.py --other /tmp/hp/base --profile embedded \
        --sse
    /work/benchvenv/bin/python benchmarks/ab_sequential.py --other . --profile embedded \
        --other-env OTEL_TRACES_EXPORTER=none

(any environment with the bench group). docs/benchmarks.md ("The round prunes its own
thread", "SSE: one write per batch of events") has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.service_support import (
    TOKEN,
    ServerProcess,
    cpu_seconds,
    question,
    start_sink,
    start_threadkeeper,
)
from tests.support.servers import storage  # the tests' fresh storage per profile

PACKAGES = ("domain", "app", "adapters", "hooks")


def start(
    profile: str,
    servers: Any,
    tree: Path | None,
    sink: ServerProcess,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """``threadkeeper serve`` of ``tree`` (``None``: this one), ``env`` over the benchmark's."""
    work = Path(tempfile.mkdtemp())
    extra = dict(env or {})
    if tree is not None:
        paths = [str(tree / "packages" / name / "src") for name in PACKAGES]
        before = os.environ.get("PYTHONPATH")
        extra["PYTHONPATH"] = os.pathsep.join([*paths, *([before] if before else [])])
    return start_threadkeeper(profile, servers, work, sink, extra)


async def one_run(
    client: httpx.AsyncClient, server: ServerProcess, thread: str, turn: int, sse: bool = False
) -> tuple[float, float, float]:
    """(latency, server CPU, time to the first token: NaN for JSON) of one run, in ms."""
    url, body = f"{server.url}/v1/threads/{thread}/runs", {"message": {"content": question(turn)}}
    cpu = cpu_seconds(server.pid)
    start_at = time.perf_counter()
    first: float | None = None
    if sse:
        async with client.stream(
            "POST", url, json=body, headers={"Accept": "text/event-stream"}
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if first is None and line == "event: messages":
                    first = (time.perf_counter() - start_at) * 1e3
    else:
        response = await client.post(url, json=body, headers={"Accept": "application/json"})
        response.raise_for_status()
    latency = time.perf_counter() - start_at
    return (
        latency * 1e3,
        (cpu_seconds(server.pid) - cpu) * 1e3,
        float("nan") if first is None else first,
    )


async def drive(
    sides: dict[str, ServerProcess], threads: int, turns: int, sse: bool = False
) -> dict[str, list[tuple[float, float, float]]]:
    headers = {"X-Tenant-Id": "acme", "X-User-Id": "user-1", "Authorization": f"Bearer {TOKEN}"}
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        for server in sides.values():  # warm both
            for turn in range(20):
                await one_run(client, server, f"warm-{turn % 4}", turn, sse)
        order = list(sides)
        for index in range(threads * turns):
            thread, turn = f"t{index // turns}", index % turns
            for name in order if index % 2 == 0 else reversed(order):
                samples[name].append(await one_run(client, sides[name], thread, turn, sse))
    return samples


def measure(
    profile: str,
    other: Path,
    threads: int,
    turns: int,
    sse: bool = False,
    other_env: dict[str, str] | None = None,
) -> None:
    sink = start_sink(Path(tempfile.mkdtemp()))
    same = other == Path(__file__).resolve().parents[1]  # this tree, under other_env
    other_name = f"{other}" + (f" {other_env}" if other_env else "")
    with storage(profile) as (mine_storage, _), storage(profile) as (other_storage, _):
        sides = {
            "this tree": start(profile, mine_storage, None, sink),
            other_name: start(profile, other_storage, None if same else other, sink, other_env),
        }
        try:
            samples = asyncio.run(drive(sides, threads, turns, sse))
        finally:
            for server in sides.values():
                server.stop()
            sink.stop()
    medians = {
        name: tuple(statistics.median(run[i] for run in runs) for i in range(3))
        for name, runs in samples.items()
    }
    for name, (latency, cpu, first) in medians.items():
        print(
            f"{name}: {len(samples[name])} runs, p50 {latency:.2f} ms, CPU {cpu:.2f} ms per run"
            + (f", first token p50 {first:.2f} ms" if sse else "")
        )
    (mine_lat, mine_cpu, mine_first), (other_lat, other_cpu, other_first) = medians.values()
    print(
        f"this tree - other: latency {mine_lat - other_lat:+.2f} ms,"
        f" CPU {mine_cpu - other_cpu:+.2f} ms"
        + (f", first token {mine_first - other_first:+.2f} ms" if sse else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, required=True, help="a worktree of another tree")
    parser.add_argument("--profile", default="postgres")
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--sse", action="store_true", help="streamed runs (and first token)")
    parser.add_argument(
        "--other-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set for the other server only (repeatable)",
    )
    args = parser.parse_args()
    other_env = dict(item.split("=", 1) for item in args.other_env)
    measure(args.profile, args.other.resolve(), args.threads, args.turns, args.sse, other_env)


if __name__ == "__main__":
    main()
