"""Through the application on every profile, every logger at DEBUG: a run, its transcript read
back, feedback, and feedback whose statement fails (its table dropped, a 5xx the error handler
logs with its traceback) leave the user id, the thread id, the message's words and the comment
in no log line as ``serve`` writes it (text with tracebacks, or JSON) — docs/pii.md."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.api.conftest import AppFactory, Servers, headers_for
from tests.support.log_values import assert_nowhere, record_everything
from tests.support.mysql import query
from threadkeeper.adapters.embedded.backend import DATABASE


def drop_feedback(profile: str, root: Path, servers: Servers | None) -> None:
    """``tk_feedback`` dropped beside the running application."""
    if profile == "embedded":
        with sqlite3.connect(root / "data" / DATABASE) as conn:
            conn.execute("DROP TABLE tk_feedback")
        return
    assert servers is not None
    if profile == "postgres":
        assert servers.postgres_url is not None
        with psycopg.connect(servers.postgres_url, autocommit=True) as conn:
            conn.execute("DROP TABLE tk_feedback")
    else:
        assert servers.mysql_url is not None
        query(servers.mysql_url, "DROP TABLE tk_feedback")


def the_apps(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """Without the test client's own request lines (httpx's, naming the paths it asked)."""
    return [r for r in records if not (r.name == "httpx" and "testserver" in r.getMessage())]


async def test_a_failing_statement_leaves_no_values_in_the_logs(
    profile: str,
    make_app: AppFactory,
    tmp_path: Path,
    database: Servers | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from litestar.testing import AsyncTestClient

    mark = uuid.uuid4().hex[:10]
    user, thread = f"leakuser{mark}", f"leakthread{mark}"
    words, comment = f"leakwords{mark}", f"leaknote{mark}"
    record_everything(caplog)
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update({**headers_for(profile), "X-User-Id": user})
        answer = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": f"Is dental treatment covered? {words}"}},
            headers={"Accept": "application/json"},
        )
        assert answer.status_code == 200, answer.text
        assert words in (await client.get(f"/v1/threads/{thread}/messages")).text
        url = f"/v1/threads/{thread}/runs/{answer.json()['run_id']}/feedback"
        assert (await client.post(url, json={"score": 1, "comment": comment})).status_code == 204
        drop_feedback(profile, tmp_path, database)
        failed = await client.post(url, json={"score": -1, "comment": comment})
        assert failed.status_code >= 500
    logged = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert logged, "the failure is logged with its traceback"
    assert_nowhere((user, thread, words, comment), the_apps(caplog.records))
