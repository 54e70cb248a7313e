"""Run records and feedback; index checkpoint metadata for erasure.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "tk_run_records",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("human_message_id", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("record", sa.LargeBinary, nullable=False),
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
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
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
