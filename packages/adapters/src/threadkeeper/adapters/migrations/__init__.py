"""Alembic migrations of threadkeeper's own tables (``adapters.sql``) on the server profiles.

Run by ``threadkeeper migrate`` through ``upgrade()``, never at start-up; ``current()`` and
``head()`` let a profile refuse to start on a missing or older schema.
"""

from __future__ import annotations

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


async def upgrade_engine(engine: AsyncEngine) -> str:
    """``upgrade`` on an async engine (``threadkeeper migrate``); the step taken, as printed."""
    async with engine.begin() as conn:
        await conn.run_sync(upgrade)
    return f"threadkeeper tables: alembic upgrade head ({head()})"


def head() -> str | None:
    return ScriptDirectory.from_config(config()).get_current_head()


def current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": "tk_alembic_version"})
    return context.get_current_revision()
