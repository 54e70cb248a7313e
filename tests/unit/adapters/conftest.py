"""Fixtures the adapter tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from threadkeeper.adapters.embedded import EmbeddedBackend, open_embedded


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[EmbeddedBackend]:
    """The embedded profile opened on a fresh data directory."""
    async with open_embedded(tmp_path / "data") as opened:
        yield opened
