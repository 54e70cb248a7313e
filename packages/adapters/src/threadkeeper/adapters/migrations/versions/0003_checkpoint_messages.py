"""The postgres profile's message ledger, shared rate-limit windows, and the index retention
queries.

- ``tk_checkpoint_messages``: ``threadkeeper.adapters.postgres.ledger.PostgresLedger`` writes
  it; checkpoints refer to its rows by ``seq``. Created on every dialect like 0002 (plain
  SQL); only the postgres profile writes it. ``ledger.DDL`` is the same table for schemas made
  without Alembic.
- ``tk_run_rate_hits``: runs counted against ``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` on the
  postgres profile (``postgres.ratelimit``), so that every replica shares one limit.
- ``ix_tk_checkpoints_ts`` (PostgreSQL only, where ``threadkeeper migrate`` has run the
  saver's ``setup()`` first): the checkpoint's ``ts`` as "C"-collated text, which
  ``postgres.retention`` filters and sorts on. Only top-level checkpoints (``checkpoint_ns =
  ''``).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"

SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BODY = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "tk_checkpoint_messages",
        sa.Column("seq", SERIAL, primary_key=True, autoincrement=True),
        sa.Column("thread_id", sa.String(400), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("body", BODY, nullable=False),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index(
        "ix_tk_checkpoint_messages_thread", "tk_checkpoint_messages", ["thread_id", "seq"]
    )
    op.create_table(
        "tk_run_rate_hits",
        sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(400), nullable=False),
        sa.Column("at", TIME, nullable=False),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tk_run_rate_hits_key", "tk_run_rate_hits", ["key", "at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE INDEX IF NOT EXISTS ix_tk_checkpoints_ts ON checkpoints "
            "(((checkpoint->>'ts') COLLATE \"C\")) WHERE checkpoint_ns = ''"
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT 1 FROM tk_checkpoint_messages LIMIT 1")).first() is not None:
        raise RuntimeError(
            "tk_checkpoint_messages holds the messages of threads whose checkpoints refer to "
            "them: dropping it would make those threads unreadable. Not downgraded."
        )
    if bind.dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_tk_checkpoints_ts")
    op.drop_table("tk_run_rate_hits")
    op.drop_table("tk_checkpoint_messages")
