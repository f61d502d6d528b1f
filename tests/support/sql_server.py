"""``cdc-mirror sql-server`` as the tests run it: a child process with one login, listening on
loopback until the test is done with it."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from cdc_mirror.processes import Component, port_free

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def running_sql_server(
    port: int,
    user: str,
    password: str,
    log_path: Path,
    startup_timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> Iterator[Component]:
    """The server on ``port`` once it listens (login ``user``/``password``, given through the
    environment, more settings in ``env``); stopped afterwards, when it must have exited 0
    without writing the password to its log."""
    server = Component(
        "sql-server",
        ["sql-server", "--port", str(port)],
        env={
            "PYSPARK_PYTHON": sys.executable,
            "CDC_MIRROR_SQL_SERVER__USER": user,
            "CDC_MIRROR_SQL_SERVER__PASSWORD": password,
            **(env or {}),
        },
        log_path=log_path,
        cwd=ROOT,
    ).start()
    try:
        server.wait_until(lambda: not port_free(port), startup_timeout_s, "the SQL server")
        yield server
    finally:
        server.terminate(timeout_s=60)
    log = log_path.read_text()
    assert server.returncode == 0, log[-3000:]
    assert password not in log
