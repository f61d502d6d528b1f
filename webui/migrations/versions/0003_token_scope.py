"""API tokens expire and a collector token names its one instance (security hardening).

Existing tokens get 30 days from the upgrade; tokens of disabled users and collector tokens
without an instance are revoked (a collector token now reads only its own instance's config,
so each collector needs a new token made for its instance).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_tokens = sa.table(
    "api_tokens",
    sa.column("role", sa.String),
    sa.column("created_by", sa.String),
    sa.column("revoked", sa.Boolean),
    sa.column("expires_at", _TS),
)
_users = sa.table("users", sa.column("username", sa.String), sa.column("disabled", sa.Boolean))


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("expires_at", _TS, nullable=True))
        batch.add_column(sa.Column("instance", sa.String(63), nullable=True))
    op.execute(_tokens.update().values(expires_at=datetime.now(UTC) + timedelta(days=30)))
    disabled = sa.select(_users.c.username).where(_users.c.disabled == sa.true())
    op.execute(_tokens.update().where(_tokens.c.created_by.in_(disabled)).values(revoked=True))
    op.execute(_tokens.update().where(_tokens.c.role == "collector").values(revoked=True))
    with op.batch_alter_table("api_tokens") as batch:
        batch.alter_column("expires_at", existing_type=_TS, nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("instance")
        batch.drop_column("expires_at")
