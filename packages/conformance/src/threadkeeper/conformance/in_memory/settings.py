"""The in-memory profile's settings (``THREADKEEPER_<FIELD>``), and what it is: one process,
nothing kept once it stops, no service token."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class MemorySettings(msgspec.Struct, frozen=True, kw_only=True):
    requires_token: ClassVar[bool] = False
    """One process, its data gone when it stops (tests, demos): no service token required."""
    history_in_checkpoints: ClassVar[bool] = True
    """Only the non-destructive history hooks by default, also with ``memory_archive`` (whose
    checkpoints could be compacted): the safe choice for a profile used to test others."""

    memory_archive: bool = False
    """Keep the transcript in an archive beside the checkpoints (the redis-mysql design, so
    cold start can be tested) instead of in the checkpoint state (the embedded design)."""


SETTINGS = MemorySettings
