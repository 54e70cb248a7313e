"""What the integration tests share: a fresh, migrated PostgreSQL schema per test, a fresh
MariaDB database per test, a private Redis Stack per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis, private_redis


@pytest.fixture
def url() -> Iterator[str]:
    """The URL of a new schema of the test server, migrated (dropped after the test)."""
    with fresh_schema() as migrated:
        yield migrated


@pytest.fixture(scope="module")
def redis_server() -> Iterator[PrivateRedis]:
    """A private Redis Stack for the module (tests flush it as they need)."""
    with private_redis() as server:
        yield server


@pytest.fixture
def mysql() -> Iterator[str]:
    """The URL of a new, migrated MariaDB database (dropped after the test)."""
    with fresh_database() as url:
        yield url
