"""What an operator sees from real ``threadkeeper`` processes: no credential in any output,
one line for a port already in use, one log format naming the model, no library chatter,
and the README's curl session working as pasted into bash."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_server import free_port, serve, wait_ready
from tests.support.fake_openai import FakeProvider, fake_provider
from tests.support.servers import ProfileServer, profile_server

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Is dental treatment covered by my health insurance?"
LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: "
)
"""``threadkeeper serve``'s one log format (``threadkeeper.app.cli.logs.LOG_FORMAT``)."""


def clean_environment(**env: str) -> dict[str, str]:
    """The test's environment without its THREADKEEPER_* settings, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("THREADKEEPER_")}
    return {**base, **env}


def threadkeeper(*args: str, env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "threadkeeper.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


# -- credentials ---------------------------------------------------------------------------

SECRETS = {
    "redis": "rEd1s-Pa55word",
    "mysql": "mY5ql:pa@ss",  # a ':' and an '@' in it, percent-encoded in the URL
    "query": "qu3ry-Pa55",
    "postgres": "p0stgres-Pa55",
    "sslpassword": "ssl-K3y-Pa55",
    "token": "t0ken-5ecret-value",
}


def secret_settings(data_dir: Path) -> dict[str, str]:
    """Settings whose every URL holds credentials, on servers nothing listens on."""
    closed = free_port()
    return {
        "THREADKEEPER_DATA_DIR": str(data_dir),
        "THREADKEEPER_SERVICE_TOKEN": SECRETS["token"],
        "THREADKEEPER_REDIS_URL": f"redis://:{SECRETS['redis']}@127.0.0.1:{closed}/0",
        "THREADKEEPER_MYSQL_URL": (
            "mysql+asyncmy://app:mY5ql%3Apa%40ss@127.0.0.1:"
            f"{closed}/tk?charset=utf8mb4&password={SECRETS['query']}"
        ),
        "THREADKEEPER_POSTGRES_URL": (
            f"postgresql://app:{SECRETS['postgres']}@127.0.0.1:{closed}/tk"
            f"?sslpassword={SECRETS['sslpassword']}"
        ),
    }


def assert_no_secret(output: str) -> None:
    for name, secret in SECRETS.items():
        for form in {secret, secret.replace(":", "%3A").replace("@", "%40")}:
            assert form not in output, f"the {name} credential is printed:\n{output}"


def test_no_credential_in_doctor_start_up_or_a_failing_connection(tmp_path: Path) -> None:
    env = clean_environment(THREADKEEPER_PROFILE="redis-mysql", **secret_settings(tmp_path))

    code, doctor = threadkeeper("doctor", env=env)
    assert code == 1, doctor  # the servers cannot be reached
    assert "redis://:***@127.0.0.1" in doctor
    assert "mysql+asyncmy://app:***@127.0.0.1" in doctor
    assert "password=***" in doctor
    assert "postgresql://app:***@127.0.0.1" in doctor
    assert "sslpassword=***" in doctor
    assert '"THREADKEEPER_SERVICE_TOKEN": "***"' in doctor
    assert "redis-mysql storage: error:" in doctor
    assert_no_secret(doctor)

    code, started = threadkeeper("serve", "--port", str(free_port()), env=env)
    assert code == 2
    assert "cannot reach MySQL" in started
    assert len(started.strip().splitlines()) == 1, started
    assert_no_secret(started)

    for command in (
        ["migrate"],
        ["retention", "--older-than", "1d", "--dry-run"],
        ["export", "--tenant", "t", "--user", "u"],
    ):
        code, output = threadkeeper(*command, env=env)
        assert code == 1, output
        assert "Traceback" not in output
        assert "cannot reach the redis-mysql storage" in output
        assert_no_secret(output)


@pytest.mark.integration
def test_no_credential_in_the_start_up_lines_and_logs_of_a_running_server(
    tmp_path: Path,
) -> None:
    """PostgreSQL here trusts local connections: a password in the URL is accepted, unused."""
    from tests.support.postgres import fresh_schema

    with fresh_schema() as url:
        secret_url = url.replace(
            "postgresql://postgres@", f"postgresql://postgres:{SECRETS['postgres']}@"
        )
        assert secret_url != url
        env = {
            "THREADKEEPER_PROFILE": "postgres",
            "THREADKEEPER_POSTGRES_URL": secret_url,
            "THREADKEEPER_SERVICE_TOKEN": SECRETS["token"],
        }
        port = free_port()
        process = serve(tmp_path / "data", port, **env)
        try:
            headers = {
                "X-Tenant-Id": "acme-insurance",
                "X-User-Id": "ops-user",
                "Authorization": f"Bearer {SECRETS['token']}",
                "Accept": "application/json",
            }
            wait_ready(f"http://127.0.0.1:{port}", process)
            answered = httpx.post(
                f"http://127.0.0.1:{port}/v1/threads/t-1/runs",
                json={"message": {"content": QUESTION}},
                headers=headers,
                timeout=60,
            )
            assert answered.status_code == 200, answered.text
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=60)
    assert "postgresql://postgres:***@127.0.0.1:5432" in output
    assert "model: builtin" in output
    assert_no_secret(output)


# -- serve's start-up and logs -------------------------------------------------------------


def test_serve_on_a_port_in_use_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = threadkeeper(
            "serve",
            "--port",
            str(port),
            env=clean_environment(THREADKEEPER_DATA_DIR=str(tmp_path / "data")),
        )
    assert code == 2
    lines = output.strip().splitlines()
    assert lines == [
        f"threadkeeper: cannot start: 127.0.0.1:{port} is already in use (another server "
        "listens there: stop it, or pass --port)"
    ], output
    assert "threadkeeper ready" not in output


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with fake_provider() as running:
        yield running


@pytest.fixture(scope="module")
def model_server(
    provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProfileServer]:
    """A server whose model is an OpenAI-compatible provider (httpx under the openai SDK)."""
    env = {
        "THREADKEEPER_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": provider.url,
        "OPENAI_API_KEY": "test-key",
    }
    with profile_server("embedded", tmp_path_factory.mktemp("logs"), **env) as running:
        yield running


def test_serve_logs_in_one_format_naming_the_model_without_library_chatter(
    model_server: ProfileServer, provider: FakeProvider
) -> None:
    with httpx.Client(base_url=model_server.url, headers=model_server.headers) as client:
        answered = client.post(
            f"/v1/threads/logs-{uuid.uuid4().hex[:8]}/runs",
            json={"message": {"content": QUESTION}},
            headers={"Accept": "application/json"},
            timeout=60,
        )
        assert answered.status_code == 200, answered.text
        assert client.get("/schema").status_code == 200
    assert provider.requests, "the run called the provider"
    output = model_server.output()
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, output
    assert [line for line in lines if not LOG_LINE.match(line)] == [], output
    start_up = next(line for line in lines if "serving the embedded profile" in line)
    assert "model: openai:fake-model" in start_up
    assert f"on {model_server.url} " in start_up
    assert "ready" in output
    assert "HTTP Request:" not in output, "httpx logs a line per provider call"
    assert " bm25s" not in output, "bm25s logs its index building at DEBUG"
    assert " DEBUG " not in output


# -- the README ----------------------------------------------------------------------------


def readme_session() -> str:
    """The README's "Talk to it" shell block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Talk to it", 1)[1].split("\n## ", 1)[0]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    process = serve(tmp_path_factory.mktemp("readme"), port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's session uses curl")
def test_the_readme_session_works_pasted_into_bash(embedded_server: str) -> None:
    """Every command of the block, in order, against a fresh server: each must succeed (curl
    is made to fail on an HTTP error), with no placeholder for the reader to replace."""
    session = readme_session()
    assert "TK=http://127.0.0.1:8000" in session
    script = session.replace("TK=http://127.0.0.1:8000", f"TK={embedded_server}")
    wrapper = 'curl() { command curl --silent --show-error --fail-with-body --max-time 60 "$@"; }\n'
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", wrapper + script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "No such file or directory" not in done.stderr


@pytest.mark.integration
def test_migrate_on_mariadb_prints_its_steps_and_no_server_warning() -> None:
    """Issue 29, item 8: ``migrate`` on redis-mysql printed MariaDB's "Name
    'tk_alembic_version_pkc' ignored for PRIMARY key" (a note, not a problem)."""
    from tests.support.mysql import fresh_database

    with fresh_database(migrate=False) as url:
        env = clean_environment(
            THREADKEEPER_PROFILE="redis-mysql",
            THREADKEEPER_MYSQL_URL=url,
            THREADKEEPER_SERVICE_TOKEN="t",
        )
        code, output = threadkeeper("migrate", env=env)
    assert code == 0, output
    assert "threadkeeper tables: alembic upgrade head" in output
    assert "ignored for PRIMARY key" not in output, output
    assert "Warning" not in output, output
