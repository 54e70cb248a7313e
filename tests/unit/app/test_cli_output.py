"""``threadkeeper export`` and ``export-runs --output``: the file is its owner's alone (0600),
an existing regular file is overwritten as before, and never through a symbolic link — nor
into a FIFO or a device, which cannot be made private (security review, item 13)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.private_files import TENANT, USER, data_dir, mode, one_run, open_umask, serve
from threadkeeper.app import cli

__all__ = ["data_dir", "open_umask"]  # fixtures

COMMANDS = {
    "export": ["export", "--tenant", TENANT, "--user", USER],
    "export-runs": ["export-runs", "--since", "2000-01-01"],
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request: pytest.FixtureRequest, data_dir: Path) -> list[str]:
    with serve(data_dir) as client:
        one_run(client)
    return list(COMMANDS[request.param])


def test_an_export_file_is_the_owners_alone(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.json"
    assert cli.main([*command, "--output", str(output)]) == 0
    assert mode(output) == 0o600
    assert output.read_text(encoding="utf-8").strip()


def test_an_existing_export_file_is_overwritten_and_made_private(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.json"
    output.write_text("an older export, much longer than the new one " * 1000, encoding="utf-8")
    os.chmod(output, 0o644)
    assert cli.main([*command, "--output", str(output)]) == 0
    assert mode(output) == 0o600
    text = output.read_text(encoding="utf-8")
    assert "older export" not in text
    for line in text.splitlines() if command[0] == "export-runs" else [text]:
        json.loads(line)


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-file", "dangling"])
def test_an_output_that_is_a_symbolic_link_is_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], target_exists: bool
) -> None:
    target = tmp_path / "elsewhere" / "victim.txt"
    target.parent.mkdir()
    if target_exists:
        target.write_text("keep me\n", encoding="utf-8")
        os.chmod(target, 0o644)
    link = tmp_path / "out.json"
    link.symlink_to(target)
    capsys.readouterr()
    code = cli.main([*command, "--output", str(link)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "symbolic link" in err
    assert str(link) in err
    assert "Traceback" not in err
    assert link.is_symlink()
    if target_exists:
        assert target.read_text(encoding="utf-8") == "keep me\n"
        assert mode(target) == 0o644
    else:
        assert not target.exists()


def test_an_output_that_is_not_a_regular_file_is_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO (or a device) cannot be made private: standard output (``--output -``) is the way
    to a pipe."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo, 0o644)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so opening it to write cannot block
    try:
        capsys.readouterr()
        code = cli.main([*command, "--output", str(fifo)])
        err = capsys.readouterr().err
    finally:
        os.close(reader)
    assert code == 2, err
    assert "not a regular file" in err
    assert mode(fifo) == 0o644


def test_an_output_with_other_hard_links_is_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("keep me\n", encoding="utf-8")
    os.chmod(kept, 0o644)
    output = tmp_path / "out.json"
    os.link(kept, output)
    capsys.readouterr()
    code = cli.main([*command, "--output", str(output)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "hard links" in err
    assert kept.read_text(encoding="utf-8") == "keep me\n"
    assert mode(kept) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_an_output_of_another_user_is_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root exporting into a file another user made (say in /tmp) would hand them the export."""
    output = tmp_path / "out.json"
    output.write_text("theirs\n", encoding="utf-8")
    os.chmod(output, 0o644)
    os.chown(output, 65534, 65534)
    capsys.readouterr()
    code = cli.main([*command, "--output", str(output)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "belongs to another user" in err
    assert output.read_text(encoding="utf-8") == "theirs\n"
    assert mode(output) == 0o644
