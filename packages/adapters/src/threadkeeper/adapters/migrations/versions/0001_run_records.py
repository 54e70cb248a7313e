"""Run records and feedback; index checkpoint metadata for erasure.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None


# MySQL/MariaDB: microsecond times (DATETIME(6), naive UTC; see adapters.sql.UtcDateTime) and
# LONGBLOB run records (BLOB stops at 64 KiB). PostgreSQL and SQLite are unaffected.
TIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BLOB = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")

# Exact (binary) comparison of ids on MySQL, whatever the database's default collation.
MYSQL_TABLE: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "tk_run_records",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("human_message_id", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("record", BLOB, nullable=False),
        **MYSQL_TABLE,
    )
    op.create_index("ix_tk_run_records_user", "tk_run_records", ["tenant_id", "user_id"])
    op.create_index("ix_tk_run_records_human", "tk_run_records", ["thread_key", "human_message_id"])
    op.create_index("ix_tk_run_records_created", "tk_run_records", ["created_at"])
    op.create_table(
        "tk_feedback",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("score", sa.Integer, nullable=False),
        sa.Column("comment", sa.Text, nullable=True),
        sa.Column("at", TIME, nullable=False),
        **MYSQL_TABLE,
    )
    op.create_index("ix_tk_feedback_user", "tk_feedback", ["tenant_id", "user_id"])
    if op.get_bind().dialect.name == "postgresql":
        # erasure finds a user's threads through checkpoint metadata (`metadata @> {...}`)
        op.execute(
            "CREATE INDEX IF NOT EXISTS ix_tk_checkpoints_metadata "
            "ON checkpoints USING gin (metadata jsonb_path_ops)"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_tk_checkpoints_metadata")
    op.drop_table("tk_feedback")
    op.drop_table("tk_run_records")
