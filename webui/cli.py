"""Command-line operations on the admin database (wired in ``cdc_mirror.cli``)."""

from __future__ import annotations

import logging
import signal
import threading

from pydantic import SecretStr, ValidationError
from sqlalchemy import Engine

from cdc_platform.config import Settings
from cdc_platform.config_store import InstanceConfig
from simple_binlog.errors import ConfigError
from webui import admin
from webui.app import quiet_library_loggers
from webui.db import database_url, make_engine, migrate, session_factory
from webui.schemas import UserIn

log = logging.getLogger(__name__)


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


def run_replay_worker(settings: Settings, max_runs: int, poll_s: float) -> None:
    """``cdc-mirror replay-worker``: run the replays the web admin queues until SIGTERM or
    Ctrl-C. Runs in flight are left to the next worker, which resumes them (the job's
    heartbeat goes stale); nothing is lost."""
    from webui.replay_jobs import (  # noqa: PLC0415
        MockReplayExecutor,
        ReplayJobWorker,
        RunExecutor,
        SimulatedRunExecutor,
    )
    from webui.security import load_keys  # noqa: PLC0415

    quiet_library_loggers()
    engine = make_engine(database_url(settings))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The web admin migrates its database; two processes migrating a new database at once
    # would collide, so the worker waits for the schema instead.
    if not _wait_for_schema(engine, stop, poll_s):
        engine.dispose()
        return
    sessions = session_factory(engine)
    with sessions() as db:
        keys = load_keys(settings, secrets_stored=admin.has_encrypted_secrets(db))

    def instances() -> list[InstanceConfig]:
        with sessions() as db:
            return [admin.instance_config(row, keys) for row in admin.list_instances(db)]

    executor: RunExecutor = (
        SimulatedRunExecutor()
        if settings.webui.replays == "simulated"
        else MockReplayExecutor(settings, instances)
    )
    worker = ReplayJobWorker(sessions, executor, max_runs=max_runs, poll_s=poll_s)
    try:
        worker.run_forever(stop)
    finally:
        engine.dispose()


def _wait_for_schema(engine: Engine, stop: threading.Event, poll_s: float) -> bool:
    """Until the admin database has the replay jobs table (False: stopped first)."""
    from sqlalchemy import inspect  # noqa: PLC0415
    from sqlalchemy.exc import SQLAlchemyError  # noqa: PLC0415

    said = False
    while not stop.is_set():
        try:
            if inspect(engine).has_table("replay_jobs"):
                return True
            reason = "it has no replay_jobs table yet"
        except SQLAlchemyError as exc:
            reason = f"it does not answer ({type(exc).__name__})"
        if not said:
            log.warning(
                "the web admin's database is not ready (%s); start or upgrade the web admin "
                "(cdc-mirror webui), which migrates it. Waiting.",
                reason,
            )
            said = True
        stop.wait(poll_s)
    return False
