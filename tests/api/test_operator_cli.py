"""``retention --dry-run`` counts what the sweep then deletes, and ``export`` and ``doctor``
read each profile's storage without the agent — on every profile (the CLI in process,
pointed at the storage the app under test wrote)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from litestar.testing import TestClient

from tests.api.conftest import TENANT, USER, AppFactory, Servers
from tests.api.test_replay import point_cli_at
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
        memory = client.get(f"/v1/users/{USER}/memory").json()
        point_cli_at(monkeypatch, profile, tmp_path, database)
        assert cli.main(["export", "--tenant", TENANT, "--user", USER]) == 0
        exported = json.loads(capsys.readouterr().out)
        assert cli.main(["doctor"]) == 0
        doctor = capsys.readouterr().out
    assert exported["threads"] == [{"thread_id": "exported", "messages": served}]
    assert exported["memory"] == memory
    assert "error" not in doctor
    assert "tokenizer o200k_base: ok" in doctor
