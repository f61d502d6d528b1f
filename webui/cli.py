"""Command-line operations on the admin database (wired in ``cdc_mirror.cli``)."""

from __future__ import annotations

from pydantic import SecretStr, ValidationError

from cdc_platform.config import Settings
from simple_binlog.errors import ConfigError
from webui import admin
from webui.app import quiet_library_loggers
from webui.db import database_url, make_engine, migrate, session_factory
from webui.schemas import UserIn


def create_user(settings: Settings, username: str, role: str, password: str) -> None:
    """Raises ConfigError with one sentence when the input is refused; nothing is saved."""
    try:
        data = UserIn.model_validate(
            {"username": username, "password": SecretStr(password), "role": role}
        )
    except ValidationError as exc:
        raise ConfigError(" ".join(admin.validation_messages(exc))) from None
    quiet_library_loggers()
    engine = make_engine(database_url(settings))
    try:
        migrate(engine)
        with session_factory(engine).begin() as db:
            try:
                admin.create_user(db, "(command line)", data)
            except admin.Problems as exc:
                raise ConfigError(" ".join(exc.messages)) from None
    finally:
        engine.dispose()
