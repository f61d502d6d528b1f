"""Validation results (issue 25, item 4): a validation run keeps each target's outcome (rows
compared, missing/extra/different counts, sample keys, repair) as JSON with its run, and
runs are found by table for a mirror's status page.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("scheduler_runs", sa.Column("validation", sa.Text, nullable=True))
    op.create_index("ix_scheduler_runs_kind_table_name", "scheduler_runs", ["kind", "table_name"])


def downgrade() -> None:
    op.drop_index("ix_scheduler_runs_kind_table_name", table_name="scheduler_runs")
    op.drop_column("scheduler_runs", "validation")
