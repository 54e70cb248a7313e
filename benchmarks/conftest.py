"""Benchmark harness: sizes, shared corpora, and the arm convention.

Every benchmark is an *arm* of a *group* (``@pytest.mark.benchmark(group=...)``). Within a
group, the arm whose ``benchmark.extra_info["role"]`` is ``"baseline"`` is what the others
are compared with; an arm may declare ``extra_info["gate_max_ratio"]`` (its mean ÷ the
baseline's mean must not exceed it) — ``benchmarks/report.py`` computes the ratios, writes
the Markdown summary and fails the run on a broken gate. Absolute times are reported, never
asserted.

Sizes: ``THREADKEEPER_BENCH_SIZE=reduced`` (CI, default) or ``full`` (``tox -e bench-full``).

To add storage or service arms (later issues): put ``test_bench_<area>.py`` here, use the
``size`` fixture for turn counts, mark one arm ``role=baseline`` (what users would otherwise
pick, measured in the same run), and put measured quantities that are not times (bytes per
thread, error rates) into ``extra_info`` — the report prints them.
"""

from __future__ import annotations

import dataclasses
import os
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage


@dataclass(frozen=True)
class BenchSize:
    name: str
    history_lengths: tuple[int, ...]
    rounds: int


SIZES = {
    "reduced": BenchSize("reduced", (100, 1000), rounds=20),
    "full": BenchSize("full", (100, 400, 1000, 4000), rounds=100),
}


@pytest.fixture(scope="session")
def size() -> BenchSize:
    name = os.environ.get("THREADKEEPER_BENCH_SIZE", "reduced")
    if name not in SIZES:
        raise pytest.UsageError(f"THREADKEEPER_BENCH_SIZE must be one of {sorted(SIZES)}")
    return SIZES[name]


_FA = "بیمه درمان تکمیلی من هزینه بستری و دندانپزشکی را پوشش می‌دهد یا نه؟ لطفاً توضیح دهید".split()
_ZH = list("请问我的医疗保险是否包括住院费用和牙科治疗以及理赔需要哪些材料")
_EN = "does my supplementary health plan cover hospital stays dental care and claims".split()


def chat_text(rng: random.Random, chars: int) -> str:
    """Mixed fa/zh/en chat text of about ``chars`` characters."""
    parts: list[str] = []
    total = 0
    while total < chars:
        lang = rng.choice(("fa", "zh", "en"))
        if lang == "zh":
            piece = "".join(rng.choices(_ZH, k=rng.randint(8, 30))) + "。"
        else:
            words = _FA if lang == "fa" else _EN
            piece = " ".join(rng.choices(words, k=rng.randint(5, 15))) + "."
        parts.append(piece)
        total += len(piece) + 1
    return " ".join(parts)[:chars]


def conversation(messages: int, seed: int = 7) -> list[BaseMessage]:
    """A chat of about ``messages`` messages: turns of a question, sometimes a tool step, an
    answer; ~300-char messages, ~1,500-char tool results."""
    rng = random.Random(seed)
    out: list[BaseMessage] = []
    while len(out) < messages:
        out.append(HumanMessage(chat_text(rng, 300), id=str(uuid.UUID(int=rng.getrandbits(128)))))
        if rng.random() < 0.3:
            call_id = f"call-{len(out)}"
            out.append(
                AIMessage(
                    "",
                    id=str(uuid.UUID(int=rng.getrandbits(128))),
                    tool_calls=[{"name": "faq", "args": {"doc_id": "d7"}, "id": call_id}],
                )
            )
            out.append(
                ToolMessage(
                    chat_text(rng, 1500),
                    tool_call_id=call_id,
                    id=str(uuid.UUID(int=rng.getrandbits(128))),
                )
            )
        out.append(AIMessage(chat_text(rng, 300), id=str(uuid.UUID(int=rng.getrandbits(128)))))
    return out[:messages]


# -- arms measured outside the ``benchmark`` fixture ------------------------------------------
#
# The service arms are measured interleaved (arm after arm, window after window, so a change
# in the machine's load hits every arm alike), which one ``benchmark`` fixture per arm cannot
# do. A campaign test times the whole campaign with its own fixture (group "service
# campaigns") and hands each arm's samples (seconds) to ``record_arm``; the entries are added
# to the JSON with pytest-benchmark's own statistics, so ``report.py`` reads them like any arm.

RECORDED_ARMS: list[dict[str, Any]] = []


def record_arm(group: str, name: str, samples: list[float], extra_info: dict[str, Any]) -> None:
    """Add an arm of ``group`` measured by ``samples`` (seconds) to the results."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for sample in samples:
        stats.update(sample)
    summary = stats.as_dict()
    summary.update(data=list(samples), iterations=1)
    RECORDED_ARMS.append(
        {
            "group": group,
            "name": name,
            "fullname": f"{group}::{name}",
            "params": None,
            "param": None,
            "extra_info": dict(extra_info),
            "options": {"recorded": "interleaved (benchmarks/conftest.py record_arm)"},
            "stats": summary,
        }
    )


def pytest_benchmark_update_json(config: Any, benchmarks: Any, output_json: dict[str, Any]) -> None:
    output_json["benchmarks"].extend(RECORDED_ARMS)


@dataclass(frozen=True)
class ServiceSize:
    """Sizes of the service arms (``test_bench_service.py``, ``test_bench_turns.py``)."""

    profiles: tuple[str, ...]
    sequential_runs: int
    """Per arm and mode, run by run interleaved across arms."""
    peer_sequential_runs: int
    """The Agent Server's sequential arms run this many times, spread over the campaign (its
    in-memory queue polls every 0.5 s when idle: ~1 s per sequential run)."""
    turns_per_thread: int
    """Sequential arms start a new thread every this many runs (a short chat)."""
    concurrency: tuple[int, ...]
    runs_per_worker: int
    """Throughput: runs per client and window; the first and last ``concurrency`` runs to end
    are the ramp, not measured (``service_support.concurrent_window``): at least 3."""
    rounds: int
    """Interleaved windows per arm at each concurrency."""
    turns: int
    turn_marks: tuple[int, ...]
    turn_threads: int
    peer_sweep: bool = False
    """Throughput: the Agent Server's ``agent`` graph at every setting of
    ``service_support.PEER_SWEEP``, or at those of ``PEER_REDUCED``; its fastest at each
    concurrency is the baseline."""


SERVICE_SIZES = {
    "reduced": ServiceSize(
        profiles=("embedded", "postgres"),
        sequential_runs=30,
        peer_sequential_runs=4,
        turns_per_thread=5,
        concurrency=(20,),
        runs_per_worker=4,
        rounds=3,
        turns=50,
        turn_marks=(5, 50),
        # 4 threads: 20 turns each side of the gate (3 gave 15; CI saw 1.204 once on embedded)
        turn_threads=4,
    ),
    "full": ServiceSize(
        profiles=("embedded", "postgres", "redis-mysql"),
        sequential_runs=200,
        peer_sequential_runs=30,
        turns_per_thread=5,
        concurrency=(5, 10, 20, 40),
        runs_per_worker=6,
        rounds=5,
        turns=200,
        turn_marks=(10, 50, 100, 200),
        turn_threads=3,
        peer_sweep=True,
    ),
}


@pytest.fixture(scope="session")
def service_size(size: BenchSize) -> ServiceSize:
    """The size's service arms; ``THREADKEEPER_BENCH_CONCURRENCY`` (e.g. ``20``, or ``10,20``)
    narrows their concurrency levels (the peer's sweep at one level, without the whole full
    run)."""
    chosen = SERVICE_SIZES[size.name]
    levels = os.environ.get("THREADKEEPER_BENCH_CONCURRENCY", "").strip()
    if levels:
        chosen = dataclasses.replace(
            chosen, concurrency=tuple(int(level) for level in levels.split(","))
        )
    return chosen


@pytest.fixture(scope="session")
def service_fleet(service_size: ServiceSize, size: BenchSize) -> Iterator[Any]:
    """The servers and in-process agents of the service arms (``service_support.Fleet``),
    each started on first use, all stopped at the end of the session."""
    from benchmarks.service_support import fleet_for

    with fleet_for(size.name, max(service_size.concurrency)) as fleet:
        yield fleet
