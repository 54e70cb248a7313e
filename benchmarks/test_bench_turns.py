"""Flat turns through the service: a turn late in a thread costs what an early one does.

Through the real server process of each profile (``service_support``: ``threadkeeper serve``,
builtin model, default hooks, tracing on; embedded and postgres, + redis-mysql at full size),
``turn_threads`` threads per profile each get ``turns`` (+ 2) JSON runs, one at a time, interleaved
turn by turn across threads and profiles. Per turn: the client's latency and the server
process's CPU (every thread, ``/proc/<pid>/task/*/schedstat``, read around the run).

The figure at turn *t* is the median over the threads' turns *t*-2 … *t*+2 (a single turn of
one thread is too noisy to gate on). Gates (``extra_info["gate_max"]``, on every profile):
latency and CPU per turn at the last mark ÷ the first ≤ 1.2 — reduced: turn 50 ÷ turn 5;
full: turn 200 ÷ turn 10 (figures at 10, 50, 100 and 200 reported).

The first mark's figure in the gate comes from ``turn_threads`` **control threads** started
when the long threads are ``last - first`` turns in, so that each control thread's turn
*first* ± 2 runs right after a long thread's turn *last* ± 2: both sides of the ratio are
measured in the same minute, interleaved, and a drift of the machine (another process, the
shared database's vacuum) between the start of the campaign and its end cannot pass for a
turn getting dearer. (Measured the old way, against the long threads' own early turns minutes
before, the latency ratio spread 0.82–1.59 across 11 runs on an idle machine; that ratio is
still reported, ``…_same_threads``.) The per-turn medians of the long threads are kept in
``extra_info["series"]`` for the chart (``report.py --charts``).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psutil", reason="the service arms need the bench group (tox -e bench)")

from benchmarks.conftest import ServiceSize, record_arm
from benchmarks.service_support import Fleet, median, question, warm

FLAT_MAX_RATIO = 1.2
FULL_FLAT_UNMET = (
    "issue 12 open: reported, not gated, at 200 turns — the ratio has moved ±0.15 between full "
    "runs (2026-12-04: CPU 1.32 / 1.18 / 1.20 on embedded / postgres / redis-mysql; 2026-12-05, "
    "after the turn index and the other passes over the history: 1.09 / 1.12 / 1.12); what a late "
    "turn still does more is LangChain's pass over the whole state per model call "
    "(create_agent's invalid-tool-call patch) and the window's own size (docs/benchmarks.md, "
    "'The window from a kept turn index')"
)
"""Why the flat-turn gates do not bind at full size yet (``report.py``: ``gate_unmet``); they
bind at the reduced size, in CI."""
MARK_HALF_WIDTH = 2
REDUCED_LAST_MARK = 50
"""The reduced size's last mark: up to it the gates bind."""
WARMUP_RUNS = 3


def _at(per_turn: list[list[float]], mark: int) -> float:
    """Median over threads of turns ``mark`` ± 2 (1-based turns)."""
    low, high = max(1, mark - MARK_HALF_WIDTH), min(len(per_turn[0]), mark + MARK_HALF_WIDTH)
    return median([thread[t - 1] for thread in per_turn for t in range(low, high + 1)])


def test_service_turns(benchmark, service_fleet: Fleet, service_size: ServiceSize) -> None:  # type: ignore[no-untyped-def]
    targets = [service_fleet.threadkeeper(p) for p in service_size.profiles]
    for target in targets:
        service_fleet.run(warm(target, WARMUP_RUNS, stream=False))
    # two turns past the last mark, so its window is centred as the others' are
    turns, k = service_size.turns + MARK_HALF_WIDTH, service_size.turn_threads
    first, last = service_size.turn_marks[0], service_size.turn_marks[-1]
    # the control threads start when the long ones are ``last - first`` turns in: their turns
    # around ``first`` run interleaved with the long threads' turns around ``last``
    offset = last - first
    control_turns = first + MARK_HALF_WIDTH
    latency = {t.profile: [[0.0] * turns for _ in range(k)] for t in targets}
    cpu = {t.profile: [[0.0] * turns for _ in range(k)] for t in targets}
    control_latency = {t.profile: [[0.0] * control_turns for _ in range(k)] for t in targets}
    control_cpu = {t.profile: [[0.0] * control_turns for _ in range(k)] for t in targets}

    async def campaign() -> None:
        threads = {t.profile: [await t.new_thread() for _ in range(k)] for t in targets}
        controls = {t.profile: [await t.new_thread() for _ in range(k)] for t in targets}
        for turn in range(turns):
            for target in targets:
                for j in range(k):
                    for thread, at, lat, used in (
                        (threads[target.profile][j], turn, latency, cpu),
                        (controls[target.profile][j], turn - offset, control_latency, control_cpu),
                    ):
                        if not 0 <= at < len(lat[target.profile][j]):
                            continue
                        before = target.cpu()
                        timing = await target.run(thread, question(at), stream=False)
                        used[target.profile][j][at] = target.cpu() - before
                        lat[target.profile][j][at] = timing.latency

    benchmark.group = "service campaigns"
    benchmark.extra_info.update(role="measurement", turns=service_size.turns, threads=k)
    benchmark.pedantic(lambda: service_fleet.run(campaign()), rounds=1, iterations=1)

    for target in targets:
        lat, used = latency[target.profile], cpu[target.profile]
        control_lat, control_used = control_latency[target.profile], control_cpu[target.profile]
        info: dict[str, Any] = {
            "target": target.kind,
            "profile": target.profile,
            "mode": "JSON",
            "turns": service_size.turns,
            "threads": k,
        }
        for mark in service_size.turn_marks:
            info[f"latency_ms_turn{mark}"] = round(_at(lat, mark) * 1e3, 3)
            info[f"cpu_ms_turn{mark}"] = round(_at(used, mark) * 1e3, 3)
        info[f"control_latency_ms_turn{first}"] = round(_at(control_lat, first) * 1e3, 3)
        info[f"control_cpu_ms_turn{first}"] = round(_at(control_used, first) * 1e3, 3)
        latency_ratio = f"latency_turn{last}_over_turn{first}"
        cpu_ratio = f"cpu_turn{last}_over_turn{first}"
        # gated: against the control threads' turns, measured at the same time
        info[latency_ratio] = round(_at(lat, last) / _at(control_lat, first), 3)
        info[cpu_ratio] = round(_at(used, last) / _at(control_used, first), 3)
        # reported: against the same threads' own early turns, measured minutes before
        info[f"{latency_ratio}_same_threads"] = round(_at(lat, last) / _at(lat, first), 3)
        info[f"{cpu_ratio}_same_threads"] = round(_at(used, last) / _at(used, first), 3)
        info["rss_mb"] = round(target.rss() / 2**20, 1)
        info["gate_max"] = {latency_ratio: FLAT_MAX_RATIO, cpu_ratio: FLAT_MAX_RATIO}
        if last > REDUCED_LAST_MARK:
            info["gate_unmet"] = {cpu_ratio: FULL_FLAT_UNMET, latency_ratio: FULL_FLAT_UNMET}
        info["series"] = {
            "latency_ms_per_turn": [
                round(median([thread[t] for thread in lat]) * 1e3, 3) for t in range(turns)
            ],
            "cpu_ms_per_turn": [
                round(median([thread[t] for thread in used]) * 1e3, 3) for t in range(turns)
            ],
        }
        samples = [value for thread in lat for value in thread]
        record_arm(f"service turns, {service_size.turns} turns", target.name, samples, info)
