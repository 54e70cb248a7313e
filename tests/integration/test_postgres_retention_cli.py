"""``threadkeeper retention --older-than 90d [--dry-run] [--batch N]`` on the postgres profile,
as an operator runs it: a real process, on threads a real app wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from tests.api.conftest import TOKEN, Servers, headers_for, run, settings_for
from threadkeeper.adapters.postgres.ledger import TABLE as LEDGER
from threadkeeper.app.application import create_app

pytestmark = pytest.mark.integration


def retention(url: str, tmp: Path, *args: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "THREADKEEPER_PROFILE": "postgres",
        "THREADKEEPER_POSTGRES_URL": url,
        "THREADKEEPER_SERVICE_TOKEN": TOKEN,
        "THREADKEEPER_DATA_DIR": str(tmp),
    }
    done = subprocess.run(
        [sys.executable, "-m", "threadkeeper.app.cli", "retention", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def age(url: str, thread: str, days: int) -> None:
    """Move a thread's checkpoints ``days`` into the past (their ``ts``)."""
    when = (datetime.now(UTC) - timedelta(days=days)).isoformat()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{ts}', to_jsonb(%s::text)) "
            "WHERE thread_id LIKE %s",
            (when, f"%:{thread}"),
        )


async def test_retention_deletes_idle_threads_in_batches_and_dry_run_counts_the_same(
    url: str, tmp_path: Path
) -> None:
    app = create_app(settings_for("postgres", tmp_path, Servers(postgres_url=url)))
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(headers_for("postgres"))
        for thread in ("idle-1", "idle-2", "idle-3", "active"):
            await run(client, thread, "Is dental treatment covered?")
    for thread in ("idle-1", "idle-2", "idle-3"):
        age(url, thread, 120)
    age(url, "active", 10)

    dry = retention(url, tmp_path, "--older-than", "90d", "--batch", "2", "--dry-run")
    assert dry["dry_run"] is True
    assert "deleted" not in dry
    assert dry["would_delete"] == {"threads": 3, "messages": 6, "memory_items": 0, "feedback": 0}
    assert dry["batches"] == 2
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (4,)

    done = retention(url, tmp_path, "--older-than", "90d", "--batch", "2")
    assert done["batches"] == 2
    assert done["deleted"]["threads"] == 3
    assert done["deleted"]["messages"] == 6
    assert done["deleted"] == dry["would_delete"]
    with psycopg.connect(url) as conn:
        left = conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()
        ledger = conn.execute(f"SELECT DISTINCT thread_id FROM {LEDGER}").fetchall()
        records = conn.execute("SELECT DISTINCT thread_key FROM tk_run_records").fetchall()
    assert [r[0].rsplit(":", 1)[-1] for r in left] == ["active"]
    assert [r[0].rsplit(":", 1)[-1] for r in ledger] == ["active"]
    assert [r[0].rsplit(":", 1)[-1] for r in records] == ["active"]

    again = retention(url, tmp_path, "--older-than", "90d")
    assert again["deleted"]["threads"] == 0
