"""Run claims (fenced commits), and ``run_id`` unique per thread in the archive.

- ``tk_run_claims``: each thread's current claim (``adapters.sql.SqlRunFences``). A run claims
  its thread once it holds the thread's lock; the transaction that stores its round checks
  the claim is still its own, so a run that lost its lock, or whose user was erased while it
  ran, stores nothing.
- ``chat_messages``: ``UNIQUE (run_id, role)`` becomes ``UNIQUE (thread_key, run_id, role)``.
  ``run_id`` is an idempotency key scoped to the thread: the same id in another thread,
  user or tenant is another run, and must be archived like any other.
- ``tool_invocations`` are found by thread and run.
- ``chat_messages.status``: an archived answer's run status, so that the escalation rule
  (two clarifications in a row) still holds after a cold start, for every model.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"

TIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "tk_run_claims",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("claimed_at", TIME, nullable=False),
        sa.Column("released", sa.Boolean, nullable=False, server_default=sa.false()),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tk_run_claims_user", "tk_run_claims", ["tenant_id", "user_id"])
    op.create_unique_constraint(
        "uq_chat_messages_thread_run_role", "chat_messages", ["thread_key", "run_id", "role"]
    )
    op.drop_constraint("uq_chat_messages_run_role", "chat_messages", type_="unique")
    op.create_index("ix_tool_invocations_thread_run", "tool_invocations", ["thread_key", "run_id"])
    op.drop_index("ix_tool_invocations_run", "tool_invocations")
    op.add_column("chat_messages", sa.Column("status", sa.String(16), nullable=True))


def downgrade() -> None:
    op.drop_column("chat_messages", "status")
    op.create_index("ix_tool_invocations_run", "tool_invocations", ["run_id"])
    op.drop_index("ix_tool_invocations_thread_run", "tool_invocations")
    op.create_unique_constraint("uq_chat_messages_run_role", "chat_messages", ["run_id", "role"])
    op.drop_constraint("uq_chat_messages_thread_run_role", "chat_messages", type_="unique")
    op.drop_index("ix_tk_run_claims_user", "tk_run_claims")
    op.drop_table("tk_run_claims")
