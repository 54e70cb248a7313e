"""Alembic migrations of threadkeeper's own tables (``adapters.sql``) on the server profiles.

Run by ``threadkeeper migrate`` through ``upgrade()``, never at start-up; ``current()`` and
``head()`` let a profile refuse to start on a missing or older schema.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

HERE = Path(__file__).parent


def config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.set_main_option("version_table", "tk_alembic_version")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(connection: Connection) -> None:
    """Bring the schema to the newest revision (sync connection: ``conn.run_sync(upgrade)``)."""
    command.upgrade(config(connection), "head")


IGNORED_PK_NAME = re.compile(r"Name '\w+_pkc' ignored for PRIMARY key")
"""MariaDB's note on the name alembic gives its version table's primary key (MariaDB names
every primary key ``PRIMARY``): nothing is wrong, yet asyncmy logs each server warning at
WARNING and ``migrate`` printed it (issue 29, item 8)."""


def _not_the_pk_name_note(record: logging.LogRecord) -> bool:
    return not IGNORED_PK_NAME.search(record.getMessage())


async def upgrade_engine(engine: AsyncEngine) -> str:
    """``upgrade`` on an async engine (``threadkeeper migrate``); the step taken, as printed."""
    driver = logging.getLogger("asyncmy")  # where asyncmy logs the server's warnings
    driver.addFilter(_not_the_pk_name_note)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(upgrade)
    finally:
        driver.removeFilter(_not_the_pk_name_note)
    return f"threadkeeper tables: alembic upgrade head ({head()})"


def head() -> str | None:
    return ScriptDirectory.from_config(config()).get_current_head()


def current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": "tk_alembic_version"})
    return context.get_current_revision()
