"""Fixtures of the replay tests: sharded tables of their own and a topic prefix of their own."""

from __future__ import annotations

import uuid

import pytest

from simple_binlog.config import Settings
from tests.integration.mock_replay.helpers import Shards, with_topic_prefix


@pytest.fixture()
def shards(local_stack: Settings):
    created = Shards(local_stack)
    yield created
    created.drop()


@pytest.fixture()
def kafka_settings(local_stack: Settings) -> Settings:
    """The stack's settings with a topic prefix no other test uses."""
    return with_topic_prefix(local_stack, f"rp{uuid.uuid4().hex[:8]}.")
