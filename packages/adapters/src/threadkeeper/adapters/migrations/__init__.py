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


def head() -> str | None:
    return ScriptDirectory.from_config(config()).get_current_head()


def current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": "tk_alembic_version"})
    return context.get_current_revision()
