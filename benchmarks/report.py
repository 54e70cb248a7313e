"""Turn a pytest-benchmark JSON file into the Markdown summary, and check the ratio gates.

    python benchmarks/report.py RESULTS.json SUMMARY.md --command "tox -e bench"

Within each group the arm with ``extra_info["role"] == "baseline"`` is the denominator. An arm
with ``extra_info["gate_max_ratio"]`` fails the run (exit 1) when its mean ÷ the baseline's
mean exceeds it. Ratios come from one run on one machine; absolute times are for reference.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

_HIDDEN = {"role", "gate_max_ratio"}


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _fmt_extra(extra: dict[str, Any]) -> str:
    items = []
    for key, value in extra.items():
        if key in _HIDDEN:
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        items.append(f"{key}={value}")
    return ", ".join(items)


def render(data: dict[str, Any], command: str) -> tuple[str, list[str]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for bench in data["benchmarks"]:
        groups[bench.get("group") or bench["name"]].append(bench)
    machine = data.get("machine_info", {})
    lines = [
        "# Benchmark results",
        "",
        f"Reproduce with: `{command}`",
        "",
        f"Machine: {machine.get('cpu', {}).get('brand_raw', platform.processor())}, "
        f"{machine.get('cpu', {}).get('count', '?')} cores, Python "
        f"{machine.get('python_version', platform.python_version())}; "
        f"run {data.get('datetime', '?')}.",
        "",
        "Ratios are each arm's mean ÷ its group's baseline mean, measured in the same run.",
        "",
    ]
    failures: list[str] = []
    for group in sorted(groups):
        arms = groups[group]
        baseline = next(
            (a for a in arms if a.get("extra_info", {}).get("role") == "baseline"), None
        )
        lines += [
            f"## {group}",
            "",
            "| arm | mean | median | ratio vs baseline | gate | notes |",
            "|---|---|---|---|---|---|",
        ]
        for arm in sorted(arms, key=lambda a: a["stats"]["mean"]):
            stats, extra = arm["stats"], arm.get("extra_info", {})
            ratio = stats["mean"] / baseline["stats"]["mean"] if baseline else None
            gate = extra.get("gate_max_ratio")
            verdict = ""
            if gate is not None:
                if ratio is None:
                    verdict = "no baseline"
                    failures.append(f"{group} / {arm['name']}: gate without a baseline")
                elif ratio <= gate:
                    verdict = f"≤ {gate} ✓"
                else:
                    verdict = f"≤ {gate} ✗"
                    failures.append(f"{group} / {arm['name']}: ratio {ratio:.3f} > {gate}")
            role = " (baseline)" if arm is baseline else ""
            lines.append(
                f"| {arm['name']}{role} | {_fmt_time(stats['mean'])} | "
                f"{_fmt_time(stats['median'])} | "
                f"{'' if ratio is None else f'{ratio:.3f}×'} | {verdict} | {_fmt_extra(extra)} |"
            )
        lines.append("")
    return "\n".join(lines), failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("summary", type=Path)
    parser.add_argument("--command", default="tox -e bench")
    args = parser.parse_args(argv)
    data = json.loads(args.results.read_text(encoding="utf-8"))
    text, failures = render(data, args.command)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(text, encoding="utf-8")
    print(text)
    for failure in failures:
        print(f"GATE FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
