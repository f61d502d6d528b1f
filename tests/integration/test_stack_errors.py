"""When a service cannot start, one sentence names the service and the cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.config import Settings
from simple_binlog.errors import StackError
from stack.manager import LocalStack
from stack.services import Redis, StackPaths


def test_a_port_taken_by_another_process_is_named(local_stack: Settings, tmp_path: Path) -> None:
    # A second stack home: its Redis finds the port held by a process it did not start
    # (the session's Redis), and must neither start nor touch that process.
    other = Redis(local_stack, StackPaths(tmp_path / "other-stack"))
    with pytest.raises(StackError) as error:
        other.up()
    message = str(error.value)
    assert message.startswith("redis: port 26379 is in use by a process the stack did not start")
    assert "\n" not in message
    assert other.down() == "not started by the stack"
    assert LocalStack(local_stack).select(["redis"])[0].healthy()


def test_an_unknown_service_is_refused(local_stack: Settings) -> None:
    with pytest.raises(StackError, match="unknown service 'kafak'; the stack has mariadb, "):
        LocalStack(local_stack).up(["kafak"])
