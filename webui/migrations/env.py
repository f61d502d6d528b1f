"""Alembic environment: run programmatically by ``webui.db.migrate`` with an open connection
(``config.attributes["connection"]``); there is no alembic.ini."""

from __future__ import annotations

from alembic import context

from webui.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
