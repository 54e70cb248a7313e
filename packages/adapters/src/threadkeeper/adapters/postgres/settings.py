"""The postgres profile's settings (``THREADKEEPER_<FIELD>``): ADR-0007, everything in one
PostgreSQL, any number of replicas."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class PostgresSettings(msgspec.Struct, frozen=True, kw_only=True):
    requires_token: ClassVar[bool] = True
    history_in_checkpoints: ClassVar[bool] = True
    """The checkpoints are the record: destructive hooks are refused."""

    postgres_url: str = "postgresql://postgres@127.0.0.1:5432/test"


SETTINGS = PostgresSettings
