"""Fits ``CLASS_WEIGHTS`` of ``threadkeeper.domain.estimate`` on ``fit.jsonl`` (offline, once).

Run from the repository root::

    .venv/bin/python tests/data/token_corpus/fit_estimator.py

1. The target is the exact ``o200k_base`` count (``TiktokenCounter``) of every FIT message.
2. Each message becomes a vector of byte-class counts (``BYTE_CLASSES``: a multi-byte character
   counts once, in the class of its lead byte).
3. The weights of the classes in ``FITTED`` minimise the sum of squared *relative* errors
   (weighted least squares, solved by the normal equations); continuation bytes and the classes
   of ``PRIORS`` keep hand-set weights.
4. The weights are scaled by ``SCALE`` and rounded, then improved by coordinate descent over
   integers, minimising the mean absolute relative error of the estimator's own integer
   arithmetic on the same FIT messages.

Only FIT is used to choose anything. HELD-OUT errors are printed at the end as a report.
Pure standard library (plus tiktoken for the reference counts), so it needs no extra package.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

from threadkeeper.domain.estimate import BYTE_CLASSES, SCALE
from threadkeeper.domain.tokens import TiktokenCounter

HERE = Path(__file__).resolve().parent

FITTED = (
    "space",
    "newline",
    "letter",
    "digit",
    "punct",
    "arabic",
    "general",
    "cjk_symbol",
    "han",
    "fullwidth",
    "astral",
)
#: UTF-8 length of the characters whose lead byte is in each multi-byte class.
WIDTH = {
    "two_byte": 2,
    "arabic": 2,
    "general": 3,
    "cjk_symbol": 3,
    "han": 3,
    "fullwidth": 3,
    "three_byte": 3,
    "astral": 4,
}
#: Weight of every continuation byte, in 1/SCALE tokens: it carries a fixed part of each
#: multi-byte character's weight, the lead byte the rest. The model is the same for any value
#: that leaves the lead weights non-negative; this one keeps the largest byte weight, and so the
#: number of adler32 chunks, small.
CONTINUATION = 5
#: Tokens per *character* for classes without (enough) fitting data. For letters of other scripts
#: these are o200k counts of one sentence per script, less what the fitted space and punctuation
#: weights already pay: per letter Russian ~0.13, Hebrew ~0.2, Greek ~0.27 (two_byte); Hindi
#: ~0.24, Korean ~0.38, Thai ~0.5 (three_byte). Rough, and not validated.
PRIORS = {
    "control": 1.0,
    "invalid": 0.0,
    "two_byte": 0.2,
    "three_byte": 0.4,
}
#: The largest weight allowed, so that an adler32 chunk stays at least 65520 // 63 = 1040 bytes.
MAX_WEIGHT = 63


def prior_weights() -> dict[str, int]:
    """Integer lead-byte weights of the classes that are not fitted."""
    weights = {"continuation": CONTINUATION}
    for name, tokens in PRIORS.items():
        extra = (WIDTH.get(name, 1) - 1) * CONTINUATION
        weights[name] = max(0, round(tokens * SCALE) - extra)
    return weights


def load(split: str) -> list[dict[str, str]]:
    path = HERE / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def class_counts(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for byte, n in Counter(text.encode("utf-8", "surrogatepass")).items():
        counts[BYTE_CLASSES[byte]] += n
    return counts


def solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting."""
    size = len(vector)
    rows = [[*row, value] for row, value in zip(matrix, vector, strict=True)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(size):
            if r != col and rows[col][col]:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][size] / rows[i][i] for i in range(size)]


def least_squares(features: list[Counter[str]], targets: list[int]) -> dict[str, float]:
    """Lead-byte weights (tokens) of FITTED minimising sum(((prediction - target) / target) ** 2).

    The continuation bytes and the classes of PRIORS contribute their fixed weights.
    """
    priors = prior_weights()
    k = len(FITTED)
    normal = [[0.0] * k for _ in range(k)]
    rhs = [0.0] * k
    for counts, target in zip(features, targets, strict=True):
        fixed = sum(priors[name] * n for name, n in counts.items() if name in priors) / SCALE
        row = [counts[name] / target for name in FITTED]
        residual = (target - fixed) / target
        for i in range(k):
            rhs[i] += row[i] * residual
            for j in range(k):
                normal[i][j] += row[i] * row[j]
    ridge = 1e-6  # keeps classes absent from FIT (if any) solvable; negligible otherwise
    for i in range(k):
        normal[i][i] += ridge
    return dict(zip(FITTED, solve(normal, rhs), strict=True))


def estimate(weights: dict[str, int], counts: Counter[str]) -> int:
    """The estimator's own arithmetic (see ``estimate_tokens``), on class counts."""
    total = sum(weights[name] * n for name, n in counts.items())
    return max(1, (total + SCALE // 2) // SCALE)


def loss(weights: dict[str, int], features: list[Counter[str]], targets: list[int]) -> float:
    return sum(abs(estimate(weights, c) - t) / t for c, t in zip(features, targets, strict=True))


def quantise(
    real: dict[str, float], features: list[Counter[str]], targets: list[int]
) -> dict[str, int]:
    weights = prior_weights()
    weights.update({name: min(MAX_WEIGHT, max(0, round(v * SCALE))) for name, v in real.items()})
    best = loss(weights, features, targets)
    improved = True
    while improved:
        improved = False
        for name in FITTED:
            for step in (-1, 1):
                trial = dict(weights)
                trial[name] = weights[name] + step
                if not 0 <= trial[name] <= MAX_WEIGHT:
                    continue
                score = loss(trial, features, targets)
                if score < best:
                    weights, best, improved = trial, score, True
    return weights


def report(
    label: str, weights: dict[str, int], rows: list[dict[str, str]], counter: TiktokenCounter
) -> None:
    errors: dict[str, list[float]] = {}
    for row in rows:
        exact = counter.count_text(row["text"])
        error = abs(estimate(weights, class_counts(row["text"])) - exact) / exact
        errors.setdefault(row["lang"], []).append(error)
        errors.setdefault("all", []).append(error)
    for lang, values in errors.items():
        p95 = statistics.quantiles(values, n=20, method="inclusive")[18]
        mean = sum(values) / len(values)
        print(f"{label:8} {lang:6} n={len(values):3}  mean {mean:6.2%}  p95 {p95:6.2%}")


def main() -> None:
    counter = TiktokenCounter("o200k_base")
    fit = load("fit")
    features = [class_counts(row["text"]) for row in fit]
    targets = [counter.count_text(row["text"]) for row in fit]
    real = least_squares(features, targets)
    print("least squares, tokens per lead byte / per character:")
    for name, value in real.items():
        per_char = value + (WIDTH.get(name, 1) - 1) * CONTINUATION / SCALE
        print(f"  {name:12} {value:8.4f} {per_char:8.4f}")
    weights = quantise(real, features, targets)
    print(f"\nCLASS_WEIGHTS (1/{SCALE} tokens):")
    for name in dict.fromkeys(BYTE_CLASSES):
        print(f'        "{name}": {weights[name]},')
    print()
    report("fit", weights, fit, counter)
    report("heldout", weights, load("heldout"), counter)


if __name__ == "__main__":
    main()
