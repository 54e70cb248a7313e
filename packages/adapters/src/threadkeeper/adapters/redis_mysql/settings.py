"""The redis-mysql profile's settings (``THREADKEEPER_<FIELD>``): the blog design, Redis
checkpoints with a TTL beside a MySQL archive that is the record."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from threadkeeper.adapters.timeouts import DEFAULT_STORE_TIMEOUT_SECONDS


class RedisMysqlSettings(msgspec.Struct, frozen=True, kw_only=True):
    requires_token: ClassVar[bool] = True
    history_in_checkpoints: ClassVar[bool] = False
    """The MySQL archive is the record: the checkpoints may be compacted."""
    unreachable: ClassVar[tuple[str, ...]] = (
        "sqlalchemy.exc:OperationalError",
        "sqlalchemy.exc:InterfaceError",
        "sqlalchemy.exc:TimeoutError",
        "redis.exceptions:ConnectionError",
        "redis.exceptions:TimeoutError",
    )
    """The exceptions (``module:Class``) of its drivers that mean "the store cannot be
    reached" (503 ``unavailable``); a module that is not installed is skipped."""

    redis_url: str = "redis://127.0.0.1:6380/0"
    mysql_url: str = "mysql+asyncmy://root@127.0.0.1:3306/test"
    checkpoint_ttl_minutes: float = 10080
    """Fractions allowed (tests use seconds-long TTLs)."""
    lock_ttl_seconds: int = 30
    store_timeout_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS
    """One call on MySQL (asyncmy's read timeout): past it, 503 ``unavailable``. Redis commands
    keep their own second (``REDIS_TIMEOUT_SECONDS``)."""

    def __post_init__(self) -> None:
        if not self.checkpoint_ttl_minutes > 0:
            raise ValueError("THREADKEEPER_CHECKPOINT_TTL_MINUTES must be positive")
        if self.lock_ttl_seconds < 1:
            raise ValueError("THREADKEEPER_LOCK_TTL_SECONDS must be positive")
        if not self.store_timeout_seconds > 0:
            raise ValueError("THREADKEEPER_STORE_TIMEOUT_SECONDS must be positive")


SETTINGS = RedisMysqlSettings
