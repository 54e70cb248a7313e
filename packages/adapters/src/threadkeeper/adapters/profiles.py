"""The registry of storage profiles: ``THREADKEEPER_PROFILE`` names one of them.

Profiles are registered as hooks are, through entry points (group ``threadkeeper.profiles``,
``ports.storage.PROFILE_ENTRY_POINTS``): this distribution registers its three in its
``pyproject.toml``, and a package installed beside it adds its own the same way, with no line
here. Each entry names a package that defines ``PROFILE`` (an ``adapters.profile.Profile``) and
whose ``settings`` module defines ``SETTINGS`` (the profile's settings struct). Both are
imported when first asked for: reading the configuration loads every profile's settings (a
few small structs), never a driver.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from threadkeeper.adapters.profile import Profile
from threadkeeper.ports.storage import PROFILE_ENTRY_POINTS

DEFAULT = "embedded"


@cache
def registered() -> dict[str, str]:
    """Every installed profile: name → its package, in the order of the entry points."""
    return {ep.name: ep.module for ep in entry_points(group=PROFILE_ENTRY_POINTS)}


def names() -> list[str]:
    """The registered profiles' names."""
    return list(registered())


class UnknownProfile(ValueError):
    """No profile of that name is registered."""


def _package(name: str) -> str:
    try:
        return registered()[name]
    except KeyError:
        raise UnknownProfile(f"{name!r} is not a profile (one of {', '.join(names())})") from None


@cache
def profile_settings(name: str) -> type[Any]:
    """The settings struct of profile ``name`` (its fields are ``THREADKEEPER_*`` names)."""
    module = importlib.import_module(_package(name) + ".settings")
    settings: type[Any] = module.SETTINGS
    return settings


@cache
def profile(name: str) -> Profile:
    """The profile ``name`` (its drivers are imported now)."""
    found = importlib.import_module(_package(name)).PROFILE
    if not isinstance(found, Profile):  # pragma: no cover - a broken registry entry
        raise TypeError(f"{_package(name)}.PROFILE is not a Profile")
    return found
