"""A replay connects to the instance its configuration snapshot describes and finds the
tables by that instance's shard rules (not the settings' instances and rules)."""

from __future__ import annotations

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from mock_replay.api import ReplayService
from mock_replay.runner import ReplayRequest
from simple_binlog.naming import topic_name
from simple_binlog.routing import ShardRule
from tests.integration.mock_replay.helpers import Shards, read_topic

COLUMNS = "id INT NOT NULL PRIMARY KEY, v VARCHAR(20)"
VALUES = "SELECT s.seq, CONCAT('v', s.seq)"


def test_a_replay_of_an_instance_known_only_to_the_configuration(
    kafka_settings: Settings, shards: Shards
) -> None:
    shards.create(1, 2, COLUMNS, 40, VALUES)  # <db>_00.orders_00 and <db>_00.orders_01
    local = kafka_settings.instance("local")
    instance = InstanceConfig(
        name="cfg_only",
        host=local.host,
        port=local.port,
        user=local.user,
        password=local.password,
        allow_cleartext_password=local.allow_cleartext_password,
        # Table suffixes kept: orders_01 is a logical table of its own on this instance.
        shard_rules=(ShardRule(table_pattern=r"^(?P<table>.+)$"),),
    )
    service = ReplayService(kafka_settings, ConfigSnapshot(version=5, instances=(instance,)))

    run_id = service.start(ReplayRequest("cfg_only", shards.db, "orders_01", batch_size=15))
    outcome = service.wait(run_id, timeout_s=180)

    assert outcome is not None and outcome.state == "done" and outcome.rows == 40
    assert list(service.status(run_id).tables) == [f"{shards.db}_00.orders_01"]
    messages = read_topic(kafka_settings, topic_name(kafka_settings.kafka, "cfg_only"))
    assert sorted(m.content["id"] for _, m in messages) == list(range(1, 41))
    assert {m.table_name for _, m in messages} == {"orders_01"}
