"""The app only wires: no module of ``packages/app/src`` but the composition root's
``container`` and ``config`` names a storage profile, and a profile is found through the
registry (``adapters.profiles``), so a new one is one folder and one registry line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from threadkeeper.adapters.profile import Profile
from threadkeeper.adapters.profiles import UnknownProfile, names, profile, profile_settings
from threadkeeper.app.config import ConfigError, Settings

APP = Path(__file__).parents[3] / "packages" / "app" / "src" / "threadkeeper" / "app"
ROOT = {"container.py", "config.py"}
NAMES_A_PROFILE = re.compile(
    r"""["'](?:postgres|redis-mysql|embedded)["']|redis_mysql|profile\s*[!=]="""
)


def test_no_app_module_but_the_composition_root_names_a_profile() -> None:
    sources = sorted(APP.rglob("*.py"))
    assert len(sources) > 20, "the app's sources were not found"
    named = [
        f"{path.relative_to(APP)}:{number}: {line.strip()}"
        for path in sources
        if path.name not in ROOT or path.parent != APP
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NAMES_A_PROFILE.search(line)
    ]
    assert named == []


@pytest.mark.parametrize("name", sorted(names()))
def test_every_registered_profile_is_a_profile_with_its_own_settings(name: str) -> None:
    found = profile(name)
    assert isinstance(found, Profile)
    assert found.name == name
    settings = profile_settings(name)
    assert isinstance(settings.requires_token, bool)
    assert isinstance(settings.history_in_checkpoints, bool)


def test_an_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(UnknownProfile, match="one of"):
        profile("cassandra")
    with pytest.raises(ConfigError, match="THREADKEEPER_PROFILE must be one of"):
        Settings.of(profile="cassandra")


def test_the_profile_declares_what_the_app_asks_of_it() -> None:
    """Token, history and default hooks come from the profile's settings, not from its name."""
    for name in names():
        settings = Settings.of(profile=name, service_token="t")
        kind = profile_settings(name)
        assert settings.requires_token is kind.requires_token
        assert settings.history_in_checkpoints is kind.history_in_checkpoints
        assert isinstance(settings.storage, kind)
        destructive = "compact" in settings.hook_names()
        assert destructive is not kind.history_in_checkpoints
