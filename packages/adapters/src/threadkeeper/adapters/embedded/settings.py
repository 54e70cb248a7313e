"""The embedded profile's settings (``THREADKEEPER_<FIELD>``), and what it is: one process,
SQLite in a data directory, no service token."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class EmbeddedSettings(msgspec.Struct, frozen=True, kw_only=True):
    requires_token: ClassVar[bool] = False
    """One process on one machine (often a developer's): no service token required."""
    history_in_checkpoints: ClassVar[bool] = True
    unreachable: ClassVar[tuple[str, ...]] = (
        "sqlalchemy.exc:OperationalError",
        "sqlalchemy.exc:InterfaceError",
        "sqlalchemy.exc:TimeoutError",
    )
    """The exceptions (``module:Class``) of its drivers that mean "the store cannot be
    reached" (503 ``unavailable``); a module that is not installed is skipped."""

    data_dir: str = "./var"
    """Where the SQLite file and the data-directory lock live."""


SETTINGS = EmbeddedSettings
