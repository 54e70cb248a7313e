"""How long the operator's commands take, start-up included: ``replay`` of one run, ``export``
of one user, ``export-runs``, ``retention --dry-run`` and ``doctor``, on the embedded profile,
each a real ``threadkeeper`` process.

A command's time is mostly start-up (imports). Each command builds only what it uses — the
backend, plus the knowledge base when a replayed prompt had documents, plus the tokenizer and
the knowledge base for ``doctor`` — where it used to build the whole service: backend,
tokenizer, knowledge base, model, hooks and agent (LangChain's agent factory). That is the
baseline arm, measured in the same run: the same start-up a command paid before. DESIGN's
target for the three commands is ≤ 2 s each (``target_seconds``; reported, not gated: the
ratio is, in ``test_cli_commands_interleaved``, where the four processes take turns so that a
slow spell of the machine hits them alike; the per-command tests' ratios are for reference).

Timed with Python's bytecode cache warm (a private ``PYTHONPYCACHEPREFIX``, filled by the
warm-up round), as a user's second run of a command is; ``seconds_without_bytecode_cache``
is one run with ``PYTHONDONTWRITEBYTECODE=1`` and no cache, as every run is where that is set
(the test environments set it), where compiling the imported modules dominates.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from benchmarks.conftest import BenchSize
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings

TENANT = "acme-insurance"
USER = "bench-user"
THREAD = "t-1"
TARGET_SECONDS = 2.0
ROUNDS = {"reduced": 3, "full": 10}
INTERLEAVED_ROUNDS = {"reduced": 5, "full": 10}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


QUESTIONS = (
    "Is dental treatment covered by my health insurance?",
    "Please give me the full details of the dental cover",
    "How do I file a claim?",
)

BUILD_EVERYTHING = """
import asyncio
from dependency_injector import providers
from threadkeeper.app.config import load_settings
from threadkeeper.app.container import make_container
from threadkeeper.app.storage import backend_resource

async def main():
    settings = load_settings()
    container = make_container(settings)
    container.backend.override(providers.Resource(backend_resource, settings, exclusive=False))
    try:
        await container.service()
        container.knowledge()
    finally:
        await container.shutdown_resources()

asyncio.run(main())
"""
"""What every command did first before: the whole service (and the knowledge base), beside a
server as replay, export and doctor open it."""


@pytest.fixture(scope="module")
def stored() -> Iterator[tuple[Path, str]]:
    """A data directory holding one thread of three runs; the last run's id."""
    with tempfile.TemporaryDirectory() as root:
        data = Path(root) / "data"
        app = create_app(Settings.of(data_dir=str(data)))
        headers = {"X-Tenant-Id": TENANT, "X-User-Id": USER, "Accept": "application/json"}
        with TestClient(app, timeout=60) as client:
            for question in QUESTIONS:
                response = client.post(
                    f"/v1/threads/{THREAD}/runs",
                    json={"message": {"content": question}},
                    headers=headers,
                )
                assert response.status_code == 200, response.text
        yield data, response.json()["run_id"]


@pytest.fixture(scope="module")
def bytecode_cache() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as cache:
        yield Path(cache)


def _environment(data: Path, cache: Path | None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("THREADKEEPER_")
        and key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    env["THREADKEEPER_DATA_DIR"] = str(data)
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def _process(argv: list[str], env: dict[str, str]) -> Callable[[], None]:
    def run() -> None:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr

    return run


def _arms(run_id: str) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "threadkeeper.app.cli"]
    return {
        "every command building the whole service (before)": [
            sys.executable,
            "-c",
            BUILD_EVERYTHING,
        ],
        "replay of one run": [
            *cli,
            "replay",
            "--thread",
            THREAD,
            "--run",
            run_id,
            "--tenant",
            TENANT,
            "--user",
            USER,
        ],
        "export of one user": [*cli, "export", "--tenant", TENANT, "--user", USER],
        "export-runs since a date": [*cli, "export-runs", "--since", "2026-01-01"],
        "retention dry run": [*cli, "retention", "--older-than", "90d", "--dry-run"],
        "doctor": [*cli, "doctor"],
    }


GATES = {
    "replay of one run": 0.8,
    "export of one user": 0.8,
    "export-runs since a date": 0.8,
    "retention dry run": 0.5,
    "doctor": 0.95,
}


@pytest.mark.parametrize("arm", list(_arms("0")))
def test_cli_command(  # type: ignore[no-untyped-def]
    benchmark, arm: str, stored: tuple[Path, str], bytecode_cache: Path, size: BenchSize
) -> None:
    data, run_id = stored
    argv = _arms(run_id)[arm]
    started = time.perf_counter()
    _process(argv, _environment(data, None))()
    cold = time.perf_counter() - started
    benchmark.group = "operator commands on embedded, start-up included"
    benchmark.pedantic(
        _process(argv, _environment(data, bytecode_cache)),
        rounds=ROUNDS[size.name],
        iterations=1,
        warmup_rounds=1,
    )
    extra: dict[str, object] = {"seconds_without_bytecode_cache": round(cold, 2)}
    if arm in GATES:
        mean = benchmark.stats.stats.mean
        extra.update(
            role="threadkeeper",
            target_seconds=TARGET_SECONDS,
            within_target=mean <= TARGET_SECONDS,
        )
    else:
        extra["role"] = "baseline"
    benchmark.extra_info.update(extra)


BEFORE = "every command building the whole service (before)"


def _short(arm: str) -> str:
    return "before" if arm == BEFORE else arm.split(" ", 1)[0]


def _ratio_name(arm: str) -> str:
    return f"{_short(arm)}_over_before"


def test_cli_commands_interleaved(  # type: ignore[no-untyped-def]
    benchmark, stored: tuple[Path, str], bytecode_cache: Path, size: BenchSize
) -> None:
    """The gates: each command's CPU time ÷ the baseline's, the four processes taking turns.

    The per-command tests above time each arm's rounds back to back, minutes apart from the
    baseline's, so their ratios also measure what else the machine did meanwhile (doctor ran
    at 0.60–0.91× in six runs against a gate of 0.95); here round *r* of every arm runs before
    round *r + 1* of any, the order rotating. Each gated ratio is of the arms' median CPU
    time (the command process's user + system, ``RUSAGE_CHILDREN``): a start-up is CPU work,
    and a busy spell of the machine delays it without adding to it — the ratio of mean wall
    times read 0.898 against a gate of 0.8 in one CI run where it is ~0.62. The wall-time
    ratios are reported beside them (``*_wall_over_before``).
    """
    data, run_id = stored
    env = _environment(data, bytecode_cache)
    runs = {arm: _process(argv, env) for arm, argv in _arms(run_id).items()}
    names = list(runs)
    for run in runs.values():  # warm: the bytecode cache and the page cache
        run()
    spent: dict[str, list[float]] = {arm: [] for arm in names}
    cpu: dict[str, list[float]] = {arm: [] for arm in names}

    def rounds() -> None:
        for r in range(INTERLEAVED_ROUNDS[size.name]):
            for k in range(len(names)):
                arm = names[(r + k) % len(names)]
                before = _children_cpu()
                started = time.perf_counter()
                runs[arm]()
                spent[arm].append(time.perf_counter() - started)
                cpu[arm].append(_children_cpu() - before)

    benchmark.group = "operator commands on embedded, interleaved"
    benchmark.pedantic(rounds, rounds=1, iterations=1)
    wall = {arm: statistics.median(times) for arm, times in spent.items()}
    work = {arm: statistics.median(times) for arm, times in cpu.items()}
    benchmark.extra_info.update(
        role="threadkeeper",
        rounds=INTERLEAVED_ROUNDS[size.name],
        **{f"{_short(arm)}_s": round(wall[arm], 3) for arm in names},
        **{f"{_short(arm)}_cpu_s": round(work[arm], 3) for arm in names},
        **{f"{_short(arm)}_wall_over_before": round(wall[arm] / wall[BEFORE], 3) for arm in GATES},
        **{_ratio_name(arm): round(work[arm] / work[BEFORE], 3) for arm in GATES},
        gate_max={_ratio_name(arm): bound for arm, bound in GATES.items()},
    )
