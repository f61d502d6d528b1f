"""Runs that must be refused before anything is published: injection attempts in the
condition, a table without a usable key, an unknown instance, no matching table, a "replica"
that is not one, a malformed day. Each ends with one sentence; the instance topic and the
progress topic keep their end offsets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from mock_replay.errors import ConditionError, ReplayError
from mock_replay.publish import KafkaProgressStore, progress_topic
from mock_replay.runner import ReplayRequest, start_run
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.naming import topic_name
from tests.integration.mock_replay.helpers import Shards, end_offsets, replay_to_memory

ROOT = Path(__file__).resolve().parents[3]
COLUMNS = "id INT NOT NULL PRIMARY KEY, status VARCHAR(10), amount DECIMAL(10,2)"
VALUES = "SELECT s.seq, IF(s.seq % 2, 'NEW', 'PAID'), s.seq"

INJECTIONS = [
    "1=1; DROP TABLE orders_00",
    "id = 1 UNION SELECT user, password FROM mysql.user",
    "id IN (SELECT id FROM mysql.user)",
    "id = 1 -- ' OR 1=1",
    "id = 1 # comment",
    "id = 1 /*! OR 1=1 */",
    "status = 'x' OR 'a'='a",
    "id = 1 INTO OUTFILE '/tmp/replay.txt'",
    "id = @@hostname",
    "SLEEP(10) = 0",
    "BENCHMARK(10000000, MD5('x')) = 0",
    "LOAD_FILE('/etc/passwd') IS NOT NULL",
    "id = 1 AND EXISTS (SELECT 1)",
    "authentication_string = ''",
    "id = CHAR(49)",
    'status = "PAID"',
    "id = 1 OR 1 = (SELECT COUNT(*) FROM information_schema.tables)",
]


def _topics(settings: Settings) -> list[str]:
    return [topic_name(settings.kafka, "local"), progress_topic(settings.kafka, "local")]


@pytest.fixture()
def orders(kafka_settings: Settings, shards: Shards) -> Shards:
    shards.create(2, 2, COLUMNS, 20, VALUES)
    store = KafkaProgressStore(kafka_settings.kafka, "local")
    store.ensure_topics()
    return shards


def test_injection_attempts_are_refused_and_nothing_is_published(
    kafka_settings: Settings, orders: Shards
) -> None:
    before = end_offsets(kafka_settings, _topics(kafka_settings))
    store = KafkaProgressStore(kafka_settings.kafka, "local")
    refused = []
    for attempt in INJECTIONS:
        with pytest.raises(ConditionError) as caught:
            start_run(
                kafka_settings,
                ReplayRequest("local", orders.db, "orders", condition=attempt),
                store,
            )
        message = str(caught.value)
        assert message.startswith("the replay condition is refused: ") and "\n" not in message
        refused.append(message)
    assert end_offsets(kafka_settings, _topics(kafka_settings)) == before
    assert len(before) >= 2 and all(offset == 0 for offset in before.values())
    assert store.runs() == {}
    assert any("is not a column" in m for m in refused)  # authentication_string


def test_the_cli_refuses_an_injection_with_one_sentence(
    kafka_settings: Settings, orders: Shards
) -> None:
    before = end_offsets(kafka_settings, _topics(kafka_settings))
    env = {**os.environ, "CDC_MIRROR_KAFKA__TOPIC_PREFIX": kafka_settings.kafka.topic_prefix}
    result = subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "replay", "--db-prefix", orders.db, "--table-prefix",
         "orders", "--where", "id = 1; DELETE FROM orders_00", "--no-progress"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2  # a configuration error
    lines = [line for line in result.stderr.splitlines() if not line.startswith("%")]
    assert lines == [
        "error: the replay condition is refused: it must be one expression, ';' is not allowed "
        "(at character 7)."
    ]
    assert "Traceback" not in result.stdout + result.stderr
    assert end_offsets(kafka_settings, _topics(kafka_settings)) == before


def test_table_without_a_usable_key_is_refused_by_name(
    local_stack: Settings, shards: Shards
) -> None:
    shards.create(1, 1, COLUMNS, 5, VALUES)
    shards.execute(
        f"CREATE TABLE {shards.db}_00.orders_01 (id INT, status VARCHAR(10), UNIQUE KEY uk (id))",
        f"CREATE TABLE {shards.db}_00.orders_02 (id INT NOT NULL, code INT NOT NULL, UNIQUE KEY uk (code))",
        f"INSERT INTO {shards.db}_00.orders_02 VALUES (1, 10), (2, 5)",
    )
    with pytest.raises(ReplayError) as caught:
        replay_to_memory(local_stack, ReplayRequest("local", shards.db, "orders"))
    assert str(caught.value) == (
        f"table {shards.db}_00.orders_01 has neither a primary key nor a unique key on NOT NULL "
        "columns, so it cannot be replayed exactly; add one or leave it out."
    )
    shards.execute(f"DROP TABLE {shards.db}_00.orders_01")
    messages, _, prepared = replay_to_memory(
        local_stack, ReplayRequest("local", shards.db, "orders")
    )
    assert prepared.shapes[f"{shards.db}_00.orders_02"].key == ("code",)
    assert [m.content["code"] for m in messages if m.table_name == "orders_02"] == [5, 10]


def test_unknown_instance_empty_match_bad_day_and_non_replica_are_refused(
    local_stack: Settings, shards: Shards
) -> None:
    shards.create(1, 1, COLUMNS, 5, VALUES)
    with pytest.raises(ConfigError, match="no MySQL instance named 'nope' in the config"):
        replay_to_memory(local_stack, ReplayRequest("nope", shards.db, "orders"))
    with pytest.raises(
        ReplayError,
        match=rf"no table of MySQL instance 'local' belongs to {shards.db}x\*\.orders\*",
    ):
        replay_to_memory(local_stack, ReplayRequest("local", shards.db + "x", "orders"))
    with pytest.raises(ReplayError, match=r"'21\.11\.2026' is not a day in the form YYYY-MM-DD"):
        replay_to_memory(
            local_stack, ReplayRequest("local", shards.db, "orders", execute_day="21.11.2026")
        )
    primary = f"127.0.0.1:{local_stack.instances[0].port}"
    with pytest.raises(
        ConfigError, match=rf"user 'cdc' may not read the replication status of {primary}"
    ):
        replay_to_memory(local_stack, ReplayRequest("local", shards.db, "orders", replica=primary))
    as_admin = local_stack.model_copy(
        update={
            "instances": [
                local_stack.instances[0].model_copy(
                    update={
                        "user": local_stack.stack.admin_user,
                        "password": local_stack.stack.admin_password,
                    }
                )
            ]
        }
    )
    with pytest.raises(
        ReplayError, match=rf"{primary} is not a replica \(SHOW SLAVE STATUS is empty\)"
    ):
        replay_to_memory(as_admin, ReplayRequest("local", shards.db, "orders", replica=primary))
    with pytest.raises(CdcMirrorError, match="cannot be reached"):
        replay_to_memory(
            local_stack, ReplayRequest("local", shards.db, "orders", replica="127.0.0.1:1")
        )


def test_an_instance_without_any_run_has_no_runs_and_unknown_runs_are_named(
    kafka_settings: Settings,
) -> None:
    from mock_replay.api import ReplayService

    service = ReplayService(kafka_settings)
    assert service.runs("local") == []  # the progress topic does not exist yet
    with pytest.raises(ReplayError, match="no replay run 'nope' is recorded"):
        service.status("nope")
