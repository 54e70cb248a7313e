"""Follow-up work: what a stored round leaves to do after its run is acknowledged.

- ``tk_followups``: one row per item of work (``domain.followups``; today ``memory``: extract
  and write what the round teaches about its user), inserted in the round's transaction,
  leased by workers with ``FOR UPDATE SKIP LOCKED``, deleted when done; ``given_up`` rows stay
  (no content) until their thread or user is deleted (issue 27).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0009"
down_revision = "0008"


# MySQL/MariaDB: microsecond times (DATETIME(6), naive UTC; see adapters.sql.UtcDateTime)
TIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "tk_followups",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("thread_key", sa.String(400), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("due_at", TIME, nullable=False),
        sa.Column("lease", sa.String(64), nullable=True),
        sa.Column("lease_until", TIME, nullable=True),
        sa.Column("enqueued_at", TIME, nullable=False),
        sa.Column("error", sa.String(120), nullable=True),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tk_followups_state", "tk_followups", ["state", "id"])
    op.create_index("ix_tk_followups_user", "tk_followups", ["tenant_id", "user_id", "id"])
    op.create_index("ix_tk_followups_thread", "tk_followups", ["thread_key"])


def downgrade() -> None:
    op.drop_table("tk_followups")
