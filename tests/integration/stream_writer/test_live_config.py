"""A running stream writer follows its configuration file (``config_store.source: file``)
without a restart: a changed shard rule routes the rows of the next batch, never part of a
batch, and an instance added to the file has its topic read (the query restarts from its
checkpoint and reads the new topic from its start). The lake is read by pyiceberg: what a
reader of the committed tables sees."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import yaml

from cdc_platform.config import Settings
from cdc_platform.kafka import ensure_topic
from simple_binlog.naming import topic_name
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    WriterProcess,
    delete_topic,
    message,
    produce_messages,
    wait_until,
)

DAY_MS = 1_709_251_200_000  # 2024-03-01
PICKUP_S = 10.0
KEEP_TABLE_SUFFIX = {"schema_pattern": r"^(?P<db>.+?)(_\d+)?$", "table_pattern": r"^(?P<table>.+)$"}
WAIT_S = 240.0


def _write_config(path: Path, instances: list[str], rules: list[dict[str, str]] | None) -> None:
    document: dict[str, object] = {
        "instances": [
            {"name": name, "host": "127.0.0.1", "port": 3306, "user": "cdc"} for name in instances
        ]
    }
    if rules is not None:
        document["shard_rules"] = rules
    path.write_text(yaml.safe_dump(document))


def _rows(env: WriterEnv, table: str) -> list[int]:
    """The rows committed to ``table`` (their binlogOffset: the test's row number)."""
    return sorted(row["binlogOffset"] for row in env.rows(table, ("binlogOffset",)))


def _log_has(writer: WriterProcess, text: str) -> bool:
    return text in writer.log_file.read_text(errors="replace")


def test_shard_rule_change_and_new_instance_reach_a_running_writer(
    local_stack: Settings, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    first, second = f"swlive_a_{suffix}", f"swlive_b_{suffix}"
    topics = [topic_name(local_stack.kafka, name) for name in (first, second)]
    for topic in topics:
        assert ensure_topic(local_stack.kafka, topic, partitions=1)
    config = tmp_path / "cdc.yaml"
    _write_config(config, [first], None)  # the default rule: shard suffixes stripped
    env = WriterEnv.create(tmp_path, topics[0], local_stack, trigger_interval_s=1)
    env.overrides["CDC_MIRROR_CONFIG"] = str(config)
    env.overrides["CDC_MIRROR_CONFIG_STORE__POLL_INTERVAL_S"] = "1"
    try:
        with LakeRun(env, tmp_path, by_topic=False) as lake:
            writer = lake.writer
            produced_at: dict[int, float] = {}

            def produce_one(topic: str) -> None:
                row = len(produced_at) + 1
                produced_at[row] = time.monotonic()
                produce_messages(
                    local_stack, topic, [message("shop_01", "orders_01", row, DAY_MS, row)]
                )

            produce_one(topics[0])
            wait_until(
                lambda: bool(_rows(env, "shop_orders")),
                WAIT_S,
                "the first row in shop_orders",
                writer.diagnostics,
            )

            # 1. A changed shard rule: in force within 10 s, from one batch to the next.
            _write_config(config, [first], [KEEP_TABLE_SUFFIX])
            changed_at = time.monotonic()
            while not _rows(env, "shop_orders_01"):
                alive = writer.proc.poll() is None
                assert alive and time.monotonic() - changed_at < WAIT_S, writer.diagnostics()
                produce_one(topics[0])
            wait_until(
                lambda: (
                    len(_rows(env, "shop_orders")) + len(_rows(env, "shop_orders_01"))
                    == len(produced_at)
                ),
                WAIT_S,
                "every row published",
                writer.diagnostics,
            )
            old, new = _rows(env, "shop_orders"), _rows(env, "shop_orders_01")
            assert sorted(old + new) == sorted(produced_at)  # each row once
            assert max(old) < min(new), "the rules changed within a batch"
            late = [r for r in old if produced_at[r] > changed_at + PICKUP_S]
            assert not late, f"rows {late} produced 10 s after the change used the old rule"
            assert _log_has(writer, "shard rules changed"), writer.diagnostics()

            # 2. A new instance: its topic is read by the running writer.
            produce_messages(local_stack, topics[1], [message("crm_02", "users_02", 1, DAY_MS, 1)])
            _write_config(config, [first, second], [KEEP_TABLE_SUFFIX])
            added_at = time.monotonic()
            wait_until(
                lambda: _log_has(writer, f"now reads {topics[0]}, {topics[1]}"),
                PICKUP_S + 5.0,  # plus stopping the query between batches
                "the query restarted with the new instance's topic",
                writer.diagnostics,
            )
            assert time.monotonic() - added_at < PICKUP_S + 5.0
            wait_until(
                lambda: bool(_rows(env, "crm_users_02")),
                WAIT_S,
                "the new instance's row in crm_users_02",
                writer.diagnostics,
            )
            produce_one(topics[0])  # the first topic is still read, from where it was
            wait_until(
                lambda: len(_rows(env, "shop_orders_01")) == len(new) + 1,
                WAIT_S,
                "the first topic's next row",
                writer.diagnostics,
            )
            assert writer.stop() == 0
    finally:
        for topic in topics:
            delete_topic(local_stack, topic)
