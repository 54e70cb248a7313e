"""What the tests of threadkeeper's files on disk share (``tests/unit/app/test_private_files.py``,
``test_cli_output.py``): an open umask, an embedded data directory, a server over it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings

TENANT = "acme-insurance"
USER = "export-user"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER, "Accept": "application/json"}
DATABASE = "threadkeeper.sqlite3"
SIDES = ("-wal", "-shm")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The common default: files 0644 and folders 0755 unless the code says otherwise."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("THREADKEEPER_CONFIG", "THREADKEEPER_PROFILE", "THREADKEEPER_RETENTION_DAYS"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "var" / "data"
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(data))
    monkeypatch.setenv("THREADKEEPER_TOKENIZER", "estimate")
    return data


def serve(data_dir: Path) -> TestClient[Litestar]:
    return TestClient(create_app(Settings.of(data_dir=str(data_dir), tokenizer="estimate")))


def one_run(client: TestClient[Litestar]) -> None:
    response = client.post(
        "/v1/threads/claims/runs",
        json={"message": {"content": "Is dental treatment covered by my health insurance?"}},
        headers=HEADERS,
    )
    assert response.status_code == 200, response.text
