"""Partial-zero dates and BINARY(n) trailing zero bytes through the merge's type mapping, on
the real stack: MariaDB rows written under a permissive sql_mode, their messages taken both
ways they reach the lake (the collector's decoding of the binlog, and the replay's SELECT
through the contract's encoder), turned into snapshot columns by the merge's own ``flatten``
with the schema it plans from MySQL, written as Parquet by Spark and read back. Every value,
read as text and decoded with ``merge.types.snapshot_date_text``, equals MySQL's own text of
it, byte for byte, on both paths; binaries equal MySQL's bytes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from cdc_platform.config import Settings
from collector.reader import read_range, server_position
from merge.schema import OFFSET_COLUMN, plan_schema
from merge.transform import EVENT_COLUMN, flatten
from merge.types import snapshot_date_text
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.values import encode, parse_column_type
from tests.integration.collector.harness import admin

COLUMNS = {
    "d": "DATE",
    "dt0": "DATETIME",
    "dt6": "DATETIME(6)",
    "dt3": "DATETIME(3)",
    "b4": "BINARY(4)",
}
# (id, d, dt0, dt6, dt3, b4): zero and partial-zero dates, real ones, NULL, trailing zeros.
ROWS: list[tuple[Any, ...]] = [
    (1, "2024-00-15", "2024-03-00 10:11:12", "2024-00-00 23:59:59.999999", "0000-01-01 00:00:00.5", b"a\x00\x00\x00"),
    (2, "0000-00-00", "0000-00-00 00:00:00", "2024-12-00 00:00:00.000001", "2024-02-31 01:02:03.004", b"\x00\x00\x00\x00"),
    (3, "2024-03-31", "9999-12-31 23:59:59", "1000-01-01 00:00:00.000000", "2024-00-31 12:00:00.100", b"ab\x00c"),
    (4, "0000-12-31", "2024-01-00 00:00:00", None, "1970-01-01 00:00:00.000", b"abcd"),
    (5, None, None, "2024-07-04 05:06:07.080900", None, None),
]  # fmt: skip
MYSQL_TEXT = {
    "d": "CAST(d AS CHAR)",
    "dt0": "CAST(dt0 AS CHAR)",
    "dt6": "CAST(dt6 AS CHAR)",
    "dt3": "CAST(dt3 AS CHAR)",
    "b4": "HEX(b4)",
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("cdc-mirror-zero-dates-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    yield spark
    spark.stop()


def _mysql_rows(cursor: Any, db: str) -> dict[int, dict[str, str | None]]:
    columns = ", ".join(f"{sql} AS {name}" for name, sql in MYSQL_TEXT.items())
    cursor.execute(f"SELECT id, {columns} FROM {db}.t ORDER BY id")
    return {row[0]: dict(zip(MYSQL_TEXT, row[1:], strict=True)) for row in cursor.fetchall()}


def _raw_rows(messages: list[tuple[str, dict[str, Any], dict[str, str]]]) -> list[tuple]:
    return [
        (n + 1, "INSERT", "zd", "t", json.dumps(content), None, json.dumps(types))
        for n, (_source, content, types) in enumerate(messages)
    ]


def _snapshot_text(
    session: Any, tmp: Path, plan: Any, messages: list[tuple[str, dict[str, Any], dict[str, str]]]
) -> dict[int, dict[str, str | None]]:
    raw = session.createDataFrame(
        _raw_rows(messages),
        "binlogOffset BIGINT, eventType STRING, schemaName STRING, tableName STRING, "
        "content STRING, beforeContent STRING, columnTypes STRING",
    )
    flat = flatten(raw, plan).drop(OFFSET_COLUMN, EVENT_COLUMN)
    target = tmp / f"snapshot-{uuid.uuid4().hex[:6]}"
    flat.write.parquet(str(target))
    written = session.read.parquet(str(target))
    assert dict(written.dtypes)["d"] == "date" and dict(written.dtypes)["dt6"] == "timestamp"
    fsp = {"d": 0, "dt0": 0, "dt6": 6, "dt3": 3}
    texts = written.selectExpr(
        "id", *(f"CAST(`{c}` AS STRING) AS `{c}`" for c in fsp), "HEX(b4) AS b4"
    ).collect()
    result = {}
    for row in texts:
        values: dict[str, str | None] = {
            c: None if row[c] is None else snapshot_date_text(row[c], fsp[c]) for c in fsp
        }
        values["b4"] = row["b4"]
        result[int(row["id"])] = values
    return result


def _replayed(local_stack: Settings, db: str, live: dict[str, str]) -> list[tuple]:
    """The replay's path: SELECT, then the contract's encoder."""
    instance = local_stack.instances[0]
    with (
        pymysql.connect(
            host=instance.host,
            port=instance.port,
            user=local_stack.stack.admin_user,
            password=local_stack.stack.admin_password.get_secret_value(),
            cursorclass=pymysql.cursors.DictCursor,
        ) as reader,
        reader.cursor() as select,
    ):
        select.execute(f"SELECT * FROM {db}.t ORDER BY id")
        return [
            (
                "replay",
                {
                    name: encode(parse_column_type(live[name]), value, name)
                    for name, value in row.items()
                },
                live,
            )
            for row in select.fetchall()
        ]


def test_partial_zero_dates_and_binary_trailing_zeros_reach_the_snapshot_exactly(
    local_stack: Settings, session: Any, tmp_path: Path
) -> None:
    db = f"zd{uuid.uuid4().hex[:8]}"
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {db}")
        try:
            cursor.execute(
                f"CREATE TABLE {db}.t (id INT PRIMARY KEY, "
                + ", ".join(f"{name} {kind} NULL" for name, kind in COLUMNS.items())
                + ")"
            )
            start = server_position(cursor)
            # Permissive: zero and partial-zero dates are accepted as written.
            cursor.execute("SET SESSION sql_mode = ''")
            for row in ROWS:
                cursor.execute(f"INSERT INTO {db}.t VALUES (%s, %s, %s, %s, %s, %s)", row)
            stop = server_position(cursor)
            mysql = _mysql_rows(cursor, db)
            cursor.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION",
                (db,),
            )
            live = {name: kind for name, kind in cursor.fetchall()}
            replayed = _replayed(local_stack, db, live)
            # The collector's path: the binlog decoded as the collector decodes it.
            collected = [
                ("collector", m.content, m.column_types)
                for m in read_range(
                    local_stack.instances[0], start.gtid, stop, OffsetGenerator(), [db]
                )
            ]
        finally:
            cursor.execute(f"DROP DATABASE {db}")
    assert len(collected) == len(ROWS) == len(replayed)

    def canonical(messages: list[tuple]) -> list[str]:
        return sorted(json.dumps(content, sort_keys=True) for _, content, _ in messages)

    assert canonical(collected) == canonical(replayed)  # collector = replay on the wire
    # Trailing zero bytes are on the wire, and partial-zero dates travel as MySQL's text.
    wire = {content["id"]: content for _, content, _ in collected}
    assert wire[1]["d"] == "2024-00-15" and wire[2]["d"] == "0000-00-00"
    assert wire[2]["b4"] == "AAAAAA=="  # four zero bytes

    plan = plan_schema("zd_t", None, live, ["id"])
    assert dict(plan.columns)["d"] == "date" and dict(plan.columns)["dt0"] == "timestamp"
    for messages in (collected, replayed):
        snapshot = _snapshot_text(session, tmp_path, plan, messages)
        assert snapshot == mysql, (messages[0][0], snapshot, mysql)
