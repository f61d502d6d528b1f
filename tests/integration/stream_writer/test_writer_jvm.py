"""The stream writer's JVM classes (``stack/jvm/writer``) in a real Spark session: the java.nio
local filesystems give new files and directories the permissions asked for (no ``chmod``
child process), known routes and each topic's shard rules route rows as the contract's router
does, and SimpleBinlogParse reads messages as Spark's from_json does."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

from cdc_platform.config import Settings
from cdc_platform.spark import build_session
from simple_binlog.routing import ShardRouter, ShardRule
from stream_writer import localfs, transform
from stream_writer.writer import register_jvm_parse


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


def _kafka_rows(spark: Any, values: list[bytes | None]) -> Any:
    return spark.createDataFrame(
        [
            (
                None,
                bytearray(v) if v is not None else None,
                "cdc.t",
                0,
                offset,
                datetime(2024, 3, 1, tzinfo=UTC),
            )
            for offset, v in enumerate(values)
        ],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP",
    )


def test_known_routes_are_looked_up_and_new_tables_still_routed_by_the_rules(
    spark: Any, local_stack: Settings
) -> None:
    def record(schema: str, table: str, offset: int) -> bytes:
        return (
            f'{{"version": 1, "binlogOffset": {offset}, "executeTime": 1709251200000, '
            f'"eventType": "INSERT", "schemaName": "{schema}", "tableName": "{table}", '
            '"source": "BINLOG", "content": {"id": 1}}'
        ).encode()

    kafka_rows = _kafka_rows(spark, [record("shop_00", "orders_00", 1), record("crm", "users", 2)])
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
    # Among many (a sharded source): no cap on the routes, and no name collides with another.
    # Routes are per topic (each instance has its own shard rules): another topic's does not
    # apply.
    known = {("cdc.t", f"db{i:05d}", "orders_00"): f"db{i:05d}_orders" for i in range(20_000)}
    known[("cdc.t", "shop_00", "orders_00")] = "looked_up"
    known[("cdc.other", "crm", "users")] = "not_this_topic"
    looked_up = {
        (row["schemaName"], row["tableName"]): (row["_table"], row["error"])
        for row in transform.lake_rows(kafka_rows, "UTC", local_stack.shard_rules, known).collect()
    }
    assert looked_up == {
        ("shop_00", "orders_00"): ("looked_up", None),
        ("crm", "users"): (router.route("crm", "users").name, None),
    }


def _message(**changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "version": 1,
        "binlogOffset": 1_709_251_200_000_000_001,
        "executeTime": 1_709_251_200_000,
        "eventType": "UPDATE",
        "schemaName": "shop_00",
        "tableName": "orders_00",
        "source": "BINLOG",
        "primaryKeys": ["id", "region"],
        "columnTypes": {"id": "bigint(20)", "note": "text", "amount": "decimal(12,2)"},
        "content": {
            "id": 12345678901234567,
            "note": 'caf\u00e9 \u2028 "quoted" \\ \U0001f600',
            "amount": "10.50",
            "ratio": 1.5e-7,
            "nested": {"a": [1, 2, {"b": None}], "t": True},
        },
        "beforeContent": {"id": 12345678901234567, "note": "", "amount": None},
        "position": {"serverId": 1, "file": "mariadb-bin.000001", "pos": 4, "gtid": "0-1-9"},
    }
    message.update(changes)
    return message


# Values the jar's parse must read as from_json does: (value, label).
_SAME_AS_FROM_JSON: list[tuple[bytes | None, str]] = [
    (json.dumps(_message()).encode(), "a full message (ASCII escapes)"),
    (json.dumps(_message(), ensure_ascii=False).encode(), "raw UTF-8 text"),
    (json.dumps(_message(), indent=2).encode(), "whitespace everywhere"),
    (json.dumps(_message(beforeContent=None, primaryKeys=None)).encode(), "explicit nulls"),
    (json.dumps(_message(primaryKeys=[], extra={"deep": [[{"x": 1}]]})).encode(), "unknown field"),
    (json.dumps(_message(primaryKeys=["a", 1, {"o": 2}])).encode(), "non-string keys"),
    (json.dumps(_message(schemaName="\u0073hop_00")).encode(), "escaped name"),
    (json.dumps(_message(content="just text")).encode(), "scalar content"),
    (json.dumps(_message(content=5, columnTypes=True, position=[1, 2])).encode(), "other scalars"),
    (json.dumps(_message(content={"blob": "x" * 2_000_000})).encode(), "a 2 MB row image"),
    (b'{"eventType": "INSERT", "eventType": "DELETE", "version": 1}', "duplicate field"),
    (b"{}", "empty object"),
    (None, "no value"),
    (b"{not json", "invalid JSON"),
    (json.dumps(_message(version="1")).encode(), "number as string"),
    (json.dumps(_message(executeTime=1.5)).encode(), "fraction for an integer"),
    (b'{"version": 1, "binlogOffset": 99999999999999999999}', "integer out of range"),
    (json.dumps(_message(primaryKeys="id")).encode(), "string for a list"),
    (b'{"version": 1, "content": {"a": 1}', "truncated object"),
]
# Values the jar's parse refuses although from_json may read something: a record that is not
# one whole JSON object in UTF-8 (RFC 8259, as the contract's own parser reads it) is
# dead-lettered instead of partly or leniently read.
_REFUSED_BY_JAR_ONLY: list[tuple[bytes, str]] = [
    (json.dumps(_message()).encode() + b" trailing", "text after the object"),
    (b"[" + json.dumps(_message()).encode() + b"]", "an array around the object"),
    (
        json.dumps(_message(tableName="caf\u00e9"), ensure_ascii=False)
        .encode()
        .replace(b"\xc3\xa9", b"\xe9"),
        "Latin-1, not UTF-8",
    ),
    (b"", "empty value"),
    (b"{'version': 1, 'content': {}}", "single quotes (Spark's JSON options allow them)"),
    (json.dumps(_message(content={"x": float("nan")})).encode(), "NaN (not JSON)"),
]


def test_each_topic_is_routed_by_its_instances_shard_rules(spark: Any) -> None:
    value = (
        b'{"version": 1, "binlogOffset": 1, "executeTime": 1709251200000, "eventType": "INSERT",'
        b' "schemaName": "shop_00", "tableName": "orders_00", "source": "BINLOG",'
        b' "content": {"id": 1}}'
    )
    kafka_rows = spark.createDataFrame(
        [
            (None, bytearray(value), topic, 0, 0, datetime(2024, 3, 1, tzinfo=UTC))
            for topic in ("cdc.a", "cdc.b", "cdc.c")
        ],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP",
    )
    keep_suffix = ShardRule(table_pattern=r"^(?P<table>.+)$")
    routed = {
        row["kafkaTopic"]: row["_table"]
        for row in transform.lake_rows(
            kafka_rows, "UTC", [ShardRule()], topic_rules={"cdc.b": [keep_suffix]}
        ).collect()
    }
    assert routed == {"cdc.a": "shop_orders", "cdc.b": "shop_orders_00", "cdc.c": "shop_orders"}


def test_the_jars_json_parse_reads_messages_as_from_json_does(spark: Any) -> None:
    assert register_jvm_parse(spark), "the writer jar lacks SimpleBinlogParse"
    values = [value for value, _ in _SAME_AS_FROM_JSON + _REFUSED_BY_JAR_ONLY]
    labels = [label for _, label in _SAME_AS_FROM_JSON + _REFUSED_BY_JAR_ONLY]
    kafka_rows = _kafka_rows(spark, values)
    columns = [f.name for f in transform.MESSAGE_SCHEMA.fields if not f.name.startswith("_")]

    def parsed(jvm_parse: bool) -> dict[int, Any]:
        frame = transform.parse(kafka_rows, "UTC", jvm_parse)
        return {row["kafkaOffset"]: row for row in frame.collect()}

    def same(got: Any, expected: Any) -> bool:
        if isinstance(expected, list):
            return (
                isinstance(got, list)
                and len(got) == len(expected)
                and all(map(same, got, expected))
            )
        if isinstance(expected, str) and expected[:1] in ("{", "["):
            # from_json rebuilds an object's text, the jar cuts it out as it came: the same
            # JSON, spelt with other whitespace.
            return isinstance(got, str) and json.loads(got) == json.loads(expected)
        return bool(got == expected)

    reference, fast = parsed(False), parsed(True)
    for offset, label in enumerate(labels[: len(_SAME_AS_FROM_JSON)]):
        expected, got = reference[offset], fast[offset]
        assert got["error"] == expected["error"], label
        if expected["error"] is not None:
            continue
        for column in columns:
            assert same(got[column], expected[column]), (label, column, got[column])
    for offset, label in enumerate(labels[len(_SAME_AS_FROM_JSON) :], len(_SAME_AS_FROM_JSON)):
        assert fast[offset]["error"] is not None and "JSON object" in fast[offset]["error"], label
