"""The redis-mysql archive: chat messages, rolling summaries, tool-invocation audit.

Created on every dialect (the tables are plain SQL); only the redis-mysql profile writes them.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"

TIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# Exact (binary) comparison of ids on MySQL, whatever the database's default collation.
MYSQL_TABLE: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "chat_messages",
        sa.Column("seq", SERIAL, primary_key=True, autoincrement=True),
        sa.Column("thread_key", sa.String(400), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("thread_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("message_id", sa.String(200), nullable=False),
        sa.Column("content", TEXT, nullable=False),
        sa.Column("citations", TEXT, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.UniqueConstraint("run_id", "role", name="uq_chat_messages_run_role"),
        **MYSQL_TABLE,
    )
    op.create_index("ix_chat_messages_thread", "chat_messages", ["thread_key", "seq"])
    op.create_index("ix_chat_messages_message", "chat_messages", ["thread_key", "message_id"])
    op.create_index("ix_chat_messages_user", "chat_messages", ["tenant_id", "user_id"])
    op.create_index("ix_chat_messages_created", "chat_messages", ["thread_key", "created_at"])
    op.create_table(
        "chat_summaries",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("summary", TEXT, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        **MYSQL_TABLE,
    )
    op.create_table(
        "tool_invocations",
        sa.Column("id", SERIAL, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("thread_key", sa.String(400), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("arguments_digest", sa.String(64), nullable=False),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("at", TIME, nullable=False),
        **MYSQL_TABLE,
    )
    op.create_index("ix_tool_invocations_run", "tool_invocations", ["run_id"])
    op.create_index("ix_tool_invocations_thread", "tool_invocations", ["thread_key"])
    op.create_index("ix_tool_invocations_user", "tool_invocations", ["tenant_id", "user_id"])


def downgrade() -> None:
    op.drop_table("tool_invocations")
    op.drop_table("chat_summaries")
    op.drop_table("chat_messages")
