"""Governance (issue 10): the policy set (detector rules, column policies, standardisation
rules, lookup tables, set-wide settings) and the hourly detection counts with the Kafka
offsets they cover.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "governance_state",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("default_action", sa.String(8), nullable=False),
        sa.Column("builtin_detectors", sa.JSON, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "governance_detectors",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(63), nullable=False, unique=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    for table in ("governance_policies", "governance_standardise"):
        op.create_table(
            table,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("table_name", sa.String(128), nullable=False),
            sa.Column("column_name", sa.String(64), nullable=False),
            sa.Column("spec", sa.JSON, nullable=False),
            sa.Column("updated_at", _TS, nullable=False),
            sa.UniqueConstraint("table_name", "column_name"),
        )
    op.create_table(
        "governance_lookup_tables",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(63), nullable=False, unique=True),
        sa.Column("entries", sa.JSON, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "detection_counts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("hour", sa.BigInteger, nullable=False),
        sa.Column("instance", sa.String(63), nullable=False),
        sa.Column("logical_table", sa.String(128), nullable=False),
        sa.Column("column_name", sa.String(64), nullable=False),
        sa.Column("detector", sa.String(63), nullable=False),
        sa.Column("action", sa.String(8), nullable=False),
        sa.Column("count", sa.BigInteger, nullable=False),
        sa.UniqueConstraint(
            "hour", "instance", "logical_table", "column_name", "detector", "action"
        ),
    )
    op.create_index("ix_detection_counts_hour", "detection_counts", ["hour"])
    op.create_table(
        "detection_offsets",
        sa.Column("topic", sa.String(249), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_index("ix_detection_counts_hour", "detection_counts")
    for table in (
        "detection_offsets",
        "detection_counts",
        "governance_lookup_tables",
        "governance_standardise",
        "governance_policies",
        "governance_detectors",
        "governance_state",
    ):
        op.drop_table(table)
