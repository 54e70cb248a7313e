"""``threadkeeper replay`` rebuilds exactly what the model saw in an earlier run."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from litestar.testing import TestClient

from tests.api.conftest import TENANT, TOKEN, USER, AppFactory, Servers
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.app import cli


def point_cli_at(
    monkeypatch: pytest.MonkeyPatch, profile: str, root: Path, database: Servers | None
) -> None:
    """The CLI's environment for the storage the app under test uses."""
    monkeypatch.setenv("THREADKEEPER_PROFILE", profile)
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(root / "data"))
    if database is not None:
        for name, value in database.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("THREADKEEPER_SERVICE_TOKEN", TOKEN)


def test_replay_prints_every_model_call_of_a_run(
    make_app: AppFactory,
    profile: str,
    auth: dict[str, str],
    database: Servers | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with TestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        first = client.post(
            "/v1/threads/replayed/runs",
            json={"message": {"content": "Is dental treatment covered?"}},
            headers={"Accept": "application/json"},
        ).json()
        second = client.post(
            "/v1/threads/replayed/runs",
            json={"message": {"content": "Please give me the full details of the dental cover"}},
            headers={"Accept": "application/json"},
        ).json()
        point_cli_at(monkeypatch, profile, tmp_path, database)
        args = ["replay", "--thread", "replayed", "--tenant", TENANT, "--user", USER]
        assert cli.main([*args, "--run", first["run_id"]]) == 0  # an earlier run too
        as_given = capsys.readouterr().out
        earlier = [json.loads(line) for line in as_given.splitlines()]
        # a run id in any letter case, as the API takes it
        assert cli.main([*args, "--run", first["run_id"].upper()]) == 0
        assert capsys.readouterr().out == as_given
        assert cli.main([*args, "--run", second["run_id"]]) == 0
    assert earlier[0]["run_id"] == first["run_id"]
    assert earlier[1]["messages"][1]["content"] == "Is dental treatment covered?"
    assert all(m["role"] != "missing" for call in earlier[1:] for m in call["messages"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    head, calls = lines[0], lines[1:]
    assert head["run_id"] == second["run_id"]
    assert head["chunk_ids"], "the retrieved chunks are recorded"
    assert len(calls) == 2, "a tool call, then the answer"
    first_call, answer_call = calls
    system = first_call["messages"][0]
    assert system["role"] == "system"
    assert all(f'chunk_id="{c}"' in system["content"] for c in head["chunk_ids"])
    # the documents' text, which the record does not store, is rendered again for replay
    knowledge = KnowledgeBase.from_directory()
    for chunk_id in head["chunk_ids"]:
        chunk = knowledge.chunk(TENANT, chunk_id)
        assert chunk is not None
        assert html.escape(chunk.text) in system["content"]
    shown = [m.get("content") for m in first_call["messages"][1:]]
    assert shown[0] == "Is dental treatment covered?"
    assert shown[1] == first["message"]["content"]
    assert shown[-1] == "Please give me the full details of the dental cover"
    roles = [m["role"] for m in answer_call["messages"]]
    assert roles[-2:] == ["ai", "tool"]
    assert answer_call["messages"][-2]["tool_calls"][0]["name"] == "fetch_faq_document"
    assert all(m["role"] != "missing" for call in calls for m in call["messages"])
    assert all(call["tokens"] <= call["budget"] for call in calls)


def test_replay_of_an_unknown_run_fails_clearly(
    make_app: AppFactory,
    profile: str,
    database: Servers | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    unknown = "0b0e4b7c-8f0a-4a53-9d55-1f3a5b0c2e11"
    with TestClient(make_app(), timeout=30):
        point_cli_at(monkeypatch, profile, tmp_path, database)
        code = cli.main(["replay", "--thread", "nothing", "--run", unknown.upper()])
    assert code == 1
    err = capsys.readouterr().err
    assert f"no run {unknown} in thread nothing of user demo-user in tenant demo" in err
    assert "--user and --tenant say whose thread to look in" in err  # issue 29, item 5


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--run", "nope", "'nope' is not a run id (a UUID)"),
        ("--thread", "not a thread", "'not a thread' is not a thread id"),
        ("--tenant", "a:b", "'a:b' is not a tenant id: 1 to 128 of the letters"),
        ("--user", "a\tb", "the user id has a control character at 1"),
    ],
)
def test_replay_of_an_invalid_id_is_one_line(
    option: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"--thread": "t-1", "--run": "0b0e4b7c-8f0a-4a53-9d55-1f3a5b0c2e11", option: value}
    code = cli.main(["replay", *(item for pair in args.items() for item in pair)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err  # one line, no usage text, no traceback
    assert f"argument {option}: {says}" in err


def test_an_early_run_replays_after_a_long_conversation(
    make_app: AppFactory,
    profile: str,
    auth: dict[str, str],
    database: Servers | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On redis-mysql, compaction has long removed the first run's messages from the
    checkpoints by then; replay takes their text from the archive."""
    questions = [
        "Is dental treatment covered?",
        "Does my policy cover physiotherapy sessions?",
        "How do I file a claim for a hospital stay?",
        "What is the waiting period for maternity cover?",
        "Can I add my spouse to my health insurance?",
        "Is emergency treatment abroad covered?",
    ] * 2
    with TestClient(make_app(token_budget=900), timeout=30) as client:
        client.headers.update(auth)
        bodies = [
            client.post(
                "/v1/threads/long/runs",
                json={"message": {"content": q}},
                headers={"Accept": "application/json"},
            ).json()
            for q in questions
        ]
        point_cli_at(monkeypatch, profile, tmp_path, database)
        args = ["replay", "--thread", "long", "--tenant", TENANT, "--user", USER]
        assert cli.main([*args, "--run", bodies[0]["run_id"]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    calls = lines[1:]
    assert calls
    assert all(m["role"] != "missing" for call in calls for m in call["messages"])
    assert calls[0]["messages"][1]["content"] == questions[0]
