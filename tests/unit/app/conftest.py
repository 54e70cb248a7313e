"""Fixtures shared by the app's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from threadkeeper.adapters import profiles
from threadkeeper.conformance import in_memory


@pytest.fixture
def memory_profile(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The in-memory profile registered (``docs/writing-a-backend.md``: the registry's one
    line, here at run time), the registry's caches cleared before and after."""
    monkeypatch.setitem(profiles.PROFILES, in_memory.NAME, in_memory.PACKAGE)
    profiles.profile.cache_clear()
    profiles.profile_settings.cache_clear()
    yield in_memory.NAME
    profiles.profile.cache_clear()
    profiles.profile_settings.cache_clear()
