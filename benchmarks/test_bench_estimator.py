"""Token counting of chat messages: exact tiktoken ``o200k_base`` vs ``EstimatingCounter``.

Both arms count every HELD-OUT message (``tests/data/token_corpus/heldout.jsonl``: 235 fa / zh /
en / mixed messages of 200-2,000 characters) once per round. Baseline: tiktoken's
``encode_ordinary``. Estimator: ``EstimatingCounter.count_text`` (not ``count``, whose id cache
would flatter it). The estimator's arm is gated at 1/10 of the baseline's mean: a tripwire for
regressions, looser than the ~20-27x measured (docs/token-estimator.md) because the ratio of means
moves by +-30% between runs on a shared machine.

Every round counts fresh copies of the messages, made in ``setup`` and not timed: tiktoken leaves
a cached UTF-8 form on each ``str`` it reads, which ``str.encode`` would then reuse, and chat
messages reach a counter as new strings.

``extra_info`` of the estimator arm: its error against tiktoken on the same messages (mean and
p95 of |relative error| in %, overall and per language), its error on the three EVAL sources
(``tests/data/token_corpus/eval/`` and ``eval2/``, per source and language, not timed) and its
speed-up per language (best of a few timed passes, measured by the test itself).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from benchmarks.conftest import BenchSize
from threadkeeper.domain.estimate import EstimatingCounter
from threadkeeper.domain.tokens import load_encoding

GROUP = "token-estimator"
CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "token_corpus"
HELDOUT = CORPUS / "heldout.jsonl"
#: EVAL corpora (made before fitting, never fitted on): errors only, not timed.
EVAL_FILES = {
    "handwritten": CORPUS / "eval" / "handwritten.jsonl",
    "generated": CORPUS / "eval" / "generated.jsonl",
    "markov": CORPUS / "eval2" / "markov.jsonl",
}
LANGS = ("fa", "zh", "en", "fa+en", "zh+en")
EVAL_LANGS = (*LANGS, "code")
#: The estimator arm runs this many times more rounds than the baseline (it is ~20x faster).
ESTIMATE_ROUNDS_FACTOR = 5


@cache
def heldout() -> tuple[tuple[str, str], ...]:
    """(lang, text) of every HELD-OUT message."""
    lines = HELDOUT.read_text(encoding="utf-8").splitlines()
    return tuple((row["lang"], row["text"]) for row in map(json.loads, lines))


def fresh(texts: list[str]) -> list[str]:
    """Equal strings that are new objects, without the UTF-8 cache a previous reader left."""
    return [(text + ".")[:-1] for text in texts]


def count_all(count: Callable[[str], int], texts: list[str]) -> int:
    total = 0
    for text in texts:
        total += count(text)
    return total


def tiktoken_count() -> Callable[[str], int]:
    encode = load_encoding("o200k_base").encode_ordinary
    return lambda text: len(encode(text))


def best_time(count: Callable[[str], int], texts: list[str], passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        copies = fresh(texts)
        start = time.perf_counter()
        count_all(count, copies)
        best = min(best, time.perf_counter() - start)
    return best


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def error_stats(estimate: Callable[[str], int], exact: Callable[[str], int]) -> dict[str, float]:
    errors: dict[str, list[float]] = {lang: [] for lang in ("all", *LANGS)}
    for lang, text in heldout():
        truth = exact(text)
        error = abs(estimate(text) - truth) / truth
        errors[lang].append(error)
        errors["all"].append(error)
    stats: dict[str, float] = {}
    for lang, values in errors.items():
        stats[f"err_mean_{lang}_pct"] = round(100 * statistics.fmean(values), 2)
        stats[f"err_p95_{lang}_pct"] = round(100 * p95(values), 2)
    return stats


def eval_error_stats(
    estimate: Callable[[str], int], exact: Callable[[str], int]
) -> dict[str, float]:
    """Mean and p95 of |relative error| in % per EVAL source and language."""
    stats: dict[str, float] = {}
    for source, path in EVAL_FILES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        errors: dict[str, list[float]] = {lang: [] for lang in EVAL_LANGS}
        for row in map(json.loads, lines):
            truth = exact(row["text"])
            errors[row["lang"]].append(abs(estimate(row["text"]) - truth) / truth)
        for lang, values in errors.items():
            stats[f"err_mean_{source}_{lang}_pct"] = round(100 * statistics.fmean(values), 2)
            stats[f"err_p95_{source}_{lang}_pct"] = round(100 * p95(values), 2)
    return stats


def speedups(estimate: Callable[[str], int], exact: Callable[[str], int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for lang in LANGS:
        texts = [text for text_lang, text in heldout() if text_lang == lang]
        ratio = best_time(exact, texts, 5) / best_time(estimate, texts, 5 * ESTIMATE_ROUNDS_FACTOR)
        out[f"speedup_{lang}"] = round(ratio, 1)
    return out


def _setup() -> tuple[tuple[list[str]], dict[str, Any]]:
    return (fresh([text for _, text in heldout()]),), {}


@pytest.mark.benchmark(group=GROUP)
def test_count_heldout_tiktoken(benchmark: Any, size: BenchSize) -> None:
    count = tiktoken_count()
    benchmark.extra_info.update(role="baseline", messages=len(heldout()))
    total = benchmark.pedantic(
        lambda texts: count_all(count, texts), setup=_setup, rounds=size.rounds, warmup_rounds=1
    )
    assert total > 0


@pytest.mark.benchmark(group=GROUP)
def test_count_heldout_estimate(benchmark: Any, size: BenchSize) -> None:
    count = EstimatingCounter().count_text
    total = benchmark.pedantic(
        lambda texts: count_all(count, texts),
        setup=_setup,
        rounds=size.rounds * ESTIMATE_ROUNDS_FACTOR,
        warmup_rounds=1,
    )
    exact = tiktoken_count()
    benchmark.extra_info.update(
        role="estimate",
        messages=len(heldout()),
        gate_max_ratio=0.1,
        **error_stats(count, exact),
        **eval_error_stats(count, exact),
        **speedups(count, exact),
    )
    assert total > 0
