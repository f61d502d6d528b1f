"""Metric samples by series with their values: the (name, labels, at) index of 0008 is
replaced by (name, labels, at, value), so a chart of one series is read from the index alone.
With (name, labels, at) every sample also cost a look-up of its row, and a scrape round's
rows lie together, one series' samples a page apart each: a mirror's status page read ~3,500
rows that way, most of its time (issue 22, item 8; bench.webui_bench).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # MySQL/MariaDB index at most 3072 bytes: the labels by their first 255 characters.
    op.create_index(
        "ix_metric_samples_series_values",
        "metric_samples",
        ["name", "labels", "at", "value"],
        mysql_length={"labels": 255},
        mariadb_length={"labels": 255},
    )
    op.drop_index("ix_metric_samples_name_labels_at", table_name="metric_samples")


def downgrade() -> None:
    op.create_index(
        "ix_metric_samples_name_labels_at",
        "metric_samples",
        ["name", "labels", "at"],
        mysql_length={"labels": 255},
        mariadb_length={"labels": 255},
    )
    op.drop_index("ix_metric_samples_series_values", table_name="metric_samples")
