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
    # MySQL/MariaDB index at most 3072 bytes (name 200 + labels 1000 characters of utf8mb4 is
    # 4800): there the labels are indexed by their first 255 characters.
    op.create_index(
        "ix_metric_samples_name_labels_at",
        "metric_samples",
        ["name", "labels", "at"],
        mysql_length={"labels": 255},
        mariadb_length={"labels": 255},
    )


def downgrade() -> None:
    op.drop_index("ix_metric_samples_name_labels_at", table_name="metric_samples")
