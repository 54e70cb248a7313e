"""The Han pairs that are single o200k_base tokens, and the experiment that used them (offline).

Run from the repository root::

    .venv/bin/python tests/data/token_corpus/han_pairs.py          # print the pair table
    .venv/bin/python tests/data/token_corpus/han_pairs.py --eval   # refit with a pair count

The table is derived from the tokenizer's vocabulary alone (no text): every token that decodes
to exactly two CJK Unified Ideographs (U+4E00-U+9FFF), sorted (2,408 pairs, 970 first
characters). ``--eval`` adds the number of greedy, non-overlapping pair matches (a regex with one
character class per first character) as a feature ``han_pair`` of the UTF-8 way, refits on the
FIT files with ``fit_estimator.py`` and prints, per source x language, the errors of the weights
in ``estimate.py`` and of the refit, then the cost of counting the pairs against tiktoken on
HELD-OUT Chinese (not adopted: see ``docs/token-estimator.md``, *What was tried*).
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_estimator as fe

from threadkeeper.domain.estimate import EstimatingCounter
from threadkeeper.domain.tokens import TiktokenCounter, load_encoding


def han_pairs() -> list[str]:
    """Every 2-ideograph string that is one token of o200k_base, sorted."""
    encoding = load_encoding("o200k_base")
    out = []
    for rank in range(encoding.n_vocab):
        try:
            text = encoding.decode_single_token_bytes(rank).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if len(text) == 2 and all("\u4e00" <= c <= "\u9fff" for c in text):
            out.append(text)
    return sorted(out)


def pair_regex(pairs: list[str]) -> re.Pattern[str]:
    by_first: dict[str, list[str]] = {}
    for pair in pairs:
        by_first.setdefault(pair[0], []).append(pair[1])
    return re.compile("|".join(a + "[" + "".join(b) + "]" for a, b in sorted(by_first.items())))


def experiment() -> None:
    regex = pair_regex(han_pairs())
    plain = fe.features

    def features(text: str) -> tuple[Counter[str], int]:
        counts, fixed = plain(text)
        if not counts.get("fa_space"):  # the UTF-8 way only
            n = len(regex.findall(text))
            if n:
                counts["han_pair"] = n
        return counts, fixed

    fe.features = features
    fe.FITTED = (*fe.FITTED, "han_pair")
    counter = TiktokenCounter("o200k_base")
    weights = fe.fit_rows([r for n in fe.FIT_FILES for r in fe.load(n)], counter)
    print({k: weights[k] for k in ("han", "han_pair", "space", "cjk_symbol", "fullwidth")})
    current = EstimatingCounter(safe=False).count_text

    def cell(errors: list[float]) -> str:
        mean = statistics.fmean(abs(e) for e in errors)
        worst = fe.p95([abs(e) for e in errors])
        return f"{mean:6.2%} {worst:6.2%} {statistics.fmean(errors):+6.2%}"

    for name in fe.REPORT_FILES + fe.FIT_FILES:
        groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for row in fe.load(name):
            truth = counter.count_text(row["text"])
            before = (current(row["text"]) - truth) / truth
            after = (fe.estimate(weights, features(row["text"])) - truth) / truth
            groups.setdefault(fe.group_of(row), []).append((before, after))
        for (source, lang), pairs in groups.items():
            before_cell = cell([b for b, _ in pairs])
            after_cell = cell([a for _, a in pairs])
            print(f"{source:22} {lang:6} {len(pairs):3}  now {before_cell}  refit {after_cell}")
    zh = [r["text"] for r in fe.load("heldout.jsonl") if r["lang"] == "zh"]
    encode = load_encoding("o200k_base").encode_ordinary
    vocab = set(han_pairs())

    def by_set(text: str) -> int:
        return sum(map(vocab.__contains__, map(str.__add__, text, text[1:])))

    timers = {"tiktoken": encode, "estimate": current, "regex": regex.findall, "set": by_set}
    best = dict.fromkeys(timers, float("inf"))
    for _ in range(20):  # interleaved rounds, best of each
        for label, fn in timers.items():
            copies = [(t + ".")[:-1] for t in zh]
            start = time.perf_counter()
            for text in copies:
                fn(text)
            best[label] = min(best[label], time.perf_counter() - start)
    tik = best["tiktoken"]
    print(f"HELD-OUT zh: estimate {tik / best['estimate']:.1f}x tiktoken")
    for label in ("regex", "set"):
        total = best["estimate"] + best[label]
        print(f"  + pair count by {label}: {tik / total:.2f}x tiktoken")


if __name__ == "__main__":
    if "--eval" in sys.argv:
        experiment()
    else:
        print("\n".join(han_pairs()))
