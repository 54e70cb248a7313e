"""This process's CPU per run through the HTTP API in process (``AsyncTestClient``: the whole
service minus the socket; tracing off), the best of 3 x 60 runs after 20 warm-up runs, threads
of 5 turns. Interleave two trees to compare them; docs/benchmarks.md ("Where SQLAlchemy's
share goes") has the pairs::

    PYTHONPATH=<worktree>/packages/adapters/src .venv/bin/python benchmarks/run_cpu.py embedded
    .venv/bin/python benchmarks/run_cpu.py embedded        # or postgres (a fresh schema)

Instructions instead of seconds (repeatable on a busy machine; "Embedded: each message once")::

    for n in 0 30; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/run_cpu.py embedded --runs $n 2>&1 | grep Collected; done
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from litestar.testing import AsyncTestClient

from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings


async def cpu_ms_per_run(profile: str, postgres_url: str | None = None) -> float:
    extra = {"service_token": "t", "postgres_url": postgres_url} if postgres_url else {}
    data = tempfile.mkdtemp()
    app = create_app(Settings.of(profile=profile, data_dir=f"{data}/data", **extra))
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(
            {"X-Tenant-Id": "acme", "X-User-Id": "user-1", "Authorization": "Bearer t"}
        )

        async def run(thread: str, content: str) -> None:
            response = await client.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": content}},
                headers={"Accept": "application/json"},
            )
            assert response.status_code == 200, response.text

        for i in range(20):
            await run(f"warm-{i % 4}", f"Is dental covered? {i}")
        best = float("inf")
        for rep in range(3):
            start = time.process_time()
            for i in range(60):
                await run(f"t{rep}-{i // 5}", f"Is dental treatment covered? {i}")
            best = min(best, (time.process_time() - start) / 60 * 1e3)
    return best


async def plain_runs(profile: str, runs: int) -> None:
    """10 warm-up runs then ``runs`` more, threads of 5 turns, nothing timed: for an instruction
    count (``valgrind --tool=callgrind``) of ``runs`` = 0 and N, whose difference ÷ N is a
    run's count, startup excluded."""
    app = create_app(Settings.of(profile=profile, data_dir=f"{tempfile.mkdtemp()}/data"))
    async with AsyncTestClient(app, timeout=600) as client:
        client.headers.update({"X-Tenant-Id": "acme", "X-User-Id": "u1"})
        for i in range(10 + runs):
            response = await client.post(
                f"/v1/threads/t{i // 5}/runs",
                json={"message": {"content": f"How do I file a claim for my dental visit {i}?"}},
                headers={"Accept": "application/json"},
            )
            assert response.status_code == 200, response.text


def main() -> None:
    profile = sys.argv[1] if len(sys.argv) > 1 else "embedded"
    if "--runs" in sys.argv:
        asyncio.run(plain_runs(profile, int(sys.argv[sys.argv.index("--runs") + 1])))
    elif profile == "postgres":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.support.postgres import fresh_schema

        with fresh_schema() as url:
            print(f"{asyncio.run(cpu_ms_per_run(profile, url)):.2f}")
    else:
        print(f"{asyncio.run(cpu_ms_per_run(profile)):.2f}")


if __name__ == "__main__":
    main()
