"""Pure: what the writer appends to a table after a crash, its crash points, the tables it
writes and their properties, and the java.nio filesystem settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.iceberg import KafkaOffsets
from cdc_platform.lake import table_columns
from simple_binlog.errors import ConfigError
from stream_writer import localfs
from stream_writer.writer import (
    CRASH_ENV,
    _Group,
    _groups,
    crash_point,
    is_written,
    keyed_tables,
    needs_commit,
    table_floors,
    table_properties,
)

T = "cdc.binlog.local"


def _group(partition: int, lo: int, hi: int) -> _Group:
    return _Group("shop_orders", "2024-03-01", T, partition, hi - lo + 1, lo, hi, None)


def test_a_table_that_committed_the_interrupted_batch_skips_what_it_holds() -> None:
    progress = {(T, 0): 100, (T, 1): 50}
    # The interrupted batch ended at 180 / 50 / 7: the table committed it before the crash.
    mine = KafkaOffsets({(T, 0): 180, (T, 1): 50, (T, 2): 7})
    floors = table_floors(progress, mine)
    assert floors == {(T, 0): 180, (T, 1): 50, (T, 2): 7}
    # The replayed batch brings the same rows: nothing to commit again.
    assert not needs_commit([_group(0, 100, 179), _group(2, 0, 6)], floors)
    # A larger batch (a fresh checkpoint read further): only rows from 180 on are new.
    assert needs_commit([_group(0, 100, 250)], floors)


def test_a_table_without_a_newer_commit_keeps_the_progress() -> None:
    progress = {(T, 0): 100}
    assert table_floors(progress, None) == progress
    # An older commit of the table (before the progress) changes nothing.
    assert table_floors(progress, KafkaOffsets({(T, 0): 60})) == progress
    assert needs_commit([_group(0, 100, 120)], progress)
    assert needs_commit([_group(5, 0, 0)], progress)  # a partition the progress lacks


def test_crash_points_come_from_the_environment_only_by_name() -> None:
    assert crash_point({}) is None
    assert crash_point({CRASH_ENV: ""}) is None
    assert crash_point({CRASH_ENV: "between-tables"}) == "between-tables"
    with pytest.raises(ConfigError, match="is not one of before-commit"):
        crash_point({CRASH_ENV: "somewhere"})


def test_control_rows_are_never_written_but_tables_are() -> None:
    assert is_written("shop_orders") and is_written("dead_letter")
    assert not is_written("_control")


def test_raw_tables_roll_files_at_the_target_size_without_a_shuffle() -> None:
    rows = [name for name, _ in table_columns("shop_orders")]
    properties = table_properties(64, rows)
    assert properties["write.target-file-size-bytes"] == str(64 * 1024 * 1024)
    assert properties["write.distribution-mode"] == "none"
    assert properties["write.metadata.metrics.column.content"] == "none"
    assert "write.metadata.metrics.column.kafkaOffset" not in properties
    # Iceberg refuses a metrics setting of a column the table lacks.
    assert "write.metadata.metrics.column.raw" not in properties
    dead = table_properties(64, [name for name, _ in table_columns("dead_letter")])
    assert dead["write.metadata.metrics.column.raw"] == "none"
    assert "write.metadata.metrics.column.content" not in dead


def test_the_nio_filesystems_are_chosen_only_when_their_jar_is_there(tmp_path: Path) -> None:
    assert localfs.session_conf_for(tmp_path) == {}
    (tmp_path / "cdc-mirror-writer-jvm-1.jar").write_bytes(b"")
    conf = localfs.session_conf_for(tmp_path)
    assert conf == {"spark.hadoop.fs.file.impl": localfs.NIO_LOCAL_FS}
    assert localfs.nio_in_session(conf["spark.hadoop.fs.file.impl"])
    assert not localfs.nio_in_session(None)


def test_the_write_jobs_counts_become_the_batchs_groups_and_routes() -> None:
    counts = {
        "groups": [
            ["shop_orders", "2024-03-01", T, 0, 3, 10, 12, 1_709_251_200_000],
            ["dead_letter", "2024-03-01", T, 1, 1, 7, 7, None],
        ],
        "sources": [
            ["shop_orders", T, "shop_00", "orders_00"],
            ["shop_orders", T, "shop_01", "orders_01"],
        ],
    }
    groups, physical = _groups(counts)
    assert groups == [
        _Group("shop_orders", "2024-03-01", T, 0, 3, 10, 12, 1_709_251_200_000),
        _Group("dead_letter", "2024-03-01", T, 1, 1, 7, 7, None),
    ]
    assert physical == {"shop_orders": {(T, "shop_00", "orders_00"), (T, "shop_01", "orders_01")}}


def test_the_kafka_keys_name_the_logical_tables_a_batch_brings() -> None:
    def route(topic: str, schema: str, table: str) -> str | None:
        assert topic == T
        return None if schema == "nowhere" else f"{schema.rstrip('0123456789_')}_{table}"

    keys = [
        (T, b"shop_01.orders"),
        (T, b"shop_02.orders"),  # the same logical table
        (T, b"shop_01.users"),
        (T, b"nowhere.orders"),  # routed nowhere: a dead letter
        (T, b"\x00heartbeat"),  # a control message
        (T, None),
        (T, b"no-dot"),
        (T, b"\xff\xfe.x"),  # not UTF-8
    ]
    assert keyed_tables(keys, route) == {"shop_orders", "shop_users"}
