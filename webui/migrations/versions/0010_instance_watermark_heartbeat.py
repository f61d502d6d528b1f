"""An instance may set its collector's watermark heartbeat period (issue 22, item 6): NULL,
i.e. the collector's own ``collector.watermark_heartbeat_s``, for every existing instance.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("watermark_heartbeat_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("watermark_heartbeat_s")
