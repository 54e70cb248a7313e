"""What an operator sees, where the rule is pure: credentials masked, one-line errors with
exit status 2, defaults in ``--help``, one log format without library chatter, a schema page
with nothing from elsewhere, a blank message said in words; commands that build only what they
use; the CLI's read paths equal to the service's."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.support.fake_service import FakeThreadService
from threadkeeper.app import cli
from threadkeeper.app.cli import chat as cli_chat
from threadkeeper.app.cli import common as cli_common
from threadkeeper.app.cli import logs as cli_logs
from threadkeeper.app.config import (
    ConfigError,
    Settings,
    describe,
    load_settings,
    mask_url,
    redact,
    secrets_of,
)
from threadkeeper.app.http import HttpSettings, create_http_app
from threadkeeper.app.http.schemas import NOT_BLANK_PATTERN
from threadkeeper.domain.threads import TENANT_OR_USER_ID, THREAD_ID


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("THREADKEEPER_CONFIG", "THREADKEEPER_PROFILE", "THREADKEEPER_TOKENIZER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command: exit status 2, nothing on stdout, one line on stderr (no traceback)."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


# -- credentials ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:secret@cache:6380/0", "redis://:***@cache:6380/0"),
        ("redis://default:secret@cache:6380/0", "redis://default:***@cache:6380/0"),
        ("postgresql://u:pw@pg/tk", "postgresql://u:***@pg/tk"),
        ("mysql+asyncmy://app:hunter2@db:3306/tk", "mysql+asyncmy://app:***@db:3306/tk"),
        ("mysql+asyncmy://app:p@ss@db/tk", "mysql+asyncmy://app:***@db/tk"),
        ("mysql+asyncmy://app@db/tk?password=hunter2", "mysql+asyncmy://app@db/tk?password=***"),
        (
            "postgresql://u@pg/tk?options=-csearch_path%3Dx&sslpassword=k3y&x=1",
            "postgresql://u@pg/tk?options=-csearch_path%3Dx&sslpassword=***&x=1",
        ),
        ("host=pg user=u password=s3cret dbname=tk", "host=pg user=u password=*** dbname=tk"),
        ("postgresql://postgres@127.0.0.1:5432/test", "postgresql://postgres@127.0.0.1:5432/test"),
        ("redis://cache:6380/0", "redis://cache:6380/0"),
    ],
)
def test_every_credential_of_a_url_is_masked(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_describe_masks_every_url_and_token() -> None:
    settings = Settings.of(
        profile="redis-mysql",
        service_token="tok-en-value",
        service_tokens={"other-token-value": ["acme"]},
        postgres_url="postgresql://u:pg-secret@pg/tk?sslpassword=ssl-secret",
        redis_url="redis://:redis-secret@cache:6380/0",
        mysql_url="mysql+asyncmy://app:my-secret@db/tk?password=query-secret",
    )
    shown = describe(settings)
    for secret in secrets_of(settings):
        assert secret not in shown
    values = json.loads(shown)
    assert values["THREADKEEPER_REDIS_URL"] == "redis://:***@cache:6380/0"
    assert values["THREADKEEPER_MYSQL_URL"] == "mysql+asyncmy://app:***@db/tk?password=***"
    assert values["THREADKEEPER_POSTGRES_URL"] == "postgresql://u:***@pg/tk?sslpassword=***"
    assert values["THREADKEEPER_SERVICE_TOKEN"] == "***"


def test_redact_masks_the_settings_secrets_anywhere_in_a_text() -> None:
    settings = Settings.of(mysql_url="mysql+asyncmy://app:p%40ss-word@db/tk")
    assert secrets_of(settings) >= {"p%40ss-word", "p@ss-word"}
    text = "Access denied for 'app' using password p@ss-word; url mysql+asyncmy://app:x@db/tk"
    assert redact(text, secrets_of(settings)) == (
        "Access denied for 'app' using password ***; url mysql+asyncmy://app:***@db/tk"
    )


def test_serve_logs_in_one_format_with_credentials_masked_and_libraries_quiet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings.of(postgres_url="postgresql://u:log-secret@pg/tk")
    with cli_logs.serve_logging("info", settings):
        logging.getLogger("bm25s").setLevel(logging.DEBUG)  # as bm25s does on import
        logging.getLogger("bm25s").debug("Building index from IDs objects")
        logging.getLogger("httpx").info('HTTP Request: POST http://x/v1 "HTTP/1.1 200 OK"')
        logging.getLogger("uvicorn.error").info("Started server process [1]")
        try:
            raise RuntimeError("cannot connect to postgresql://u:log-secret@pg/tk")
        except RuntimeError:
            logging.getLogger("threadkeeper.app.runs").exception("a run failed")
        logging.getLogger("httpx").warning("a library's warning")
    err = capsys.readouterr().err
    assert "log-secret" not in err
    assert "postgresql://u:***@pg/tk" in err
    assert "bm25s" not in err
    assert "HTTP Request" not in err
    heads = [line for line in err.splitlines() if re.match(r"^\d{4}-\d\d-\d\d ", line)]
    assert [line.split(" ", 3)[2:] for line in heads] == [
        ["INFO", "uvicorn: Started server process [1]"],
        ["ERROR", "threadkeeper.app.runs: a run failed"],
        ["WARNING", "httpx: a library's warning"],
    ]
    with cli_logs.serve_logging("debug", settings):
        logging.getLogger("bm25s").debug("Building index from IDs objects")
    assert "bm25s: Building index" in capsys.readouterr().err, "--log-level debug shows them"
    assert not any(
        isinstance(h.formatter, cli_logs.LogFormatter) for h in logging.getLogger().handlers
    )


# -- one line, exit status 2 ---------------------------------------------------------------


def test_an_unknown_profile_lists_the_choices(
    environment: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADKEEPER_PROFILE", "postgress")
    with pytest.raises(ConfigError, match="must be one of embedded, postgres, redis-mysql"):
        load_settings()
    line = one_line_error(capsys, "doctor")
    assert line == (
        "threadkeeper: configuration error: THREADKEEPER_PROFILE must be one of embedded, "
        "postgres, redis-mysql, not 'postgress'"
    )


def test_export_into_a_missing_folder_is_one_line(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = environment / "no-such-folder" / "export.json"
    line = one_line_error(capsys, "export", "--tenant", "t", "--user", "u", "--output", str(target))
    assert line == f"threadkeeper: --output: the folder {target.parent} does not exist"
    assert not (environment / "data").exists(), "refused before opening anything"


def test_an_unknown_counter_names_the_option(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_line_error(capsys, "tokens", "--counter", "nope")
    assert "argument --counter: must be one of o200k_base, cl100k_base, estimate" in line
    assert "THREADKEEPER_TOKENIZER" not in line
    line = one_line_error(capsys, "tokens", "--counter", str(environment / "missing.json"))
    assert f"argument --counter: {environment / 'missing.json'} is not a file" in line


def test_a_tokenizer_json_that_does_not_load_is_one_line(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = environment / "tokenizer.json"
    broken.write_text("{not json", encoding="utf-8")
    line = one_line_error(capsys, "tokens", "--counter", str(broken))
    assert line.startswith(f"threadkeeper: --counter: cannot load {broken}: ")


def test_the_clis_id_rules_are_the_domains() -> None:
    assert f"^{cli_common.TENANT_OR_USER}$" == TENANT_OR_USER_ID.pattern
    assert f"^{cli_common.THREAD}$" == THREAD_ID.pattern


@pytest.mark.parametrize("command", ["replay", "chat"])
def test_help_shows_the_defaults(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: demo)" in text
    assert "(default: demo-user)" in text
    if command == "chat":
        assert "(default: http://127.0.0.1:8000)" in text
        assert "THREADKEEPER_SERVICE_TOKEN" in text
        assert "Ctrl-C stops the answer being streamed" in text


# -- commands build only what they use -----------------------------------------------------

HEAVY = (
    "langchain.agents",
    "threadkeeper.app.agent",
    "threadkeeper.app.container",
    "threadkeeper.adapters.builtin_model",
    "threadkeeper.app.runs",
    "threadkeeper.hooks",
    "uvicorn",
    # issue 29, item 5: the HTTP layer (export took its converters from the routes), LangChain's
    # tracers through langgraph.errors (the service module), the search's bm25s and scipy
    "litestar",
    "langgraph.types",
    "langsmith",
    "bm25s",
    "scipy",
)


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--tenant", "acme-insurance", "--user", "nobody"],
        ["doctor"],
        ["replay", "--thread", "t-1", "--run", "0b0e4b7c-8f0a-4a53-9d55-1f3a5b0c2e11"],
        ["retention", "--older-than", "90d", "--dry-run"],
        ["export-runs", "--since", "2026-01-01"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_read_command_builds_no_model_hooks_or_agent(argv: list[str], tmp_path: Path) -> None:
    """What a command imports is most of its start-up (benchmarks/test_bench_cli.py)."""
    assert _heavy_imports(argv, tmp_path / "data") == (argv[0], [])


def test_replaying_a_stored_run_with_documents_builds_no_run_service(tmp_path: Path) -> None:
    """The replay of a run whose prompt had documents renders them again from the knowledge
    base: that once imported ``app.runs.fold`` for ``chunk_lookup``, and with it the run
    service and LangChain's agent factory (~1 s of every such replay's start-up)."""
    from threadkeeper.app.application import create_app

    data = tmp_path / "data"
    app = create_app(Settings.of(data_dir=str(data), tokenizer="estimate"))
    headers = {"X-Tenant-Id": "acme-insurance", "X-User-Id": "u1", "Accept": "application/json"}
    with TestClient(app, timeout=60) as client:
        answered = client.post(
            "/v1/threads/t-1/runs",
            json={"message": {"content": "Is dental treatment covered by my health insurance?"}},
            headers=headers,
        )
        assert answered.status_code == 200, answered.text
    run_id = answered.json()["run_id"]
    argv = ["replay", "--thread", "t-1", "--run", run_id, "--tenant", "acme-insurance"]
    argv += ["--user", "u1"]
    assert _heavy_imports(argv, data, expect=0) == ("replay", [])


def _heavy_imports(argv: list[str], data: Path, expect: int | None = None) -> tuple[str, Any]:
    """Run the command in a fresh interpreter: the ``HEAVY`` modules it imported."""
    program = (
        "import json, sys\n"
        "from threadkeeper.app import cli\n"
        f"code = cli.main({argv!r})\n"
        f"print(json.dumps([code, sorted(m for m in sys.modules if m.startswith({HEAVY!r}))]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADKEEPER_")}
    env["THREADKEEPER_DATA_DIR"] = str(data)
    env["THREADKEEPER_TOKENIZER"] = "estimate"
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120
    )
    code, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert code in ((0, 1) if expect is None else (expect,)), done.stderr  # 1: no such run
    if argv[0] == "replay" and expect == 0:  # the documents block rendered again, chunk by chunk
        assert re.search(r'<documents>\\n<doc chunk_id=\\"[^"\\]+#\d+\\"', done.stdout), (
            done.stdout[-500:]
        )
    return argv[0], imported


# -- HTTP: the schema page and a blank message ---------------------------------------------


@pytest.fixture
def http() -> Any:
    app = create_http_app(FakeThreadService(), HttpSettings(require_token=False))
    with TestClient(app) as client:
        yield client


def test_the_schema_page_loads_nothing_from_elsewhere(http: Any) -> None:
    page = http.get("/schema")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    text = page.text
    assert "POST</span> <code>/v1/threads/{thread_id}/runs</code>" in text
    assert "id='schema-RunBody'" in text
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", text), "an asset from elsewhere"
    assert "@import" not in text
    assert "url(" not in text
    assert "<script" not in text
    for path in ("/schema/openapi.json", "/schema/openapi.yaml", "/schema/openapi.yml"):
        assert http.get(path).status_code == 200, path
    for cdn_page in ("/schema/redoc", "/schema/swagger", "/schema/elements"):
        assert http.get(cdn_page).status_code == 404, cdn_page


def test_blank_content_is_said_in_words_and_the_pattern_stays_in_openapi(http: Any) -> None:
    headers = {"X-Tenant-Id": "acme", "X-User-Id": "u1", "Accept": "application/json"}
    for blank in ("", "   ", "\n\t", "\u3000"):
        response = http.post(
            "/v1/threads/t1/runs", json={"message": {"content": blank}}, headers=headers
        )
        assert response.status_code == 422, blank
        (error,) = response.json()["errors"]
        assert (error["key"], error["source"]) == ("message.content", "body")
        assert error["message"].startswith("message.content must not be blank"), error
    document = http.get("/schema/openapi.json").json()
    content = document["components"]["schemas"]["RunMessageBody"]["properties"]["content"]
    assert content["pattern"] == NOT_BLANK_PATTERN


# -- the chat client's messages ------------------------------------------------------------


@pytest.mark.parametrize("thread", ["a/b", "..", "x" * 129])
def test_chat_refuses_a_thread_id_no_url_can_carry(
    thread: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 5: ``chat --thread a/b`` printed ``[404] Not Found`` and carried on."""
    assert cli.main(["chat", "--thread", thread, "--url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "is not a thread id: 1 to 128 of the letters" in err


def test_chat_says_which_variable_to_set_on_a_401(monkeypatch: pytest.MonkeyPatch) -> None:
    args = cli.parser().parse_args(["chat"])
    monkeypatch.delenv("THREADKEEPER_SERVICE_TOKEN", raising=False)
    message, fatal = cli_chat._refusal(401, {"detail": "No token"}, args)
    assert fatal
    assert "set THREADKEEPER_SERVICE_TOKEN" in message
    monkeypatch.setenv("THREADKEEPER_SERVICE_TOKEN", "wrong")
    message, fatal = cli_chat._refusal(401, {"detail": "Unknown token"}, args)
    assert "refused the token in THREADKEEPER_SERVICE_TOKEN" in message


def test_chat_shows_the_offending_field_of_a_422() -> None:
    args = cli.parser().parse_args(["chat", "--tenant", "a b"])
    header = {"message": "Expected `str` matching regex", "key": "X-Tenant-Id", "source": "header"}
    message, fatal = cli_chat._refusal(422, {"errors": [header]}, args)
    assert message.startswith("[422] X-Tenant-Id (header, set by --tenant): Expected")
    assert fatal, "every message would be refused the same way"
    blank = {"message": "content must not be blank", "key": "message.content", "source": "body"}
    message, fatal = cli_chat._refusal(422, {"errors": [blank]}, args)
    assert message == "[422] message.content (body): content must not be blank"
    assert not fatal


def test_the_stderr_stream_follows_sys_stderr() -> None:
    stream = cli_logs._Stderr()
    replaced = io.StringIO()
    original, sys.stderr = sys.stderr, replaced
    try:
        stream.write("x")
    finally:
        sys.stderr = original
    assert replaced.getvalue() == "x"


def test_a_log_message_cannot_forge_a_line_of_its_own() -> None:
    """LangGraph logs the name a stored row gave ("Blocked deserialization of %s.%s"): a name
    holding a line break must not start a line that reads like the service's (issue 26)."""
    import logging

    from threadkeeper.app.cli.logs import LogFormatter

    planted = "evil\n2026-12-06 00:00:00,000 ERROR threadkeeper: forged\u2028x\r"
    record = logging.LogRecord(
        "langgraph.checkpoint.serde.jsonplus",
        logging.WARNING,
        __file__,
        1,
        "Blocked deserialization of %s.%s",
        ("os", planted),
        None,
    )
    line = LogFormatter(set()).format(record)
    assert "\n" not in line
    assert "\r" not in line
    assert "\u2028" not in line
    assert "evil\\n2026-12-06" in line


def test_masking_credentials_is_linear_in_the_text() -> None:
    """Every log line is masked: a long word without ``://`` made the user-information pattern
    try a scheme from each of its letters (0.57 s on 32 KiB; here 128 KiB, which took ~9 s).
    A generous bound: the linear pass takes milliseconds."""
    import time

    from threadkeeper.app.config import mask_url, redact

    text = "a" * (128 * 1024)
    started = time.process_time()
    assert mask_url(text) == text
    assert redact(text, {"secret-token"}) == text
    assert time.process_time() - started < 1.0
    assert mask_url("see postgresql://u:pw@h/db") == "see postgresql://u:***@h/db"
