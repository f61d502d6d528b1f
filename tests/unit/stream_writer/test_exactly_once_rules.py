"""Pure: what the writer appends to the raw table after a crash, its crash points, the rows it
writes, the raw table's properties and view, and the java.nio filesystem settings."""

from __future__ import annotations

from pathlib import Path
from threading import Lock
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from cdc_platform.iceberg import KafkaOffsets
from cdc_platform.lake import (
    RAW_TABLE_COLUMNS,
    raw_table_properties,
    raw_view_query,
    raw_view_sql,
)
from simple_binlog.errors import CdcMirrorError, ConfigError
from stream_writer import localfs
from stream_writer.layout import next_midnight_ms
from stream_writer.readiness import BatchProgress, ReadinessRule, WriterState
from stream_writer.writer import (
    CRASH_ENV,
    FAULT_ENV,
    BatchWriter,
    _Group,
    _groups,
    crash_point,
    fault_point,
    is_written,
    jvm_commit_errors,
    needs_commit,
    table_floors,
)
from tests.unit.cdc_platform.test_spark_error_sentence import JavaError, JavaThrowable

T = "cdc.binlog.local"


def _group(partition: int, lo: int, hi: int) -> _Group:
    return _Group("shop_orders", "2024-03-01", T, partition, hi - lo + 1, lo, hi, None)


def test_a_raw_commit_ahead_of_the_progress_skips_what_it_holds() -> None:
    progress = {(T, 0): 100, (T, 1): 50}
    # The interrupted batch ended at 180 / 50 / 7: its raw commit was made before the crash.
    mine = KafkaOffsets({(T, 0): 180, (T, 1): 50, (T, 2): 7})
    floors = table_floors(progress, mine)
    assert floors == {(T, 0): 180, (T, 1): 50, (T, 2): 7}
    # The replayed batch brings the same rows: nothing to commit again.
    assert not needs_commit([_group(0, 100, 179), _group(2, 0, 6)], floors)
    # A larger batch (a fresh checkpoint read further): only rows from 180 on are new.
    assert needs_commit([_group(0, 100, 250)], floors)


def test_without_a_newer_raw_commit_the_progress_holds() -> None:
    progress = {(T, 0): 100}
    assert table_floors(progress, None) == progress
    # An older commit of the table (before the progress) changes nothing.
    assert table_floors(progress, KafkaOffsets({(T, 0): 60})) == progress
    assert needs_commit([_group(0, 100, 120)], progress)
    assert needs_commit([_group(5, 0, 0)], progress)  # a partition the progress lacks


def test_crash_points_come_from_the_environment_only_by_name() -> None:
    assert crash_point({}) is None
    assert crash_point({CRASH_ENV: ""}) is None
    assert crash_point({CRASH_ENV: "before-progress"}) == "before-progress"
    with pytest.raises(ConfigError, match="is not one of before-commit"):
        crash_point({CRASH_ENV: "between-tables"})  # one commit per batch: no such point
    with pytest.raises(ConfigError, match="is not one of before-commit"):
        crash_point({CRASH_ENV: "somewhere"})


def test_failing_commits_come_from_the_environment_only_by_name() -> None:
    assert fault_point({}) is None
    assert fault_point({FAULT_ENV: "progress-commit"}) == "progress-commit"
    with pytest.raises(ConfigError, match="is not one of raw-commit, progress-commit"):
        fault_point({FAULT_ENV: "before-commit"})  # a crash point, not a failing commit


def test_a_commit_the_jvm_failed_stops_the_batch_in_one_sentence_without_secrets() -> None:
    # What py4j raises when the writer jar's commit throws (Py4JJavaError's shape).
    failure = JavaError(
        JavaThrowable(
            "org.apache.iceberg.exceptions.RuntimeIOException: Failed to write s3://b/t "
            "(key s3cr3t)",
            JavaThrowable("java.io.IOException: the storage refused the write"),
        )
    )
    committing = jvm_commit_errors("raw commit", 7, "s3://b", ("s3cr3t",))
    with pytest.raises(CdcMirrorError) as raised, committing:
        raise failure
    assert str(raised.value) == (
        "batch 7's raw commit to the lake at s3://b failed: "
        "org.apache.iceberg.exceptions.RuntimeIOException: Failed to write s3://b/t (key ***) "
        "(cause: java.io.IOException: the storage refused the write)"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_python_error_in_a_commit_is_not_dressed_as_the_lakes() -> None:
    with pytest.raises(KeyError), jvm_commit_errors("progress commit", 7, "s3://b", ()):
        raise KeyError("a bug")
    with jvm_commit_errors("progress commit", 7, "s3://b", ()):
        pass  # a commit that worked: nothing raised


def test_control_rows_are_never_written_but_tables_are() -> None:
    assert is_written("shop_orders") and is_written("dead_letter")
    assert not is_written("_control")


def test_the_raw_table_rolls_files_at_the_target_size_without_a_shuffle() -> None:
    properties = raw_table_properties(64)
    assert properties["write.target-file-size-bytes"] == str(64 * 1024 * 1024)
    assert properties["write.distribution-mode"] == "none"
    assert properties["write.metadata.metrics.column.content"] == "none"
    assert properties["write.metadata.metrics.column.raw"] == "none"
    assert "write.metadata.metrics.column.kafkaOffset" not in properties
    # Iceberg refuses a metrics setting of a column the table lacks.
    names = {name for name, _ in RAW_TABLE_COLUMNS}
    for key in properties:
        if key.startswith("write.metadata.metrics.column."):
            assert key.rsplit(".", 1)[1] in names
    # Several writers share the table: a lost race is retried, many times.
    assert int(properties["commit.retry.num-retries"]) >= 10
    # A commit a batch: old metadata files deleted as commits go on.
    assert properties["write.metadata.delete-after-commit.enabled"] == "true"


def test_a_logical_tables_view_selects_its_own_columns_and_rows() -> None:
    sql = raw_view_sql("`lake`.`ods`.`_cdc_changes`", "`ods`.`shop_orders`", "shop_orders")
    assert sql.startswith("CREATE OR REPLACE VIEW spark_catalog.`ods`.`shop_orders` AS SELECT ")
    assert "`content`, " in sql and "`raw`" not in sql and sql.count("`dt`") == 1
    assert sql.endswith("FROM `lake`.`ods`.`_cdc_changes` WHERE `logicalTable` = 'shop_orders'")
    dead = raw_view_sql("`lake`.`ods`.`_cdc_changes`", "`ods`.`dead_letter`", "dead_letter")
    assert "`raw`" in dead and "`content`" not in dead
    # A copied view (RawViews) stores the query text CREATE VIEW stores: the same.
    query = raw_view_query("`lake`.`ods`.`_cdc_changes`", "shop_orders")
    assert sql == f"CREATE OR REPLACE VIEW spark_catalog.`ods`.`shop_orders` AS {query}"


def test_the_nio_filesystems_are_chosen_only_when_their_jar_is_there(tmp_path: Path) -> None:
    assert localfs.session_conf_for(tmp_path) == {}
    (tmp_path / "cdc-mirror-writer-jvm-1.jar").write_bytes(b"")
    conf = localfs.session_conf_for(tmp_path)
    assert conf == {"spark.hadoop.fs.file.impl": localfs.NIO_LOCAL_FS}
    assert localfs.nio_in_session(conf["spark.hadoop.fs.file.impl"])
    assert not localfs.nio_in_session(None)


def test_the_write_jobs_counts_become_the_batchs_groups_and_routes() -> None:
    # The writer keys the job's counts "<logical table>/<dt>" and its source schemas
    # "<logical table>/<schema>" (every written row is the raw table's).
    counts = {
        "groups": [
            ["_cdc_changes", "shop_orders/2024-03-01", T, 0, 3, 10, 12, 1_709_251_200_000],
            ["_cdc_changes", "dead_letter/2024-03-01", T, 1, 1, 7, 7, None],
            ["_control", "_control/2024-03-02", T, 1, 1, 8, 8, 1_709_337_600_000],
        ],
        "sources": [
            ["_cdc_changes", T, "shop_orders/shop_00", "orders_00"],
            ["_cdc_changes", T, "shop_orders/shop_01", "orders_01"],
        ],
    }
    groups, physical = _groups(counts)
    assert groups == [
        _Group("shop_orders", "2024-03-01", T, 0, 3, 10, 12, 1_709_251_200_000),
        _Group("dead_letter", "2024-03-01", T, 1, 1, 7, 7, None),
        _Group("_control", "2024-03-02", T, 1, 1, 8, 8, 1_709_337_600_000),
    ]
    assert physical == {"shop_orders": {(T, "shop_00", "orders_00"), (T, "shop_01", "orders_01")}}


def test_a_raw_commit_never_records_less_than_the_writers_earlier_one() -> None:
    # A crash left the raw table at 144 on partition 2; the first batch after the restart (a
    # fresh checkpoint, cut at 200 messages) ends at 110 there: the commit records 144, since
    # rows below it are in the table (recording 110 would have them written again).
    ahead = KafkaOffsets({(T, 1): 55, (T, 2): 144})
    ends = {(T, 1): 89, (T, 2): 110}
    assert table_floors(ends, ahead) == {(T, 1): 89, (T, 2): 144}


def test_a_failed_progress_commit_of_a_day_ready_by_the_clock_is_one_sentence() -> None:
    # check_readiness commits outside any batch (the job's loop calls it): a JVM error of
    # that commit is the same sentence as a batch's, and the day is not marked ready.
    day = "2024-03-01"
    end_of_day = next_midnight_ms(day, ZoneInfo("UTC"))
    state = WriterState()
    state.table_days = {"orders": {day}}
    state.advance([BatchProgress("t", 0, 10, 0, end_of_day + 7_200_000)])

    def save(state: WriterState, batch_id: int) -> None:
        raise JavaError(JavaThrowable("org.apache.iceberg.exceptions.RuntimeIOException: refused"))

    marked: list[list[str]] = []
    writer = SimpleNamespace(
        start=lambda: None,
        _lock=Lock(),
        state=state,
        rule=ReadinessRule(ZoneInfo("UTC"), lateness_budget_ms=0, pipeline_delay_ms=0),
        clock=lambda: (end_of_day + 30 * 86_400_000) / 1000,
        _save=save,
        _mark_ready=marked.append,
        _committing=lambda commit, batch_id: jvm_commit_errors(commit, batch_id, "s3://b", ()),
    )
    with pytest.raises(CdcMirrorError) as raised:
        BatchWriter.check_readiness(writer)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"batch {state.last_batch}'s progress commit to the lake at s3://b failed: "
        "org.apache.iceberg.exceptions.RuntimeIOException: refused"
    )
    assert marked == [] and state.ready_days == set()
