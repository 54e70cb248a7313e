"""``retention --dry-run`` counts what the sweep then deletes, and ``export``,
``export-runs`` and ``doctor`` read each profile's storage without the agent — on every
profile (the CLI in process, pointed at the storage the app under test wrote)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.api.conftest import TENANT, USER, AppFactory, Servers
from tests.api.test_replay import point_cli_at
from tests.support.followups import kept, settled_memory
from threadkeeper.app import cli


def test_a_dry_run_counts_what_the_sweep_then_deletes(
    make_app: AppFactory,
    profile: str,
    auth: dict[str, str],
    database: Servers | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with TestClient(make_app(), timeout=60) as client:
        client.headers.update(auth)
        for thread in ("idle-1", "idle-2"):
            for question in ("Is dental treatment covered?", "How do I file a claim?"):
                answer = client.post(
                    f"/v1/threads/{thread}/runs",
                    json={"message": {"content": question}},
                    headers={"Accept": "application/json"},
                )
                assert answer.status_code == 200, answer.text
            scored = client.post(
                f"/v1/threads/{thread}/runs/{answer.json()['run_id']}/feedback",
                json={"score": -1, "comment": "too short"},
            )
            assert scored.status_code == 204
    time.sleep(1.2)
    point_cli_at(monkeypatch, profile, tmp_path, database)
    assert cli.main(["retention", "--older-than", "1s", "--batch", "1", "--dry-run"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert cli.main(["retention", "--older-than", "1s", "--batch", "1"]) == 0
    swept = json.loads(capsys.readouterr().out)
    assert swept["deleted"] == {"threads": 2, "messages": 8, "memory_items": 0, "feedback": 2}
    assert preview["would_delete"] == swept["deleted"]
    assert preview["batches"] == swept["batches"] == 2


def test_export_and_doctor_on_the_profiles_storage(
    make_app: AppFactory,
    profile: str,
    auth: dict[str, str],
    database: Servers | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with TestClient(make_app(), timeout=60) as client:
        client.headers.update(auth)
        answer = client.post(
            "/v1/threads/exported/runs",
            json={"message": {"content": "Is dental treatment covered?"}},
            headers={"Accept": "application/json"},
        )
        assert answer.status_code == 200, answer.text
        served = client.get("/v1/threads/exported/messages").json()["messages"]
        memory = kept(settled_memory(client, USER))
        point_cli_at(monkeypatch, profile, tmp_path, database)
        assert cli.main(["export", "--tenant", TENANT, "--user", USER]) == 0
        exported = json.loads(capsys.readouterr().out)
        assert cli.main(["doctor"]) == 0
        doctor = capsys.readouterr().out
    assert exported["threads"] == [{"thread_id": "exported", "messages": served}]
    assert exported["memory"] == memory
    assert "error" not in doctor
    assert "tokenizer o200k_base: ok" in doctor
    assert "follow-up work: 0 pending, 0 given up" in doctor  # the memory was written


def test_export_runs_on_the_profiles_storage(
    make_app: AppFactory,
    profile: str,
    auth: dict[str, str],
    database: Servers | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run per line, a page at a time, each model call as ``replay`` prints it, feedback
    with it; a deleted thread's and an erased user's runs are not exported."""
    questions = ("Is dental treatment covered?", "How do I file a claim?")
    with TestClient(make_app(), timeout=60) as client:
        client.headers.update(auth)

        def ask(thread: str, question: str, user: str = USER) -> dict[str, Any]:
            answer = client.post(
                f"/v1/threads/{thread}/runs",
                json={"message": {"content": question}},
                headers={"Accept": "application/json", "X-User-Id": user},
            )
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        kept = [ask("evaluated", q) for q in questions]
        scored = client.post(
            f"/v1/threads/evaluated/runs/{kept[1]['run_id']}/feedback",
            json={"score": 1, "comment": "clear"},
        )
        assert scored.status_code == 204
        ask("deleted", questions[0])
        assert client.delete("/v1/threads/deleted").status_code == 204
        ask("evaluated", questions[0], user="erased-user")
        erased = client.delete("/v1/users/erased-user", headers={"X-User-Id": "erased-user"})
        assert erased.status_code == 200, erased.text
        point_cli_at(monkeypatch, profile, tmp_path, database)
        since = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
        args = ["export-runs", "--since", since, "--tenant", TENANT, "--page", "1"]
        assert cli.main(args) == 0
        exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        replayed = []
        for answered in kept:
            replay = ["replay", "--thread", "evaluated", "--run", answered["run_id"]]
            assert cli.main([*replay, "--tenant", TENANT, "--user", USER]) == 0
            replayed.append([json.loads(x) for x in capsys.readouterr().out.splitlines()][1:])
    assert [e["run_id"] for e in exported] == [a["run_id"] for a in kept]
    assert [e["model_calls"] for e in exported] == replayed
    assert all(
        call["messages"][-1]["role"] != "missing" for e in exported for call in e["model_calls"]
    )
    for line, answered in zip(exported, kept, strict=True):
        assert line["thread_id"] == "evaluated"
        assert line["answer"]["content"] == answered["message"]["content"]
        assert line["answer"]["citations"] == answered["message"]["citations"]
        assert USER not in json.dumps(line)
    assert exported[0]["feedback"] is None
    assert (exported[1]["feedback"]["score"], exported[1]["feedback"]["comment"]) == (1, "clear")
