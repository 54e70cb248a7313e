"""``threadkeeper export`` and ``threadkeeper retention`` on the embedded profile, beside a
running server (which holds the data directory's lock)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from tests.support.followups import kept, settled_memory
from threadkeeper.app import cli
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings
from threadkeeper.domain import transcript
from threadkeeper.domain.threads import stored_user_id

TENANT = "acme-insurance"
USER = "export-user"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER}
JSON_MODE = {**HEADERS, "Accept": "application/json"}


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
    """The service running on ``data_dir``: it holds the data directory's lock."""
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        yield client


def run(client: TestClient[Litestar], thread: str, content: str, **headers: str) -> Any:
    response = client.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": content}},
        headers={**JSON_MODE, **headers},
    )
    assert response.status_code == 200, response.text
    return response.json()


def all_messages(client: TestClient[Litestar], thread: str) -> list[Any]:
    """The thread's transcript through GET /messages, every page."""
    messages: list[Any] = []
    before = None
    while True:
        params: dict[str, Any] = {"limit": 1}
        if before:
            params["before"] = before
        page = client.get(f"/v1/threads/{thread}/messages", params=params, headers=HEADERS)
        assert page.status_code == 200
        body = page.json()
        messages[:0] = body["messages"]
        if body["next_before"] is None:
            return messages
        before = body["next_before"]


def test_export_writes_the_users_threads_memory_and_feedback(
    server: TestClient[Litestar],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = run(server, "claims", "Is dental treatment covered by my health insurance?")
    run(server, "claims", "And how do I file a claim?")
    run(server, "travel", "Does travel insurance cover lost luggage?")
    run(server, "not-mine", "Is dental covered?", **{"X-User-Id": "someone-else"})
    feedback = server.post(
        f"/v1/threads/claims/runs/{first['run_id']}/feedback",
        json={"score": -1, "comment": "too short"},
        headers=HEADERS,
    )
    assert feedback.status_code == 204
    memory = settled_memory(server, USER, HEADERS)
    assert memory["profile"] or memory["facts"], "the runs left something to remember"

    output = tmp_path / "export.json"
    monkeypatch.setattr(transcript, "MAX_PAGE", 1)  # export pages through long threads
    code = cli.main(["export", "--tenant", TENANT, "--user", USER, "--output", str(output)])
    assert code == 0
    err = capsys.readouterr().err
    assert "exported 2 threads, 6 messages" in err

    exported = json.loads(output.read_text(encoding="utf-8"))
    assert exported["tenant_id"] == TENANT
    assert exported["user_id"] == USER
    threads = {t["thread_id"]: t["messages"] for t in exported["threads"]}
    assert set(threads) == {"claims", "travel"}  # not another user's thread
    for thread_id, messages in threads.items():
        assert messages == all_messages(server, thread_id)  # as GET /messages serves them
    assert [m["role"] for m in threads["claims"]] == ["human", "ai", "human", "ai"]
    assert exported["memory"] == kept(memory)  # as GET /memory serves it, provenance included
    assert all(item["source"]["thread_id"] for item in memory["profile"] + memory["facts"])
    [given] = exported["feedback"]
    assert given["thread_id"] == "claims"
    assert given["run_id"] == first["run_id"]
    assert (given["score"], given["comment"]) == (-1, "too short")
    assert given["at"]


def test_export_to_stdout_of_a_user_with_nothing(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "--tenant", TENANT, "--user", "nobody"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["threads"] == []
    assert exported["feedback"] == []
    assert exported["memory"] == {"profile": [], "facts": []}


def test_export_refuses_an_invalid_user_id_in_words(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "--tenant", TENANT, "--user", "a\tb"]) == 2
    err = capsys.readouterr().err
    assert "argument --user: the user id has a control character at 1" in err
    assert "1 to 128 printable characters" in err
    assert len(err.strip().splitlines()) == 1, err


def test_export_takes_any_printable_user_id(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ids real backends use (issue 29, item 3): exported under their stored form."""
    assert cli.main(["export", "--tenant", TENANT, "--user", "erin@example.com"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["user_id"] == stored_user_id("erin@example.com")
    assert exported["threads"] == []


def test_retention_beside_a_running_server(
    server: TestClient[Litestar], capsys: pytest.CaptureFixture[str]
) -> None:
    run(server, "old", "Is dental treatment covered by my health insurance?")
    time.sleep(1.2)
    capsys.readouterr()

    # counting reads only: it works beside the server
    assert cli.main(["retention", "--older-than", "1s", "--dry-run"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True
    assert "deleted" not in report, "a dry run deletes nothing"
    assert report["would_delete"] == {"threads": 1, "messages": 2, "memory_items": 0, "feedback": 0}

    # deleting does not (a run in flight there could commit into a deleted thread): one
    # clear line saying what to do, no traceback
    assert cli.main(["retention", "--older-than", "1s"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "a threadkeeper server is running" in err
    assert "stop it first" in err
    assert "--dry-run works" in err
    assert server.get("/v1/threads/old/messages", headers=HEADERS).status_code == 200


def test_retention_deletes_when_no_server_runs(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        run(client, "old", "Is dental treatment covered by my health insurance?")
    time.sleep(1.2)
    assert cli.main(["retention", "--older-than", "1s"]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"]["threads"] == 1


def test_a_dry_run_counts_what_the_sweep_then_deletes(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Threads, messages and feedback alike (a dry run used to count threads only: 0
    messages, then the sweep deleted 16)."""
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        for thread in ("old-1", "old-2", "old-3"):
            answer = run(client, thread, "Is dental treatment covered by my health insurance?")
            run(client, thread, "And how do I file a claim?")
            scored = client.post(
                f"/v1/threads/{thread}/runs/{answer['run_id']}/feedback",
                json={"score": 1},
                headers=HEADERS,
            )
            assert scored.status_code == 204
    time.sleep(1.2)
    # batches of 2: the sweep pages, the count must not
    assert cli.main(["retention", "--older-than", "1s", "--batch", "2", "--dry-run"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert cli.main(["retention", "--older-than", "1s", "--batch", "2"]) == 0
    swept = json.loads(capsys.readouterr().out)
    assert preview["would_delete"] == swept["deleted"]
    assert swept["deleted"] == {"threads": 3, "messages": 12, "memory_items": 0, "feedback": 3}
    assert preview["batches"] == swept["batches"] == 2
    assert cli.main(["retention", "--older-than", "1s", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["would_delete"]["threads"] == 0


def test_retention_refuses_a_batch_below_one(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["retention", "--older-than", "1d", "--batch", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    assert "argument --batch: must be at least 1, not 0" in err
    app = create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate"))
    with TestClient(app, timeout=60) as client:
        assert client.get("/v1/threads/old/messages", headers=HEADERS).status_code == 404


def test_retention_refuses_a_bad_duration(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["retention", "--older-than", "soon"]) == 2
    assert "--older-than: not a positive duration" in capsys.readouterr().err


def test_doctor_says_what_follow_up_work_is_pending() -> None:
    from datetime import UTC, datetime, timedelta

    from threadkeeper.app.cli.operator import followup_line
    from threadkeeper.domain.followups import FollowUpCounts

    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    assert followup_line(FollowUpCounts(), now) == "follow-up work: 0 pending, 0 given up"
    busy = FollowUpCounts({"memory": 3}, {"memory": 1}, now - timedelta(seconds=42))
    assert (
        followup_line(busy, now) == "follow-up work: 3 pending (memory 3), oldest 42 s, 1 given up"
    )
