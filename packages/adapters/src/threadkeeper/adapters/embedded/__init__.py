"""The embedded profile: SQLite under ``THREADKEEPER_DATA_DIR``, one process (``backend``).

This package is light — its settings and ``PROFILE`` — so that reading the configuration
never imports a driver; what opens the data (``open_embedded``, ``EmbeddedBackend``, …) is in
``backend`` and is importable from here as before.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from threadkeeper.adapters.embedded.settings import EmbeddedSettings
from threadkeeper.adapters.profile import Profile, StorageBackend

if TYPE_CHECKING:
    from threadkeeper.adapters.embedded.backend import (
        DataDirBusy,
        EmbeddedBackend,
        SqliteRoundStore,
        open_embedded,
    )

__all__ = ["PROFILE", "DataDirBusy", "EmbeddedBackend", "SqliteRoundStore", "open_embedded"]


class EmbeddedProfile(Profile):
    name = "embedded"
    reaches = ("langgraph-checkpoint", "langgraph-checkpoint-sqlite", "aiosqlite")

    @asynccontextmanager
    async def open(
        self, settings: EmbeddedSettings, *, exclusive: bool = True
    ) -> AsyncIterator[StorageBackend]:
        from threadkeeper.adapters.embedded.backend import open_embedded

        async with open_embedded(settings.data_dir, exclusive=exclusive) as backend:
            yield backend

    def storage(self, settings: EmbeddedSettings) -> str:
        return settings.data_dir

    def startup_problem(self, exc: BaseException) -> str | None:
        from threadkeeper.adapters.embedded.backend import DataDirBusy

        return " ".join(str(exc).split()) if isinstance(exc, DataDirBusy) else None


_LAZY = ("backend",)

PROFILE = EmbeddedProfile()


def __getattr__(name: str) -> Any:
    """What opens the data, imported when first asked for (``from …embedded import open_…``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    for module in _LAZY:
        found = importlib.import_module(f"threadkeeper.adapters.embedded.{module}")
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
