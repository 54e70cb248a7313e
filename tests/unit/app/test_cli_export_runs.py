"""``threadkeeper export-runs`` on the embedded profile: one JSON line per run, streamed a page
at a time, each model call's window as ``replay`` rebuilds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from threadkeeper.app import cli
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings

TENANT = "acme-insurance"
USER = "export-user"
OTHER_USER = "second-user"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER}
YESTERDAY = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("THREADKEEPER_CONFIG", "THREADKEEPER_PROFILE", "THREADKEEPER_RETENTION_DAYS"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "data"
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(data))
    monkeypatch.setenv("THREADKEEPER_TOKENIZER", "estimate")
    return data


@pytest.fixture
def server(data_dir: Path) -> Iterator[TestClient[Litestar]]:
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        yield client


def run(client: TestClient[Litestar], thread: str, content: str, **headers: str) -> Any:
    response = client.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": content}},
        headers={**HEADERS, "Accept": "application/json", **headers},
    )
    assert response.status_code == 200, response.text
    return response.json()


def lines(text: str) -> list[dict[str, Any]]:
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_export_runs_writes_each_run_with_its_windows_answer_and_feedback(
    server: TestClient[Litestar], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(server, "claims", "Is dental treatment covered by my health insurance?")
    second = run(server, "claims", "And how do I file a claim?")
    theirs = run(
        server, "claims", "Does travel insurance cover lost luggage?", **{"X-User-Id": OTHER_USER}
    )
    run(server, "elsewhere", "Is dental covered?", **{"X-Tenant-Id": "globex"})
    rated = server.post(
        f"/v1/threads/claims/runs/{first['run_id']}/feedback",
        json={"score": -1, "comment": "too short"},
        headers=HEADERS,
    )
    assert rated.status_code == 204

    output = tmp_path / "runs.jsonl"
    args = ["export-runs", "--since", YESTERDAY, "--tenant", TENANT, "--output", str(output)]
    assert cli.main(args) == 0  # beside the running server
    assert f"exported 3 runs of tenant {TENANT}" in capsys.readouterr().err
    text = output.read_text(encoding="utf-8")
    exported = lines(text)
    assert [e["run_id"] for e in exported] == [r["run_id"] for r in (first, second, theirs)]
    assert {e["tenant_id"] for e in exported} == {TENANT}
    assert {e["thread_id"] for e in exported} == {"claims"}
    # the user is a pseudonym of this export: one per user, never their id
    assert USER not in text
    assert OTHER_USER not in text
    assert "user_id" not in exported[0]
    assert exported[0]["user"] == exported[1]["user"] != exported[2]["user"]
    assert {e["conversation"] for e in exported} == {None}  # no THREADKEEPER_TRACE_ID_KEY

    for line, answered in zip(exported, (first, second, theirs), strict=True):
        assert line["status"] == answered["status"]
        assert line["answer"] == {
            "id": answered["message"]["id"],
            "content": answered["message"]["content"],
            "citations": answered["message"]["citations"],
        }
        assert line["usage"] == answered["usage"]
        assert line["model"] == "threadkeeper-builtin"
        assert line["prompt_version"]
        started, finished = (datetime.fromisoformat(line[k]) for k in ("started_at", "finished_at"))
        assert started <= finished
    assert exported[0]["answer"]["citations"], "the dental question is answered from a document"
    assert exported[0]["feedback"]["score"] == -1
    assert exported[0]["feedback"]["comment"] == "too short"
    assert exported[1]["feedback"] is None

    # each model call's window is what replay prints for the run
    replay = ["replay", "--thread", "claims", "--run", second["run_id"], "--tenant", TENANT]
    assert cli.main([*replay, "--user", USER]) == 0
    replayed = lines(capsys.readouterr().out)[1:]
    assert exported[1]["model_calls"] == replayed
    window = exported[1]["model_calls"][-1]["messages"]
    assert window[0]["role"] == "system"
    assert [m["role"] for m in window[1:]] == ["human", "ai", "human"]
    assert window[-1]["content"] == "And how do I file a claim?"

    # every tenant's, to standard output
    assert cli.main(["export-runs", "--since", YESTERDAY]) == 0
    everyone = lines(capsys.readouterr().out)
    assert {e["tenant_id"] for e in everyone} == {TENANT, "globex"}
    assert len(everyone) == 4


def test_export_runs_streams_a_page_at_a_time(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Five runs read two at a time: three page reads, and each run's line is in the file
    before the next page is read (a page, not the export, is held)."""
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        ids = [run(client, f"t-{i}", "Is dental treatment covered?")["run_id"] for i in range(5)]
    output = tmp_path / "runs.jsonl"
    written_at_each_page: list[int] = []

    def page_read(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "ORDER BY tk_run_records.created_at" in (
            statement
        ):
            written_at_each_page.append(len(output.read_text(encoding="utf-8").splitlines()))

    event.listen(Engine, "before_cursor_execute", page_read)
    try:
        args = ["export-runs", "--since", YESTERDAY, "--page", "2", "--output", str(output)]
        assert cli.main(args) == 0
    finally:
        event.remove(Engine, "before_cursor_execute", page_read)
    assert written_at_each_page == [0, 2, 4]
    assert [e["run_id"] for e in lines(output.read_text(encoding="utf-8"))] == ids


def test_export_runs_of_an_unknown_tenant_or_from_a_future_date_is_empty(
    server: TestClient[Litestar], capsys: pytest.CaptureFixture[str]
) -> None:
    run(server, "claims", "Is dental treatment covered?")
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert cli.main(["export-runs", "--since", tomorrow]) == 0
    assert capsys.readouterr().out == ""
    assert cli.main(["export-runs", "--since", YESTERDAY, "--tenant", "nobody"]) == 0
    assert capsys.readouterr().out == ""
    # a time with a zone, and one without (UTC)
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).astimezone()
    assert cli.main(["export-runs", "--since", an_hour_ago.isoformat()]) == 0
    assert len(lines(capsys.readouterr().out)) == 1
    naive = (datetime.now(UTC) + timedelta(hours=1)).replace(tzinfo=None)
    assert cli.main(["export-runs", "--since", naive.isoformat()]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("since", ["last week", "2026-13-01", "01/11/2026", ""])
def test_export_runs_refuses_a_since_that_is_not_a_date(
    data_dir: Path, since: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export-runs", "--since", since]) == 2
    err = capsys.readouterr().err
    assert "--since" in err
    assert "is not a date (YYYY-MM-DD)" in err
    assert "Traceback" not in err


def test_export_runs_needs_since_and_refuses_a_bad_tenant_or_output(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export-runs"]) == 2
    assert "--since" in capsys.readouterr().err
    assert cli.main(["export-runs", "--since", YESTERDAY, "--tenant", "a b"]) == 2
    assert "is not a tenant id" in capsys.readouterr().err
    missing = tmp_path / "no-such-folder" / "runs.jsonl"
    assert cli.main(["export-runs", "--since", YESTERDAY, "--output", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_conversation_is_the_threads_id_in_traces(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``THREADKEEPER_TRACE_ID_KEY`` a line names its thread as traces do
    (``gen_ai.conversation.id``): one id per thread, another user's same thread id another."""
    from threadkeeper.app.telemetry import ConversationIds

    key = "trace-key-for-the-test"
    monkeypatch.setenv("THREADKEEPER_TRACE_ID_KEY", key)
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        run(client, "claims", "Is dental treatment covered?")
        run(client, "claims", "How do I file a claim?")
        run(client, "claims", "Is dental treatment covered?", **{"X-User-Id": OTHER_USER})
    assert cli.main(["export-runs", "--since", YESTERDAY]) == 0
    exported = lines(capsys.readouterr().out)
    ids = ConversationIds(key)
    assert [e["conversation"] for e in exported] == [
        ids.of(f"{TENANT}:{USER}:claims"),
        ids.of(f"{TENANT}:{USER}:claims"),
        ids.of(f"{TENANT}:{OTHER_USER}:claims"),
    ]
    assert exported[0]["conversation"] != exported[2]["conversation"]


def test_a_reader_that_closes_the_output_ends_the_export_without_a_traceback(
    server: TestClient[Litestar], data_dir: Path
) -> None:
    """``export-runs | head``: the pipe's reader is gone (here before the first line), the
    command says so in one line and exits 1."""
    run(server, "claims", "Is dental treatment covered?")
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "threadkeeper.app.cli", "export-runs", "--since", YESTERDAY],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert done.returncode == 1, done.stderr
    assert done.stderr == "threadkeeper: output closed after 0 runs\n"
