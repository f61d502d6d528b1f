"""An instance may allow sending its password in cleartext (security hardening): off for
every existing instance, so a server asking for the cleartext password without TLS is
refused (cdc_platform.mysql_source).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(
            sa.Column(
                "allow_cleartext_password", sa.Boolean, nullable=False, server_default=sa.false()
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("allow_cleartext_password")
