"""An instance may pin its server's RSA public key (PEM text or a file path) for RSA full
authentication without TLS (cdc_platform.mysql_source): empty, i.e. none pinned, for every
existing instance.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: MariaDB/MySQL give a TEXT column no literal default; the model writes "".
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("server_public_key", sa.Text, nullable=True))
    op.execute(
        sa.text("UPDATE instances SET server_public_key = '' WHERE server_public_key IS NULL")
    )


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("server_public_key")
