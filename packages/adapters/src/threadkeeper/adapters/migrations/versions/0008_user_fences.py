"""User fences: a claim made while its user is being erased is refused.

- ``tk_user_fences (tenant_id, user_id, erasing)``: written by every claim of a user's run (the
  row locked until the claim commits) and refused while ``erasing``; an erasure sets
  ``erasing`` before it revokes the user's claims and deletes the row when it is over
  (``adapters.sql.SqlRunFences``). Without it, a run that took a thread after the erasure had
  revoked the user's claims stored its round, and the erasure then deleted its run record but
  not its thread (issue 26).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.create_table(
        "tk_user_fences",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("erasing", sa.Boolean, nullable=False, server_default=sa.false()),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("tk_user_fences")
