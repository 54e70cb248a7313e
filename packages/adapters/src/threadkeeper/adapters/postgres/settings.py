"""The postgres profile's settings (``THREADKEEPER_<FIELD>``): ADR-0007, everything in one
PostgreSQL, any number of replicas."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from threadkeeper.adapters.timeouts import DEFAULT_STORE_TIMEOUT_SECONDS


class PostgresSettings(msgspec.Struct, frozen=True, kw_only=True):
    requires_token: ClassVar[bool] = True
    history_in_checkpoints: ClassVar[bool] = True
    """The checkpoints are the record: destructive hooks are refused."""
    unreachable: ClassVar[tuple[str, ...]] = (
        "sqlalchemy.exc:OperationalError",
        "sqlalchemy.exc:InterfaceError",
        "sqlalchemy.exc:TimeoutError",
        "psycopg:OperationalError",
        "psycopg_pool:PoolTimeout",
    )
    """The exceptions (``module:Class``) of its drivers that mean "the store cannot be
    reached" (503 ``unavailable``); a module that is not installed is skipped."""

    postgres_url: str = "postgresql://postgres@127.0.0.1:5432/test"
    store_timeout_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS
    """One call on PostgreSQL (``adapters.postgres.deadline``): past it, 503 ``unavailable``."""

    def __post_init__(self) -> None:
        if not self.store_timeout_seconds > 0:
            raise ValueError("THREADKEEPER_STORE_TIMEOUT_SECONDS must be positive")


SETTINGS = PostgresSettings
