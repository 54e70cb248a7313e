"""Folds made ahead: the rolling summary's next fold, made by follow-up work after a round.

- ``tk_summaries_ahead``: one row per thread — the state's summary version it continues
  (``base_version``), the newest message it covers (``through_id``) and its text — written by
  follow-up work and read by the next run's ``summarize`` hook, which then folds nothing
  itself (``domain.summary.AheadSummary``); deleted with the thread and its user (issue 27).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0010"
down_revision = "0009"

# MySQL/MariaDB: microsecond times (DATETIME(6), naive UTC; see adapters.sql.UtcDateTime)
TIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "tk_summaries_ahead",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("base_version", sa.Integer, nullable=False),
        sa.Column("through_id", sa.String(200), nullable=False),
        sa.Column("body", LONG_TEXT, nullable=False),
        sa.Column("at", TIME, nullable=False),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tk_summaries_ahead_user", "tk_summaries_ahead", ["tenant_id", "user_id"])


def downgrade() -> None:
    op.drop_table("tk_summaries_ahead")
