"""The web admin needs only MariaDB of the stack (live schemas); it brings up that service
alone, so a test of another component restarting Kafka is never disturbed by ours."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_platform.config import Settings


@pytest.fixture(scope="session")
def mariadb(settings: Settings) -> Iterator[Settings]:
    from stack.manager import LocalStack

    stack = LocalStack(settings)
    done = stack.up(["mariadb"])
    yield settings
    if done.get("mariadb") == "started":
        stack.down(["mariadb"])


@pytest.fixture(scope="session")
def replay_stack(mariadb: Settings) -> Iterator[Settings]:
    """MariaDB and Kafka: what a real replay (mock_replay) reads and publishes to."""
    from stack.manager import LocalStack

    stack = LocalStack(mariadb)
    done = stack.up(["kafka"])
    yield mariadb
    if done.get("kafka") == "started":
        stack.down(["kafka"])


@pytest.fixture(scope="session")
def postgres(settings: Settings) -> Iterator[Settings]:
    from stack.manager import LocalStack

    stack = LocalStack(settings)
    done = stack.up(["postgresql"])
    yield settings
    if done.get("postgresql") == "started":
        stack.down(["postgresql"])
