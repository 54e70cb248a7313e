"""What the integration tests share: a fresh, migrated PostgreSQL schema per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import fresh_schema


@pytest.fixture
def url() -> Iterator[str]:
    """The URL of a new schema of the test server, migrated (dropped after the test)."""
    with fresh_schema() as migrated:
        yield migrated
