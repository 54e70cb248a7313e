"""``scripts/prune-broken-scripts``: the console scripts that cannot run (their module is not
installed — ``langgraph-checkpoint-redis``'s ``test``, ``format``, …) leave the environment's
``bin/``; the others, and files that only share a name, stay."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prune-broken-scripts"


def load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("prune_broken_scripts", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def wrapper(module: str, function: str) -> str:
    return (
        f"#!/usr/bin/env python\nimport sys\nfrom {module} import {function}\n"
        f"sys.exit({function}())\n"
    )


def test_only_scripts_whose_module_is_missing_are_removed(tmp_path: Path) -> None:
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    info = site / "somepkg-1.0.dist-info"
    info.mkdir(parents=True)
    bin_dir.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: somepkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\n"
        "test = no_such_module_tk_test:test\n"
        "works = json:tool\n"
        "renamed = no_such_module_tk_test:other\n"
    )
    (bin_dir / "test").write_text(wrapper("no_such_module_tk_test", "test"))
    (bin_dir / "works").write_text(wrapper("json", "tool"))
    (bin_dir / "renamed").write_text("#!/bin/sh\necho another program of that name\n")

    prune = load()
    found = prune.broken_scripts(bin_dir, search=[str(site)])
    assert found == [("somepkg", "no_such_module_tk_test", bin_dir / "test")]
    assert prune.main(["--bin", str(bin_dir), "--dry-run"]) == 0
    assert (bin_dir / "test").exists()


def test_the_environments_broken_scripts_go_and_the_rest_still_run(tmp_path: Path) -> None:
    """On a copy of this environment's ``bin/``: after pruning, every console script left
    there imports its module (``pytest`` — the test command — among them)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = Path(sys.prefix) / "bin"
    for path in real.iterdir():
        if path.is_file() and not path.name.startswith(("python", "activate")):
            shutil.copy2(path, bin_dir / path.name)
    done = subprocess.run(
        [sys.executable, "-I", str(SCRIPT), "--bin", str(bin_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    removed = {line.split()[1] for line in done.stdout.splitlines()}
    assert str(bin_dir / "test") in removed or not (real / "test").exists()
    assert (bin_dir / "pytest").exists()
    again = subprocess.run(
        [sys.executable, "-I", str(SCRIPT), "--bin", str(bin_dir), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert again.stdout == "", "nothing broken is left"
