"""Run records by tenant and time: the pages of ``threadkeeper export-runs --tenant``.

- ``ix_tk_run_records_tenant_created`` on ``tk_run_records (tenant_id, created_at)``: one
  tenant's records since a time, oldest first (``adapters.sql.SqlRunRecords.since``), read by
  keyset; every tenant's are read on ``ix_tk_run_records_created`` (0001).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_index(
        "ix_tk_run_records_tenant_created", "tk_run_records", ["tenant_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_tk_run_records_tenant_created", "tk_run_records")
