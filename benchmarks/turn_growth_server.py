"""A late turn against an early one through a real server process, run by run:
``threadkeeper serve`` on the embedded profile (fresh data; tracing on into a loopback OTLP
sink, as the service arms run it), ``--threads`` threads driven to ``--late`` turns, then their
next ``--rounds`` turns each interleaved with turns 1-5 of fresh threads — so both sides run in
the same minute (``turn_growth.campaign``). Prints the median server CPU per run of each side
(``/proc/<pid>/task/*/schedstat``) and their ratio::

    /work/benchvenv/bin/python benchmarks/turn_growth_server.py            # this tree
    W=<worktree of another tree>
    PYTHONPATH=$W/packages/domain/src:$W/packages/app/src:$W/packages/adapters/src:\\
$W/packages/hooks/src /work/benchvenv/bin/python benchmarks/turn_growth_server.py

(any environment with the bench group: ``psutil``). ``benchmarks/turn_growth.py`` splits the
same comparison by pass, in process. docs/benchmarks.md ("Embedded: each message once") has the
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.service_support import question, start_sink, start_threadkeeper
from benchmarks.turn_growth import campaign


async def measure(profile: str, threads: int, late: int, rounds: int) -> None:
    work = Path(tempfile.mkdtemp())
    sink = start_sink(work)
    server = start_threadkeeper(profile, None, work, sink)
    headers = {"X-Tenant-Id": "acme", "X-User-Id": "user-1"}
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60, headers=headers) as client:

            async def run(thread: str, turn: int) -> float:
                before = server.cpu()
                response = await client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": question(turn)}},
                    headers={"Accept": "application/json"},
                )
                assert response.status_code == 200, response.text
                return server.cpu() - before

            costs = await campaign(run, threads, late, rounds)
    finally:
        server.stop()
        sink.stop()
    late_ms, early_ms = (statistics.median(costs[side]) * 1e3 for side in ("late", "early"))
    print(
        f"{profile}: server CPU per run, median: turns {late + 1}-{late + rounds} "
        f"{late_ms:.2f} ms, turns 1-5 {early_ms:.2f} ms, ratio {late_ms / early_ms:.3f} "
        f"({threads} x {rounds} runs each)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--late", type=int, default=198, help="turns before the late side")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(measure("embedded", args.threads, args.late, args.rounds))


if __name__ == "__main__":
    main()
