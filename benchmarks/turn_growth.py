"""What a turn late in a thread costs that an early one does not, in process, and where: the
whole service through its HTTP API in this process (``httpx.ASGITransport``, the app's own
lifespan; no socket, tracing off), ``--threads`` threads driven to ``--late`` turns, then their
next ``--rounds`` turns interleaved run by run with turns 1-5 of fresh threads. Prints the
median CPU per run of each side (``getrusage``: this process, every thread) and their ratio,
and per function of the run's passes over the history, CPU per run on each side (thread CPU
time accumulated around each call; calls nest nowhere, so none is counted twice)::

    .venv/bin/python benchmarks/turn_growth.py
    W=<worktree of another tree>
    PYTHONPATH=$W/packages/domain/src:$W/packages/app/src:$W/packages/adapters/src:\\
$W/packages/hooks/src .venv/bin/python benchmarks/turn_growth.py

docs/benchmarks.md ("Flat turns at the reduced size") has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.service_support import question

_CPU: collections.Counter[tuple[str, str]] = collections.Counter()
_CALLS: collections.Counter[tuple[str, str]] = collections.Counter()
_PHASE = ["build"]


def _accumulate(owner: Any, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def measured(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            _CPU[_PHASE[0], label] += time.thread_time() - started
            _CALLS[_PHASE[0], label] += 1

    setattr(owner, name, measured)


def _install() -> None:
    """Accumulators around the passes over the history a run makes (module attributes are
    looked up at call time, so patching them reaches their callers)."""
    from langgraph.channels import binop

    from threadkeeper.adapters import builtin_model, serde
    from threadkeeper.app.runs import outcome
    from threadkeeper.domain import history

    _accumulate(serde.MemoSerializer, "loads_typed", "checkpoint decode (MemoSerializer)")
    _accumulate(serde.MemoSerializer, "dumps_typed", "checkpoint encode (MemoSerializer)")
    _accumulate(binop.BinaryOperatorAggregate, "update", "channel merges (add_messages)")
    _accumulate(history.TurnWindowPolicy, "window", "windows (summarize + trim)")
    _accumulate(builtin_model, "estimate_input_tokens", "builtin model: input estimate")
    _accumulate(builtin_model, "_compose", "builtin model: composing the answer")
    _accumulate(outcome, "order_since", "run record: the thread's order (since the windows)")
    _accumulate(outcome, "encode_window", "run record: the window as ranges")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def campaign(
    run: Callable[[str, int], Awaitable[float]], threads: int, late: int, rounds: int
) -> dict[str, list[float]]:
    """``threads`` threads driven to ``late`` turns, then their next ``rounds`` turns each
    followed by a turn 1-5 of a fresh thread; what ``run`` measured, by side."""
    for turn in range(late):
        for j in range(threads):
            await run(f"long-{j}", turn)
    costs: dict[str, list[float]] = {"late": [], "early": []}
    for turn in range(rounds):
        for j in range(threads):
            _PHASE[0] = "late"
            costs["late"].append(await run(f"long-{j}", late + turn))
            _PHASE[0] = "early"  # turns 1-5 of a fresh thread, then another
            costs["early"].append(await run(f"short-{j}-{turn // 5}", turn % 5))
    _PHASE[0] = "done"
    return costs


async def measure(threads: int, late: int, rounds: int) -> None:
    from threadkeeper.app.application import create_app
    from threadkeeper.app.config import Settings

    app = create_app(Settings.of(profile="embedded", data_dir=f"{tempfile.mkdtemp()}/data"))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.lifespan(),
        httpx.AsyncClient(transport=transport, base_url="http://tk", timeout=60) as client,
    ):
        client.headers.update({"X-Tenant-Id": "acme", "X-User-Id": "user-1"})

        async def run(thread: str, turn: int) -> float:
            started = _cpu()
            response = await client.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": question(turn)}},
                headers={"Accept": "application/json"},
            )
            assert response.status_code == 200, response.text
            return _cpu() - started

        costs = await campaign(run, threads, late, rounds)
    late_ms, early_ms = (statistics.median(costs[p]) * 1e3 for p in ("late", "early"))
    print(f"CPU per run, median: turn {late + 1}-{late + rounds} {late_ms:.2f} ms, turns 1-5 ")
    print(f"{early_ms:.2f} ms, ratio {late_ms / early_ms:.3f} ({threads} x {rounds} runs each)")
    print("\n| late − early | late | early | calls per run | pass |\n|---|---|---|---|---|")
    n_late, n_early = len(costs["late"]), len(costs["early"])
    for label in sorted({label for _, label in _CPU}, key=lambda x: -_CPU["late", x]):
        late_f = _CPU["late", label] / n_late * 1e3
        early_f = _CPU["early", label] / n_early * 1e3
        calls = _CALLS["late", label] / n_late
        print(f"| {late_f - early_f:+.3f} | {late_f:.3f} | {early_f:.3f} | {calls:.1f} | {label} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=12)
    parser.add_argument("--late", type=int, default=48, help="turns before the late side")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    _install()
    asyncio.run(measure(args.threads, args.late, args.rounds))


if __name__ == "__main__":
    main()
