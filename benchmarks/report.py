"""Turn a pytest-benchmark JSON file into the Markdown summary, and check the ratio gates.

    python benchmarks/report.py RESULTS.json SUMMARY.md --command "tox -e bench"

Within each group the arm with ``extra_info["role"] == "baseline"`` is the denominator. An arm
fails the run (exit 1) when one of its gates is broken:

* ``extra_info["gate_max_ratio"]`` — its mean ÷ the baseline's mean exceeds it (for a time per
  run, a ratio ≤ 1.0 is "runs per second ≥ the baseline's");
* ``extra_info["gate_max_median_delta_ms"]`` — its median exceeds the baseline's median by more
  than this many milliseconds ("p50 ≤ baseline p50 + 3 ms");
* ``extra_info["gate_max"]`` — ``{metric: bound}``: its own ``extra_info[metric]`` (a ratio it
  measured itself, e.g. turn 50 ÷ turn 5) exceeds ``bound``.

An arm with ``extra_info["gate_unmet"]`` (why: a target the code does not reach yet, its issue
open) has its gates evaluated and reported like any other — a broken one is marked ✗ and listed
under "Targets not met yet", and printed as ``GATE UNMET`` — but it does not fail the run. Once
such a gate holds, the summary says so: drop ``gate_unmet`` and the gate binds. A ``{metric:
why}`` mapping there does the same for those ``gate_max`` metrics only; the arm's other gates
bind.

Ratios come from one run on one machine; absolute times are for reference.

``--charts DIR`` also draws PNGs from the JSON (matplotlib, if installed): runs/s against
concurrency of the service arms (``extra_info`` ``concurrency`` and ``runs_per_s``), and latency
and CPU per turn against turns (``extra_info["series"]``), named after the results file
(``reduced-throughput.png``, ``reduced-turns.png``) and linked from the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

_HIDDEN = {
    "role",
    "gate_max_ratio",
    "gate_max_median_delta_ms",
    "gate_max",
    "gate_unmet",
    "series",
}


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


def _gates(
    group: str,
    arm: dict[str, Any],
    baseline: dict[str, Any] | None,
    ratio: float | None,
    failures: list[str],
) -> list[str]:
    """The verdicts of ``arm``'s gates (failures appended to ``failures``)."""
    extra = arm.get("extra_info", {})
    where = f"{group} / {arm['name']}"
    verdicts: list[str] = []
    gate = extra.get("gate_max_ratio")
    if gate is not None:
        if ratio is None:
            verdicts.append("no baseline")
            failures.append(f"{where}: gate without a baseline")
        elif ratio <= gate:
            verdicts.append(f"≤ {gate} ✓")
        else:
            verdicts.append(f"≤ {gate} ✗")
            failures.append(f"{where}: ratio {ratio:.3f} > {gate}")
    slack = extra.get("gate_max_median_delta_ms")
    if slack is not None:
        if baseline is None:
            verdicts.append("no baseline")
            failures.append(f"{where}: gate without a baseline")
        else:
            delta = (arm["stats"]["median"] - baseline["stats"]["median"]) * 1e3
            ok = delta <= slack
            verdicts.append(
                f"median ≤ baseline + {slack:g} ms {'✓' if ok else '✗'} ({delta:+.2f} ms)"
            )
            if not ok:
                failures.append(
                    f"{where}: median {delta:+.2f} ms over the baseline's (at most +{slack:g} ms)"
                )
    for metric, bound in (extra.get("gate_max") or {}).items():
        value = extra.get(metric)
        if not isinstance(value, int | float):
            verdicts.append(f"{metric}: missing")
            failures.append(f"{where}: gated metric {metric} missing")
        elif value <= bound:
            verdicts.append(f"{metric} ≤ {bound:g} ✓")
        else:
            verdicts.append(f"{metric} ≤ {bound:g} ✗")
            failures.append(f"{where}: {metric} {value:.3f} > {bound:g}")
    return verdicts


def render(data: dict[str, Any], command: str) -> tuple[str, list[str], list[str]]:
    """The Markdown summary, the broken gates, and the broken gates of targets not met yet."""
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
    unmet: list[str] = []
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
            broken: list[str] = []
            verdicts = _gates(group, arm, baseline, ratio, broken)
            reason = extra.get("gate_unmet")
            if isinstance(reason, dict):  # some gate_max metrics: only theirs do not bind
                for failure in broken:
                    why = next((w for m, w in reason.items() if f": {m} " in failure), None)
                    (failures if why is None else unmet).append(
                        failure if why is None else f"{failure} — {why}"
                    )
                verdicts = [
                    f"{v} (target not met yet)"
                    if "✗" in v and any(v.startswith(f"{m} ") for m in reason)
                    else v
                    for v in verdicts
                ]
            elif reason:  # a target not reached yet: reported, not binding
                unmet.extend(f"{failure} — {reason}" for failure in broken)
                verdicts.append("target not met yet" if broken else "now met: make it bind")
            else:
                failures.extend(broken)
            verdict = "; ".join(verdicts)
            role = " (baseline)" if arm is baseline else ""
            lines.append(
                f"| {arm['name']}{role} | {_fmt_time(stats['mean'])} | "
                f"{_fmt_time(stats['median'])} | "
                f"{'' if ratio is None else f'{ratio:.3f}×'} | {verdict} | {_fmt_extra(extra)} |"
            )
        lines.append("")
    if unmet:
        lines += ["## Targets not met yet", "", *(f"- {line}" for line in unmet), ""]
    return "\n".join(lines), failures, unmet


def _throughput_lines(data: dict[str, Any], mode: str) -> dict[str, list[tuple[int, float]]]:
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for bench in data["benchmarks"]:
        extra = bench.get("extra_info", {})
        if extra.get("mode") != mode or "runs_per_s" not in extra or "concurrency" not in extra:
            continue
        if not isinstance(extra["concurrency"], int):
            continue
        lines[bench["name"]].append((extra["concurrency"], float(extra["runs_per_s"])))
    return {name: sorted(points) for name, points in lines.items()}


def draw_charts(data: dict[str, Any], directory: Path, stem: str) -> list[Path]:
    """The PNGs (see the module docstring); none when matplotlib is missing or nothing fits."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("charts skipped: matplotlib is not installed", file=sys.stderr)
        return []
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    modes = [m for m in ("JSON", "SSE") if _throughput_lines(data, m)]
    if modes:
        fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.5), squeeze=False)
        for ax, mode in zip(axes[0], modes, strict=True):
            for name, points in sorted(_throughput_lines(data, mode).items()):
                style = "--" if name.startswith("in-process") else "-"
                ax.plot(*zip(*points, strict=True), style, marker="o", label=name)
            ax.set(
                title=f"runs/s against concurrency ({mode})",
                xlabel="concurrent clients",
                ylabel="runs/s",
            )
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"{stem}-throughput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    series = [
        b
        for b in data["benchmarks"]
        if "latency_ms_per_turn" in (b.get("extra_info", {}).get("series") or {})
    ]
    if series:
        fig, (lat_ax, cpu_ax) = plt.subplots(1, 2, figsize=(13, 4.5))
        for bench in sorted(series, key=lambda b: b["name"]):
            values = bench["extra_info"]["series"]
            turns = range(1, len(values["latency_ms_per_turn"]) + 1)
            lat_ax.plot(turns, values["latency_ms_per_turn"], label=bench["name"])
            cpu_ax.plot(turns, values.get("cpu_ms_per_turn", []), label=bench["name"])
        lat_ax.set(title="latency per turn (median of threads)", xlabel="turn", ylabel="ms")
        cpu_ax.set(title="server CPU per turn (median of threads)", xlabel="turn", ylabel="ms")
        for ax in (lat_ax, cpu_ax):
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"{stem}-turns.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("summary", type=Path)
    parser.add_argument("--command", default="tox -e bench")
    parser.add_argument("--charts", type=Path, default=None, help="directory for the PNGs")
    args = parser.parse_args(argv)
    data = json.loads(args.results.read_text(encoding="utf-8"))
    text, failures, unmet = render(data, args.command)
    if args.charts is not None:
        charts = draw_charts(data, args.charts, args.results.stem)
        if charts:
            links = [
                f"![{path.stem}]({os.path.relpath(path, args.summary.parent)})" for path in charts
            ]
            text = "\n".join([text.rstrip("\n"), "", "## Charts", "", *links, ""])
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(text, encoding="utf-8")
    print(text)
    for line in unmet:
        print(f"GATE UNMET (not binding yet): {line}", file=sys.stderr)
    for failure in failures:
        print(f"GATE FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
