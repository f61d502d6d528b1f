"""The admin database: engine from the config, migrations at start."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import Settings
from simple_binlog.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def database_url(settings: Settings) -> str:
    configured = settings.webui.database_url
    if configured is not None:
        return configured.get_secret_value()
    path = (settings.stack.home / "webui.sqlite").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_engine(url: str) -> Engine:
    try:
        return _make_engine(url)
    except (SQLAlchemyError, ValueError) as exc:  # unknown dialect, driver missing, bad URL
        raise ConfigError(
            f"config field 'webui.database_url' is invalid: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'cannot be used'}."
        ) from None


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:" and not database.startswith("file:"):
            make_private(Path(database))
        # The web server's worker threads share the engine; SQLite needs to be told, and
        # needs foreign keys switched on per connection.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
            cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def make_private(path: Path) -> None:
    """Create the SQLite file with mode 0600 (SQLite gives its -wal and -shm files the same
    mode), or take group and other access away from an existing one: it holds password
    hashes, session ids and the encrypted MySQL passwords."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        return
    except FileExistsError:
        pass
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        path.chmod(mode & 0o700)
        log.warning("the admin database %s was readable by other users; made it mode 0600", path)
    for companion in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if companion.exists() and stat.S_IMODE(companion.stat().st_mode) & 0o077:
            companion.chmod(0o600)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    # Imported here: importing Alembic logs its plugin set-up, which entry points quiet first.
    from alembic import command  # noqa: PLC0415
    from alembic.config import Config  # noqa: PLC0415

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except SQLAlchemyError as exc:
        reason = (str(getattr(exc, "orig", None) or exc).splitlines() or ["unknown error"])[0]
        where = engine.url.render_as_string(hide_password=True)
        raise ServiceUnavailableError(
            f"the web admin's database ({where}) cannot be migrated: {reason}"
        ) from exc
    log.debug("admin database at the newest schema revision")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
