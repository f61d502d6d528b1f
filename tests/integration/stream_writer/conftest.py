from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from cdc_platform.config import Settings
from tests.integration.lake.conftest import TESTED_STORAGES
from tests.integration.stream_writer.harness import create_topic, delete_topic

# The storages of the crash-point tests: local disk and S3 always, HDFS when asked
# (CDC_TEST_HDFS=1, or its older name CDC_TEST_STREAM_WRITER_HDFS=1).
STORAGES = list(TESTED_STORAGES)


@pytest.fixture
def topic(local_stack: Settings) -> Iterator[str]:
    name = create_topic(local_stack, partitions=3)
    yield name
    delete_topic(local_stack, name)


@pytest.fixture(scope="module")
def remote_storage(local_stack: Settings) -> Iterator[set[str]]:
    """The stack's SeaweedFS (and HDFS when asked), started once for the module."""
    from stack.manager import LocalStack

    names = ["seaweedfs"] if "s3" in STORAGES else []
    if "hdfs" in STORAGES:
        names += ["hdfs-namenode", "hdfs-datanode"]
    stack = LocalStack(local_stack)
    done = stack.up(names)
    yield set(names)
    started_here = [name for name, what in done.items() if what == "started"]
    if started_here and os.environ.get("CDC_MIRROR_TESTS_STOP_STACK") == "1":
        stack.down(started_here)
