"""The web admin's replays run over its own instances, handed to mock_replay as a
configuration snapshot (no stand-in Settings)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from cdc_platform.config import Settings
from cdc_platform.config_store import InstanceConfig
from simple_binlog.errors import CdcMirrorError, ConfigError
from webui.replay import ReplayRequest
from webui.replay_adapter import MockReplayService

SETTINGS = Settings()  # its own instance is 'local'


def _instance(name: str, topic: str | None = None) -> InstanceConfig:
    return InstanceConfig(
        name=name, host="127.0.0.1", port=3306, user="cdc", password=SecretStr("x"), topic=topic
    )


def _request(instance: str) -> ReplayRequest:
    return ReplayRequest(instance=instance, db_prefix="shop", table_prefix="orders")


def test_the_replay_knows_the_admins_instances_only() -> None:
    service = MockReplayService(SETTINGS, lambda: [_instance("billing")])
    with pytest.raises(ConfigError, match=r"no MySQL instance named 'local' .*known: billing"):
        service.start(_request("local"))


def test_an_instance_with_a_topic_of_its_own_is_refused() -> None:
    service = MockReplayService(SETTINGS, lambda: [_instance("billing", topic="elsewhere")])
    with pytest.raises(CdcMirrorError, match="publishes to 'elsewhere'"):
        service.start(_request("billing"))
