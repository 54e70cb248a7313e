"""Alembic environment: runs on the connection ``threadkeeper migrate`` hands over."""

from __future__ import annotations

from alembic import context

from threadkeeper.adapters.sql import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table="tk_alembic_version",
)
with context.begin_transaction():
    context.run_migrations()
