"""Replays run in a replay worker process (``cdc-mirror replay-worker``), not in the web
server: the admin writes a job, a worker claims it, runs it and writes its progress back.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "replay_jobs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("rows_done", sa.BigInteger, nullable=False),
        sa.Column("rows_total", sa.BigInteger, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("recorded", sa.Boolean, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("heartbeat_at", _TS, nullable=True),
        sa.Column("table_mirror", sa.String(200), nullable=True),
    )
    op.create_index("ix_replay_jobs_state", "replay_jobs", ["state"])
    op.create_index("ix_replay_jobs_created_at", "replay_jobs", ["created_at"])


def downgrade() -> None:
    op.drop_table("replay_jobs")
