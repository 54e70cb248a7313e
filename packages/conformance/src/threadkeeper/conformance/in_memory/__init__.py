"""The in-memory profile (``THREADKEEPER_PROFILE=memory`` once registered): everything in
this process, nothing kept when it stops (``backend``).

Laid out as every profile is (``docs/writing-a-backend.md``): this package is light — its
``PROFILE`` and, in ``settings``, its ``SETTINGS`` — so that reading the configuration never
imports what opens the data; ``InMemoryBackend`` and the rest are importable from here.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from threadkeeper.adapters.profile import Profile, StorageBackend
from threadkeeper.conformance.in_memory.settings import MemorySettings

if TYPE_CHECKING:
    from threadkeeper.conformance.in_memory.backend import (
        InMemoryBackend,
        MemoryArchive,
        MemoryFences,
        MemoryRetention,
        MemoryRoundStore,
        MemoryRunRecords,
    )

__all__ = [
    "NAME",
    "PACKAGE",
    "PROFILE",
    "InMemoryBackend",
    "MemoryArchive",
    "MemoryFences",
    "MemoryProfile",
    "MemoryRetention",
    "MemoryRoundStore",
    "MemoryRunRecords",
    "MemorySettings",
]

NAME = "memory"
"""The profile's name in the registry (its ``threadkeeper.profiles`` entry point)."""
PACKAGE = __name__
"""What its entry point names: ``NAME = PACKAGE`` (group ``threadkeeper.profiles``)."""


class MemoryProfile(Profile):
    """Opens a new, empty ``InMemoryBackend`` each time (nothing to migrate or check)."""

    name = NAME

    @asynccontextmanager
    async def open(
        self, settings: MemorySettings, *, exclusive: bool = True
    ) -> AsyncIterator[StorageBackend]:
        from threadkeeper.conformance.in_memory.backend import InMemoryBackend

        yield InMemoryBackend(archive=settings.memory_archive)

    def storage(self, settings: MemorySettings) -> str:
        return "in memory (archive transcript)" if settings.memory_archive else "in memory"


PROFILE = MemoryProfile()


def __getattr__(name: str) -> Any:
    """What opens the data, imported when first asked for (``from …in_memory import …``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    found = importlib.import_module("threadkeeper.conformance.in_memory.backend")
    if hasattr(found, name):
        return getattr(found, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
