"""The stream writer's JVM classes (``stack/jvm/writer``) in a real Spark session: the java.nio
local filesystems give new files and directories the permissions asked for (no ``chmod``
child process), and FooterSummary's figures from Parquet footers equal those of reading the
rows back with Spark."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

from simple_binlog.config import Settings
from simple_binlog.routing import ShardRouter
from simple_binlog.spark import build_session
from stream_writer import localfs, transform
from stream_writer.catalog import HiveCatalog
from stream_writer.metrics import WriterMetrics
from stream_writer.writer import BatchWriter, WriterPaths


@pytest.fixture(scope="module")
def spark(local_stack: Settings) -> Iterator[Any]:
    conf = localfs.session_conf_for(local_stack.stack.home.resolve() / "jars" / "spark")
    assert conf, "the writer's jar was not built by the stack's Maven step"
    session = build_session(
        local_stack,
        "test-writer-jvm",
        {**conf, "spark.master": "local[1]", "spark.ui.showConsoleProgress": "false"},
    )
    yield session
    session.stop()


def _filesystem(spark: Any, impl: str, root: Path) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    conf.set("fs.file.impl", impl)
    conf.set("fs.file.impl.disable.cache", "true")
    path = jvm.org.apache.hadoop.fs.Path(root.as_uri())
    return jvm, path.getFileSystem(conf)


@pytest.mark.parametrize("impl", [localfs.NIO_LOCAL_FS, localfs.NIO_RAW_LOCAL_FS])
def test_files_and_directories_get_the_permissions_asked_for(
    spark: Any, tmp_path: Path, impl: str
) -> None:
    jvm, fs = _filesystem(spark, impl, tmp_path)
    assert fs.getClass().getName() == impl
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    directory = hadoop_path((tmp_path / "a" / "b").as_uri())
    assert fs.mkdirs(directory, permission(0o750))
    file = hadoop_path((tmp_path / "a" / "b" / "part.parquet").as_uri())
    fs.create(file).close()
    fs.setPermission(file, permission(0o604))
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "b").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "b" / "part.parquet").st_mode) == 0o604
    # The session's default for a new file (0666 less the umask, 022 unless configured).
    default = hadoop_path((tmp_path / "a" / "fresh.parquet").as_uri())
    fs.create(default).close()
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "fresh.parquet").st_mode) == 0o644
    with pytest.raises(Py4JJavaError) as missing:
        fs.setPermission(hadoop_path((tmp_path / "absent").as_uri()), permission(0o600))
    assert missing.value.java_exception.getClass().getName() == "java.io.FileNotFoundException"


def test_footer_summaries_equal_the_rows_read_back(
    spark: Any, local_stack: Settings, tmp_path: Path
) -> None:
    target = tmp_path / "staging" / "rows"
    frame = spark.range(40_000).selectExpr(
        "'cdc.test.a' AS kafkaTopic",
        "CAST(id % 3 AS INT) AS kafkaPartition",
        "id AS kafkaOffset",
        # NULL for dead letters: a file of only NULLs has no newest event
        "CASE WHEN id % 3 = 2 THEN NULL ELSE 1709251200000 + id END AS executeTime",
        "repeat('x', 200) AS content",
        "CASE WHEN id % 3 = 2 THEN 'dead_letter' ELSE 'shop_orders' END AS _table",
        "'2024-03-01' AS _dt",
    )
    (
        frame.repartition(3, "kafkaPartition")
        .sortWithinPartitions("_table", "_dt", "kafkaOffset")
        .write.option("parquet.block.size", 256 * 1024)  # several row groups a file
        .option("maxRecordsPerFile", 5_000)
        .partitionBy("_table", "_dt")
        .parquet(str(target))
    )
    staged = sorted(target.glob("_table=*/_dt=*/*.parquet"))
    assert len(staged) >= 6
    paths = WriterPaths(tmp_path / "lake", tmp_path / "checkpoint", "test-writer-jvm")
    writer = BatchWriter(
        spark,
        local_stack.stream_writer,
        paths,
        local_stack.shard_rules,
        lambda _topic, _partition: None,
        WriterMetrics("test-writer-jvm"),
    )
    from_footers = writer._footer_summaries(staged)
    read_back = writer._read_back(target)

    def by_path(summaries: list[Any]) -> dict[str, Any]:
        return {Path(s.path.removeprefix("file:")).resolve(): s for s in summaries}

    footers, rows = by_path(from_footers), by_path(read_back)
    assert footers.keys() == rows.keys() == {p.resolve() for p in staged}
    for path, summary in footers.items():
        assert (
            summary.rows,
            summary.first_topic,
            summary.last_topic,
            summary.first_partition,
            summary.last_partition,
            summary.min_offset,
            summary.max_offset,
            summary.max_event_ms,
        ) == (
            rows[path].rows,
            rows[path].first_topic,
            rows[path].last_topic,
            rows[path].first_partition,
            rows[path].last_partition,
            rows[path].min_offset,
            rows[path].max_offset,
            rows[path].max_event_ms,
        ), path
    assert sum(s.rows for s in from_footers) == 40_000
    assert any(s.max_event_ms is None for s in from_footers)  # the dead letters' files


def test_a_new_catalog_learns_existing_partitions_and_adds_only_new_ones(
    spark: Any, tmp_path: Path
) -> None:
    database = f"test_sw_catalog_{uuid.uuid4().hex[:8]}"
    first = HiveCatalog(spark, database, tmp_path)
    first.ensure_database()
    try:
        first.add_all({"shop_orders": ["2024-03-01"], "crm_users": ["2024-03-01"]})
        # A writer started later (fresh process): the tables exist, one day is new.
        later = HiveCatalog(spark, database, tmp_path)
        later.add_all(
            {"shop_orders": ["2024-03-01", "2024-03-02"], "billing_invoices": ["2024-03-02"]}
        )
        assert later._listed == {"shop_orders"}  # listed once, not re-added
        assert ("shop_orders", "2024-03-01") in later._partitions

        def partitions(table: str) -> list[str]:
            rows = spark.sql(f"SHOW PARTITIONS {database}.{table}").collect()
            return sorted(row["partition"] for row in rows)

        assert partitions("shop_orders") == ["dt=2024-03-01", "dt=2024-03-02"]
        assert partitions("crm_users") == ["dt=2024-03-01"]
        assert partitions("billing_invoices") == ["dt=2024-03-02"]
        location = (
            spark.sql(f"DESCRIBE FORMATTED {database}.shop_orders PARTITION (dt='2024-03-02')")
            .where("col_name = 'Location'")
            .first()
        )
        assert location is not None
        assert location["data_type"].endswith(f"{database}.db/shop_orders/dt=2024-03-02")
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


def test_known_routes_are_looked_up_and_new_tables_still_routed_by_the_rules(
    spark: Any, local_stack: Settings
) -> None:
    def record(schema: str, table: str, offset: int) -> dict[str, Any]:
        value = (
            f'{{"version": 1, "binlogOffset": {offset}, "executeTime": 1709251200000, '
            f'"eventType": "INSERT", "schemaName": "{schema}", "tableName": "{table}", '
            '"source": "BINLOG", "content": {"id": 1}}'
        )
        return {
            "key": None,
            "value": bytearray(value.encode()),
            "topic": "cdc.t",
            "partition": 0,
            "offset": offset,
            "timestamp": datetime(2024, 3, 1, tzinfo=UTC),
        }

    kafka_rows = spark.createDataFrame(
        [record("shop_00", "orders_00", 1), record("crm", "users", 2)],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP",
    )
    router = ShardRouter(local_stack.shard_rules)
    by_rules = {
        (row["schemaName"], row["tableName"]): row["_table"]
        for row in transform.lake_rows(kafka_rows, "UTC", local_stack.shard_rules).collect()
    }
    assert by_rules == {
        ("shop_00", "orders_00"): router.route("shop_00", "orders_00").name,
        ("crm", "users"): router.route("crm", "users").name,
    }
    # A known route wins over the rules (it is what the contract's router said when the
    # table was first seen); a table not in the map is still routed by the rules.
    known = {("shop_00", "orders_00"): "looked_up"}
    looked_up = {
        (row["schemaName"], row["tableName"]): (row["_table"], row["error"])
        for row in transform.lake_rows(kafka_rows, "UTC", local_stack.shard_rules, known).collect()
    }
    assert looked_up == {
        ("shop_00", "orders_00"): ("looked_up", None),
        ("crm", "users"): (router.route("crm", "users").name, None),
    }
