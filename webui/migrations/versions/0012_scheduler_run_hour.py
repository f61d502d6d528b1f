"""The scheduler's runs of single hours (issue 22, item 5 with issue 20, item 4): a table
mirror with hourly snapshots is merged an hour at a time, and its run history is kept by
(table, day, hour); NULL, the whole day, for every existing run.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_runs") as batch:
        batch.add_column(sa.Column("hour", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_runs") as batch:
        batch.drop_column("hour")
