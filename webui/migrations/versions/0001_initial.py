"""The first admin schema: users, tokens, sessions, instances, table mirrors, audit log and
metric samples.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("username", sa.String(64), nullable=False, unique=True),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("display_prefix", sa.String(16), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("last_used_at", _TS, nullable=True),
        sa.Column("revoked", sa.Boolean, nullable=False),
    )
    op.create_table(
        "login_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column(
            "user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(63), nullable=False, unique=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("password_encrypted", sa.Text, nullable=False),
        sa.Column("gtid_start", sa.String(4096), nullable=False),
        sa.Column("include", sa.JSON, nullable=False),
        sa.Column("exclude", sa.JSON, nullable=False),
        sa.Column("shard_rules", sa.JSON, nullable=False),
        sa.Column("collector_group", sa.String(64), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "table_mirrors",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column(
            "instance_id",
            sa.Integer,
            sa.ForeignKey("instances.id", ondelete="RESTRICT"),
            nullable=False,
        ),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", _TS, nullable=False, index=True),
        sa.Column("actor", sa.String(80), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("object_type", sa.String(32), nullable=False),
        sa.Column("object_name", sa.String(200), nullable=False),
        sa.Column("before", sa.JSON, nullable=True),
        sa.Column("after", sa.JSON, nullable=True),
    )
    op.create_table(
        "metric_samples",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("labels", sa.String(1000), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_index("ix_metric_samples_name_at", "metric_samples", ["name", "at"])


def downgrade() -> None:
    op.drop_index("ix_metric_samples_name_at", "metric_samples")
    for table in (
        "metric_samples",
        "audit_log",
        "table_mirrors",
        "instances",
        "login_sessions",
        "api_tokens",
        "users",
    ):
        op.drop_table(table)
