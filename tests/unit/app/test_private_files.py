"""What threadkeeper writes to disk is its owner's alone (security review, item 13): the
embedded data directory 0700; its SQLite database and the ``-wal`` and ``-shm`` files SQLite
makes beside it 0600 (SQLite gives those the database file's mode), tightened too where an
earlier version left them open; ``export`` and ``export-runs --output`` files 0600, written
never through a symbolic link."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from tests.support.private_files import (
    DATABASE,
    SIDES,
    TENANT,
    USER,
    data_dir,
    mode,
    one_run,
    open_umask,
    serve,
)
from threadkeeper.app import cli

__all__ = ["data_dir", "open_umask"]  # fixtures


def test_a_new_data_directory_and_its_database_are_the_owners_alone(data_dir: Path) -> None:
    with serve(data_dir) as client:
        one_run(client)
        assert mode(data_dir) == 0o700
        database = data_dir / DATABASE
        assert mode(database) == 0o600
        for side in SIDES:  # made by SQLite, in WAL mode, while the server runs
            made = database.with_name(DATABASE + side)
            assert made.exists(), side
            assert mode(made) == 0o600, side
    assert mode(data_dir) == 0o700
    assert mode(data_dir / DATABASE) == 0o600


def test_an_open_data_directory_an_earlier_version_left_is_tightened(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, mode=0o755)
    os.chmod(data_dir, 0o755)
    database = data_dir / DATABASE
    # an earlier server's database, its -wal and -shm still there (it was killed): 0644
    earlier = sqlite3.connect(database)
    try:
        earlier.execute("PRAGMA journal_mode=WAL")
        earlier.execute("CREATE TABLE left_behind (x)")
        earlier.commit()
        for path in (database, *(database.with_name(DATABASE + s) for s in SIDES)):
            assert mode(path) == 0o644, path
        with serve(data_dir) as client:
            one_run(client)
            assert mode(data_dir) == 0o700
            for path in (database, *(database.with_name(DATABASE + s) for s in SIDES)):
                assert mode(path) == 0o600, path
    finally:
        earlier.close()


def test_a_read_beside_the_server_keeps_the_database_private(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export`` opens the database too (not exclusively): it makes nothing readable."""
    with serve(data_dir) as client:
        one_run(client)
        output = tmp_path / "export.json"
        assert (
            cli.main(["export", "--tenant", TENANT, "--user", USER, "--output", str(output)]) == 0
        )
        for path in (data_dir / DATABASE, *(data_dir / (DATABASE + s) for s in SIDES)):
            assert mode(path) == 0o600, path
