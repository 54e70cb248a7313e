"""The service over real HTTP against the same agent in process and against the Agent Server.

Arms (``service_support``; sizes in ``conftest.SERVICE_SIZES``):

* **threadkeeper HTTP (profile)** — the real server process (``threadkeeper serve``, uvicorn,
  builtin model, the profile's default hooks, traces exported over OTLP/HTTP to a loopback
  sink) on embedded and postgres (+ redis-mysql at full size), ``POST /v1/threads/{id}/runs``
  with ``Accept: application/json`` (JSON) or ``text/event-stream`` (SSE);
* **in-process ainvoke (profile)** — the same compiled agent and saver (``make_container``
  with the same settings, its own data directory or schema, traced to the same sink) called
  with ``ainvoke`` / ``astream(stream_mode="messages")``, ``durability="exit"``;
* **Agent Server** — ``langgraph dev`` (``langgraph-cli[inmem]``, in-memory runtime, no file
  persistence, no LangSmith tracing) serving ``benchmarks/peer/graphs.py``: ``agent``
  (``create_agent`` + a streaming fake model) and ``echo``; ``/threads/{id}/runs/wait`` and
  ``/runs/stream`` (``messages-tuple``), threads created before the clock starts.

Both servers are driven by one ``httpx.AsyncClient`` from this process, arms interleaved.

Groups and gates (``report.py``):

* ``service sequential JSON, <profile>`` — per-run latency, one run at a time, run by run
  interleaved; baseline in-process; gate: HTTP median (p50) ≤ in-process median + 3 ms.
* ``service SSE time to first token, <profile>`` — the same with SSE; the samples are the time
  to the first token; gate: HTTP median ≤ in-process median + 3 ms.
* ``service throughput <mode>, concurrency <c>`` — ``c`` clients, each on its own new thread,
  windows interleaved across arms; a sample is a window's time per run (1 / runs per second);
  baseline the Agent Server's ``agent`` graph **at its best**: the full run sweeps its settings
  (``service_support.PEER_SWEEP``: ``--n-jobs-per-worker`` 1, 2, 5, 10, 20 and isolated loops),
  every one an arm, and the fastest at each concurrency is the baseline; the reduced run
  measures it at ``PEER_REDUCED`` (``--n-jobs-per-worker`` 5 and 10, the two best of the sweeps
  on record at concurrency 20) and takes the faster.
  Gate: threadkeeper HTTP on embedded, every run traced, ≤ 1 / 1.2 of the baseline's time per
  run (≥ 1.2× its runs/s); ``speedup_vs_peer_best`` and ``goal_speedup`` (2.0) report the
  distance to the goal. Beside it, ungated, the same server tracing 10 % of its runs
  (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``, ``OTEL_TRACES_SAMPLER_ARG=0.1``).
  A window's sample is its time per run while saturated (``concurrent_window``: the ramp up
  and down are not measured).

Server CPU per run is the server process's CPU (every thread, ``/proc/<pid>/task/*/schedstat``)
over the measured runs ÷ runs; for in-process arms it is this process's. RSS after the arm's
last window.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

# the bench group (tox -e bench): the Agent Server and psutil are not in the development venv
pytest.importorskip("langgraph_api", reason="the Agent Server arms need the bench group")
pytest.importorskip("psutil", reason="the service arms need the bench group")

from benchmarks.conftest import ServiceSize, record_arm
from benchmarks.service_support import (
    PEER_BEST,
    PEER_REDUCED,
    PEER_SWEEP,
    ArmSamples,
    Fleet,
    Target,
    arm_info,
    concurrent_window,
    sequential_round,
    warm,
)

LATENCY_SLACK_MS = 3.0
SEQUENTIAL_UNMET = (
    "issue 12 open: a sequential run through the service takes ~2.7x the bare agent's time in "
    "process (embedded), for work the agent does not do (the "
    "thread's lock and claim, the run record and its texts, memory extraction and write, the "
    "HTTP stack, their spans; docs/benchmarks.md, profile)"
)
"""Why the sequential-latency gates do not bind yet (``report.py``: ``gate_unmet``)."""
THROUGHPUT_MIN_SPEEDUP = 1.2
"""threadkeeper on embedded ≥ 1.2× the peer's best runs/s (issue 28: CI is to bind it)."""
THROUGHPUT_UNMET = (
    "issue 28 open: against the Agent Server at its best (--n-jobs-per-worker 5 here, saturated "
    "windows), threadkeeper on embedded with every run traced served 0.55x its runs/s at "
    "concurrency 20 (37.1 vs 67.8 runs/s), spending 24.4 ms of server CPU per run against the "
    "peer's 12.9 ms and the in-process agent's 13.1 ms (2026-12-07 sweep, docs/benchmarks.md); "
    "the gate binds once the CPU per run is cut below the peer's"
)
"""Why the throughput gate does not bind yet (``report.py``: ``gate_unmet``)."""
THROUGHPUT_GOAL_SPEEDUP = 2.0
"""Issue 28's goal, reported as the distance to it."""
WARMUP_RUNS = 4


SAMPLED = 0.1
"""The throughput arms also run ``serve`` on embedded tracing this share of runs (the cost of
tracing as a deployment samples it), beside the gated arm that traces every run."""


def _targets(
    fleet: Fleet,
    service_size: ServiceSize,
    *,
    sweep: bool | str = False,
    sampled: bool = False,
) -> list[Target]:
    """Every arm; the Agent Server at ``PEER_BEST`` (``echo`` too), with ``sweep`` its
    ``agent`` graph at every other setting of ``PEER_SWEEP`` (``True``) or ``PEER_REDUCED``
    (``"reduced"``) as well, and with ``sampled`` threadkeeper on embedded tracing ``SAMPLED``
    of its runs."""
    targets: list[Target] = []
    for profile in service_size.profiles:
        targets += [fleet.threadkeeper(profile), fleet.in_process(profile)]
    if sampled:
        targets.append(fleet.threadkeeper("embedded", sampled=SAMPLED))
    targets += [fleet.agent_server("agent"), fleet.agent_server("echo")]
    if sweep:
        settings = PEER_SWEEP if sweep is True else PEER_REDUCED
        targets += [fleet.agent_server("agent", s) for s in settings if s != PEER_BEST]
    return targets


def _peer_best(arms: list[ArmSamples]) -> ArmSamples | None:
    """The Agent Server's ``agent`` graph at its fastest setting (lowest mean time per run)."""
    measured = [a for a in arms if getattr(a.target, "graph", None) == "agent" and a.samples]
    return min(measured, key=lambda a: sum(a.samples) / len(a.samples), default=None)


def _warm(fleet: Fleet, targets: list[Target], stream: bool) -> None:
    for target in targets:
        fleet.run(warm(target, WARMUP_RUNS, stream))


@pytest.mark.parametrize("mode", ["JSON", "SSE"])
def test_service_sequential(
    benchmark, service_fleet: Fleet, service_size: ServiceSize, mode: str
) -> None:  # type: ignore[no-untyped-def]
    stream = mode == "SSE"
    targets = _targets(service_fleet, service_size)
    _warm(service_fleet, targets, stream)
    arms = [ArmSamples(t) for t in targets]
    benchmark.group = "service campaigns"
    benchmark.extra_info.update(role="measurement", arms=len(arms), mode=mode, concurrency=1)
    benchmark.pedantic(
        lambda: service_fleet.run(
            sequential_round(
                arms,
                service_size.sequential_runs,
                stream,
                service_size.turns_per_thread,
                0,
                sparse={
                    i: service_size.peer_sequential_runs
                    for i, arm in enumerate(arms)
                    if arm.target.kind == "agent-server"
                },
            )
        ),
        rounds=1,
        iterations=1,
    )
    for arm in arms:
        target = arm.target
        profile = target.profile if target.kind != "agent-server" else "embedded"
        group = (
            f"service SSE time to first token, {profile}"
            if stream
            else f"service sequential JSON, {profile}"
        )
        info: dict[str, Any] = arm_info(arm, mode=mode, concurrency=1)
        if target.kind == "in-process":
            info["role"] = "baseline"
        elif target.kind == "threadkeeper":
            info["gate_max_median_delta_ms"] = LATENCY_SLACK_MS
            info["gate_unmet"] = SEQUENTIAL_UNMET
        record_arm(group, target.name, arm.samples, info)


@pytest.mark.parametrize("mode", ["JSON", "SSE"])
def test_service_throughput(
    benchmark, service_fleet: Fleet, service_size: ServiceSize, mode: str
) -> None:  # type: ignore[no-untyped-def]
    stream = mode == "SSE"
    sweep = True if service_size.peer_sweep else "reduced"
    targets = _targets(service_fleet, service_size, sweep=sweep, sampled=True)
    _warm(service_fleet, targets, stream)
    by_level = {c: [ArmSamples(t) for t in targets] for c in service_size.concurrency}

    async def campaign() -> None:
        broken: set[str] = set()  # reference arms that failed at a lower concurrency
        for concurrency, arms in by_level.items():
            for arm in arms:
                if arm.target.name in broken:
                    arm.failure = "failed at a lower concurrency"
            for r in range(service_size.rounds):
                shift = r % len(arms)  # each arm takes every position in turn
                for arm in arms[shift:] + arms[:shift]:
                    await concurrent_window(arm, concurrency, service_size.runs_per_worker, stream)
            broken.update(a.target.name for a in arms if a.failure is not None)

    benchmark.group = "service campaigns"
    benchmark.extra_info.update(
        role="measurement",
        mode=mode,
        concurrency=list(service_size.concurrency),
        rounds=service_size.rounds,
    )
    benchmark.pedantic(lambda: service_fleet.run(campaign()), rounds=1, iterations=1)
    for concurrency, arms in by_level.items():
        group = f"service throughput {mode}, concurrency {concurrency}"
        best = _peer_best(arms)
        for arm in arms:
            target = arm.target
            if not arm.samples:  # a reference arm that failed under load: reported, not measured
                benchmark.extra_info.setdefault(f"failed: {target.name}", arm.failure)
                warnings.warn(f"{group} / {target.name}: {arm.failure}", stacklevel=1)
                continue
            info = arm_info(arm, mode=mode, concurrency=concurrency)
            if arm.failure is not None:
                info["failure"] = arm.failure
            if target.kind == "agent-server":
                info["peer_setting"] = target.setting.label  # type: ignore[attr-defined]
            if arm is best:
                info["role"] = "baseline"
            elif target.kind == "threadkeeper" and best is not None:
                mean = sum(arm.samples) / len(arm.samples)
                best_mean = sum(best.samples) / len(best.samples)
                info["speedup_vs_peer_best"] = round(best_mean / mean, 3)
                info["peer_best_setting"] = best.target.setting.label  # type: ignore[attr-defined]
                if target.name == "threadkeeper HTTP (embedded)":  # every run traced
                    info["gate_max_ratio"] = round(1 / THROUGHPUT_MIN_SPEEDUP, 4)
                    info["gate_unmet"] = THROUGHPUT_UNMET
                    info["goal_speedup"] = THROUGHPUT_GOAL_SPEEDUP
            record_arm(group, target.name, arm.samples, info)
