"""Two trees side by side through real servers, one run at a time: ``threadkeeper serve`` from
this tree and from ``--other`` (a worktree; its packages go first on the server's
``PYTHONPATH``), each on its own fresh storage of ``--profile`` (a fresh schema on postgres)
with tracing on into a loopback OTLP sink, as the service arms run them. The two servers take
turns run by run — which goes first alternates — on new threads of ``--turns`` turns, so both
see the same minute of a busy machine. Prints each tree's median latency and server CPU per run
(``/proc/<pid>/task/*/schedstat``) and the differences::

    git worktree add /tmp/hp/base <rev>
    /work/benchvenv/bin/python benchmarks/ab_sequential.py --other /tmp/hp/base --profile postgres

(any environment with the bench group). docs/benchmarks.md ("The round prunes its own
thread") has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
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

PACKAGES = ("domain", "app", "adapters", "hooks")


@contextlib.contextmanager
def storage(profile: str) -> Iterator[Any]:
    if profile == "embedded":
        yield None
        return
    from tests.api.conftest import Servers

    if profile == "postgres":
        from tests.support.postgres import fresh_schema

        with fresh_schema() as url:
            yield Servers(postgres_url=url)
        return
    from tests.support.mysql import fresh_database
    from tests.support.redis_stack import private_redis

    with private_redis() as redis, fresh_database() as mysql:
        yield Servers(redis_url=redis.url, mysql_url=mysql)


def start(profile: str, servers: Any, tree: Path | None, sink: ServerProcess) -> ServerProcess:
    work = Path(tempfile.mkdtemp())
    before = os.environ.get("PYTHONPATH")
    if tree is not None:
        paths = [str(tree / "packages" / name / "src") for name in PACKAGES]
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *([before] if before else [])])
    try:
        return start_threadkeeper(profile, servers, work, sink)
    finally:
        if tree is not None:
            if before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = before


async def one_run(
    client: httpx.AsyncClient, server: ServerProcess, thread: str, turn: int
) -> tuple[float, float]:
    """(latency, server CPU) of one JSON run, in ms."""
    cpu = cpu_seconds(server.pid)
    start_at = time.perf_counter()
    response = await client.post(
        f"{server.url}/v1/threads/{thread}/runs",
        json={"message": {"content": question(turn)}},
        headers={"Accept": "application/json"},
    )
    latency = time.perf_counter() - start_at
    response.raise_for_status()
    return latency * 1e3, (cpu_seconds(server.pid) - cpu) * 1e3


async def drive(
    sides: dict[str, ServerProcess], threads: int, turns: int
) -> dict[str, list[tuple[float, float]]]:
    headers = {"X-Tenant-Id": "acme", "X-User-Id": "user-1", "Authorization": f"Bearer {TOKEN}"}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        for server in sides.values():  # warm both
            for turn in range(20):
                await one_run(client, server, f"warm-{turn % 4}", turn)
        order = list(sides)
        for index in range(threads * turns):
            thread, turn = f"t{index // turns}", index % turns
            for name in order if index % 2 == 0 else reversed(order):
                samples[name].append(await one_run(client, sides[name], thread, turn))
    return samples


def measure(profile: str, other: Path, threads: int, turns: int) -> None:
    sink = start_sink(Path(tempfile.mkdtemp()))
    with storage(profile) as mine_storage, storage(profile) as other_storage:
        sides = {
            "this tree": start(profile, mine_storage, None, sink),
            str(other): start(profile, other_storage, other, sink),
        }
        try:
            samples = asyncio.run(drive(sides, threads, turns))
        finally:
            for server in sides.values():
                server.stop()
            sink.stop()
    medians = {
        name: (
            statistics.median(lat for lat, _ in runs),
            statistics.median(cpu for _, cpu in runs),
        )
        for name, runs in samples.items()
    }
    for name, (latency, cpu) in medians.items():
        print(f"{name}: {len(samples[name])} runs, p50 {latency:.2f} ms, CPU {cpu:.2f} ms per run")
    (mine_lat, mine_cpu), (other_lat, other_cpu) = medians.values()
    print(
        f"this tree - other: latency {mine_lat - other_lat:+.2f} ms,"
        f" CPU {mine_cpu - other_cpu:+.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, required=True, help="a worktree of another tree")
    parser.add_argument("--profile", default="postgres")
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    measure(args.profile, args.other.resolve(), args.threads, args.turns)


if __name__ == "__main__":
    main()
