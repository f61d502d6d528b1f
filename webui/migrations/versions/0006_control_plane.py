"""The control plane (issue 22): the component registry (one row per process, renewed by its
heartbeat) and the scheduler's run history (runs and the re-runs requested in the admin).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "components",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("instance", sa.String(200), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("detail", sa.String(500), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("stopped_at", sa.Float, nullable=True),
    )
    op.create_index("ix_components_heartbeat_at", "components", ["heartbeat_at"])
    op.create_table(
        "scheduler_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("table_name", sa.String(200), nullable=False),
        sa.Column("dt", sa.String(10), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("requested_by", sa.String(80), nullable=True),
        sa.Column("scheduler", sa.String(200), nullable=True),
        sa.Column("requested_at", sa.Float, nullable=True),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("rows", sa.BigInteger, nullable=True),
        sa.Column("files", sa.Integer, nullable=True),
        sa.Column("check_ok", sa.Boolean, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("retry_at", sa.Float, nullable=True),
    )
    op.create_index("ix_scheduler_runs_kind_dt", "scheduler_runs", ["kind", "dt"])
    op.create_index("ix_scheduler_runs_state", "scheduler_runs", ["state"])


def downgrade() -> None:
    op.drop_table("scheduler_runs")
    op.drop_table("components")
