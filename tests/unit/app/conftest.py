"""Fixtures shared by the app's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.installed import profile_installed
from threadkeeper.conformance import in_memory


@pytest.fixture
def memory_profile(tmp_path: Path) -> Iterator[str]:
    """The in-memory profile registered as ``docs/writing-a-backend.md`` says — an entry
    point of a distribution installed beside threadkeeper, here from outside the repository —
    with the registry's caches cleared before and after."""
    with profile_installed(tmp_path / "site", in_memory.NAME, in_memory.PACKAGE):
        yield in_memory.NAME
