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

import os
import random
import uuid
from dataclasses import dataclass

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
