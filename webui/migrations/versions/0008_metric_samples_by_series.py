"""Metric samples by series: an index on (name, labels, at), so a chart of one series (a
table's rows, one topic's lag on a mirror's status page) reads its own samples only instead
of every series of the metric in the window.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_metric_samples_name_labels_at", "metric_samples", ["name", "labels", "at"])


def downgrade() -> None:
    op.drop_index("ix_metric_samples_name_labels_at", table_name="metric_samples")
