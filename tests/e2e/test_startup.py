"""The real ``threadkeeper serve`` process refuses a configuration that cannot start: one
line saying what is wrong and what to do, exit status 2, never uvicorn's traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_output(data_dir: Path, **env: str) -> tuple[int, str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("THREADKEEPER_") and key != "OPENAI_API_KEY"
    }
    process = subprocess.run(
        [sys.executable, "-m", "threadkeeper.app.cli", "serve", "--port", str(free_port())],
        env={**environ, "THREADKEEPER_DATA_DIR": str(data_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return process.returncode, process.stdout + process.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"THREADKEEPER_HOOKS": "truncate_tool_results,compact"},
            "compact deletes persisted messages",
        ),
        ({"THREADKEEPER_MODEL": "openai:gpt-4o-mini"}, "openai"),
    ],
    ids=["destructive-hook-on-embedded", "model-not-installed"],
)
def test_a_configuration_that_cannot_start_is_one_line(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    code, output = serve_output(tmp_path / "data", **env)
    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("threadkeeper: cannot start: ")
    assert says in lines[0].lower()
