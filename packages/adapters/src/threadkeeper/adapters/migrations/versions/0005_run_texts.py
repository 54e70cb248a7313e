"""Run texts: what run records name by content address instead of repeating it.

- ``tk_run_texts``: each rolling-summary version, system prompt and memory-key list a
  thread's records name, once per thread and user, keyed by its digest
  (``domain.compact.text_digest``); a summary version is stored as the segments of the
  previous one's lines where that is much smaller (``base``, ``depth``). Written in the
  round's transaction with the record (``adapters.sql.insert_record``), deleted with the
  thread's records and the user's. Records written before keep their texts inline and are
  read as they are.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"

TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "tk_run_texts",
        sa.Column("thread_key", sa.String(400), primary_key=True),
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("digest", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("base", sa.String(32), nullable=True),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("body", TEXT, nullable=False),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tk_run_texts_user", "tk_run_texts", ["tenant_id", "user_id"])


def downgrade() -> None:
    op.drop_index("ix_tk_run_texts_user", "tk_run_texts")
    op.drop_table("tk_run_texts")
