"""The registry of storage profiles: ``THREADKEEPER_PROFILE`` names one of them.

Each entry names a package that defines ``PROFILE`` (an ``adapters.profile.Profile``) and
whose ``settings`` module defines ``SETTINGS`` (the profile's settings struct). Both are
imported when first asked for: reading the configuration loads every profile's settings (a
few small structs), never a driver. A fourth profile is one folder and one line here.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from threadkeeper.adapters.profile import Profile

PROFILES: dict[str, str] = {
    "embedded": "threadkeeper.adapters.embedded",
    "postgres": "threadkeeper.adapters.postgres",
    "redis-mysql": "threadkeeper.adapters.redis_mysql",
}
DEFAULT = "embedded"


class UnknownProfile(ValueError):
    """No profile of that name is registered."""


def _package(name: str) -> str:
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfile(f"{name!r} is not a profile (one of {', '.join(PROFILES)})") from None


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
