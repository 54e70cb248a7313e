"""``docs/reliability/full.md`` from the measurements of a reliability run (JSON lines).

Usage: ``python tests/reliability/report.py RESULTS.jsonl OUT.md --command "tox -e …"``.
One table per kind of measurement (load, double sends, storage faults, provider faults,
shutdown), columns in the order the tests recorded them.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TITLES = {
    "load": "Load: every acknowledged round stored, none refused and stored",
    "double-send": "Simultaneous sends to one thread over two replicas",
    "fault": "Storage faults: time to an answer, to readiness, to recovery; the invariant",
    "provider": "Provider faults (fake OpenAI-compatible provider on loopback)",
    "shutdown": "One SIGTERM (grace 3 s)",
    "followups": "Follow-up work: nothing lost (outages, killed replicas, erasure)",
}
SKIP = {"test", "kind", "size", "at"}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False) or "—"
    return "—" if value is None else str(value)


def render(lines: list[dict[str, Any]], command: str) -> str:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        by_kind[str(line["kind"])].append(line)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:  # pragma: no cover
        commit = "?"
    out = [
        "# Reliability run",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d} (commit {commit}, {platform.node()}, "
        f"Python {platform.python_version()}); sizes: "
        f"{', '.join(sorted({str(x['size']) for x in lines}))}.",
        "Figures are measured, not gated (CI runs the reduced size and asserts outcomes only).",
        "",
    ]
    for kind in [*TITLES, *sorted(set(by_kind) - set(TITLES))]:
        rows = by_kind.get(kind)
        if not rows:
            continue
        columns: list[str] = []
        for row in rows:
            columns += [k for k in row if k not in SKIP and k not in columns]
        out += [f"## {TITLES.get(kind, kind)}", ""]
        out.append("| " + " | ".join(columns) + " |")
        out.append("|" + "---|" * len(columns))
        for row in rows:
            out.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--command", default="tox -e reliability-full")
    args = parser.parse_args()
    lines = [
        json.loads(line)
        for line in args.results.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    args.out.write_text(render(lines, args.command), encoding="utf-8")
    print(f"{args.out}: {len(lines)} measurements")


if __name__ == "__main__":
    main()
