from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_platform.config import Settings
from tests.integration.stream_writer.harness import create_topic, delete_topic


@pytest.fixture
def topic(local_stack: Settings) -> Iterator[str]:
    name = create_topic(local_stack, partitions=3)
    yield name
    delete_topic(local_stack, name)
