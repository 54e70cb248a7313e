"""The postgres profile (ADR-0007): checkpoints, memory and threadkeeper's tables in one
PostgreSQL (``backend``).

This package is light — its settings and ``PROFILE`` — so that reading the configuration
never imports a driver; the implementation is in ``backend`` and is importable from here as
before.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from threadkeeper.adapters.postgres.settings import PostgresSettings
from threadkeeper.adapters.profile import Profile, SchemaNotReady, StorageBackend, masked_url

if TYPE_CHECKING:
    from threadkeeper.adapters.postgres.backend import (
        FAIL_FAST,
        POOL_SIZE,
        FailFastPool,
        PostgresBackend,
        _pool,
        check_schema,
        migrate_postgres,
        open_postgres,
        sqlalchemy_url,
    )
    from threadkeeper.adapters.postgres.lock import AdvisoryThreadLock, advisory_key

__all__ = [
    "FAIL_FAST",
    "POOL_SIZE",
    "PROFILE",
    "AdvisoryThreadLock",
    "FailFastPool",
    "PostgresBackend",
    "SchemaNotReady",
    "_pool",
    "advisory_key",
    "check_schema",
    "migrate_postgres",
    "open_postgres",
    "sqlalchemy_url",
]


class PostgresProfile(Profile):
    name = "postgres"
    reaches = ("langgraph-checkpoint", "langgraph-checkpoint-postgres")
    schema_server = "PostgreSQL"

    @asynccontextmanager
    async def open(
        self, settings: PostgresSettings, *, exclusive: bool = True
    ) -> AsyncIterator[StorageBackend]:
        from threadkeeper.adapters.postgres.backend import open_postgres

        async with open_postgres(
            settings.postgres_url, store_timeout_seconds=settings.store_timeout_seconds
        ) as backend:
            yield backend

    async def migrate(self, settings: PostgresSettings) -> list[str]:
        from threadkeeper.adapters.postgres.backend import migrate_postgres

        return await migrate_postgres(settings.postgres_url)

    async def schema_problems(self, settings: PostgresSettings) -> list[str]:
        from threadkeeper.adapters.postgres.backend import check_schema

        return await check_schema(settings.postgres_url)

    def storage(self, settings: PostgresSettings) -> str:
        return masked_url(settings.postgres_url)


_LAZY = ("backend", "lock")

PROFILE = PostgresProfile()


def __getattr__(name: str) -> Any:
    """What opens the data, imported when first asked for (``from …postgres import open_…``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    for module in _LAZY:
        found = importlib.import_module(f"threadkeeper.adapters.postgres.{module}")
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
