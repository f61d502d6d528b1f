"""Fixtures of the replay tests: sharded tables of their own and a topic prefix of their own."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from cdc_platform.config import Settings
from cdc_platform.kafka import admin_config
from tests.integration.mock_replay.helpers import Shards, with_topic_prefix


@pytest.fixture()
def shards(local_stack: Settings):
    created = Shards(local_stack)
    yield created
    created.drop()


@pytest.fixture()
def kafka_settings(local_stack: Settings):
    """The stack's settings with a topic prefix no other test uses; its topics are deleted
    afterwards."""
    settings = with_topic_prefix(local_stack, f"rp{uuid.uuid4().hex[:8]}.")
    yield settings
    admin = AdminClient(admin_config(settings.kafka))
    prefix = settings.kafka.topic_prefix
    topics = [name for name in admin.list_topics(timeout=30).topics if name.startswith(prefix)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result()
