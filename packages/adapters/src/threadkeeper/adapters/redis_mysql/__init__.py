"""The redis-mysql profile (the blog design): Redis checkpoints with a TTL beside a MySQL
archive that is the record (``backend``).

This package is light — its settings and ``PROFILE`` — so that reading the configuration
never imports a driver; the implementation is in ``backend`` and is importable from here as
before.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from threadkeeper.adapters.profile import Profile, SchemaNotReady, StorageBackend, masked_url
from threadkeeper.adapters.redis_mysql.settings import RedisMysqlSettings

if TYPE_CHECKING:
    from threadkeeper.adapters.redis_mysql.archive import SqlTranscriptArchive
    from threadkeeper.adapters.redis_mysql.backend import (
        ArchiveRetention,
        RedisMysqlBackend,
        check_schema,
        migrate_redis_mysql,
        open_redis_mysql,
    )
    from threadkeeper.adapters.redis_mysql.lock import RedisRunLock
    from threadkeeper.adapters.redis_mysql.saver import HealingRedisSaver

__all__ = [
    "PROFILE",
    "ArchiveRetention",
    "HealingRedisSaver",
    "RedisMysqlBackend",
    "RedisRunLock",
    "SchemaNotReady",
    "SqlTranscriptArchive",
    "check_schema",
    "migrate_redis_mysql",
    "open_redis_mysql",
]


class RedisMysqlProfile(Profile):
    name = "redis-mysql"
    reaches = ("langgraph-checkpoint", "langgraph-checkpoint-redis", "langgraph-checkpoint-mysql")
    schema_server = "MySQL"

    @asynccontextmanager
    async def open(
        self, settings: RedisMysqlSettings, *, exclusive: bool = True
    ) -> AsyncIterator[StorageBackend]:
        from threadkeeper.adapters.redis_mysql.backend import open_redis_mysql

        async with open_redis_mysql(
            settings.redis_url,
            settings.mysql_url,
            checkpoint_ttl_minutes=settings.checkpoint_ttl_minutes,
            lock_ttl_seconds=settings.lock_ttl_seconds,
            store_timeout_seconds=settings.store_timeout_seconds,
        ) as backend:
            yield backend

    async def migrate(self, settings: RedisMysqlSettings) -> list[str]:
        from threadkeeper.adapters.redis_mysql.backend import migrate_redis_mysql

        return await migrate_redis_mysql(settings.mysql_url)

    async def schema_problems(self, settings: RedisMysqlSettings) -> list[str]:
        from threadkeeper.adapters.redis_mysql.backend import check_schema

        return await check_schema(settings.mysql_url)

    def storage(self, settings: RedisMysqlSettings) -> str:
        return f"{masked_url(settings.redis_url)} + {masked_url(settings.mysql_url)}"


_LAZY = ("backend", "lock", "saver", "archive")

PROFILE = RedisMysqlProfile()


def __getattr__(name: str) -> Any:
    """What opens the data, imported when first asked for (``from …redis_mysql import open_…``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    for module in _LAZY:
        found = importlib.import_module(f"threadkeeper.adapters.redis_mysql.{module}")
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
