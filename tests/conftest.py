"""Test markers come from the folder: tests/unit → unit, tests/integration → integration,
tests/e2e → e2e. Integration and end-to-end tests share one local stack per session: it is
brought up (installing what is missing) before the first of them. Under ``./run tests``
(which sets CDC_MIRROR_TESTS_STOP_STACK=1) the services this session started are stopped at
the end; services that were already running are always left alone. A bare ``pytest`` leaves
the stack running, so several sessions side by side never stop each other's services.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.config import Settings, load_settings

_ROOT = Path(__file__).parent
_MARKER_BY_FOLDER = {"unit": "unit", "integration": "integration", "e2e": "e2e"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        relative = Path(item.path).relative_to(_ROOT)
        marker = _MARKER_BY_FOLDER.get(relative.parts[0])
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))
    # A test that stops and restarts the shared services runs last: a client opened for the
    # life of the process before it would hold dead connections in every test after it (Spark's
    # embedded metastore keeps its PostgreSQL connections for the life of the JVM, and a Spark
    # test after the restart failed with "SQL is not operational"). The sort is stable.
    items.sort(key=lambda item: item.get_closest_marker("restarts_stack") is not None)


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def local_stack(settings: Settings) -> Iterator[Settings]:
    """The real services, up and healthy. Yields the settings that reach them."""
    from stack.manager import LocalStack

    stack = LocalStack(settings)
    done = stack.up()
    yield settings
    started_here = [name for name, what in done.items() if what == "started"]
    if started_here and os.environ.get("CDC_MIRROR_TESTS_STOP_STACK") == "1":
        stack.down(started_here)
