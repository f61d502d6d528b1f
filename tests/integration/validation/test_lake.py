"""Validation of the lake against MySQL, on real Spark and Iceberg tables on local disk (one
Spark session for the module): the Spark encoding hashes like Python (and so like MySQL and
PostgreSQL) on edge values of every type; the snapshot of a day equals MySQL as of that
day's cut although MySQL changed since, and a key missing from it is found with its key; the
lake's current state (the newest day and the raw changes since) equals MySQL now, and an
extra row in it is found with its key.

The snapshot and the raw tables are written here with merge's type map
(``merge.types.snapshot_value``) and the raw layer's columns (``cdc_platform.lake``), as merge
and the stream writer write them; the test plays their part, as the validation harness plays
the collector's."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import struct
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pymysql
import pytest

from cdc_platform.config import Settings, TableMirror
from cdc_platform.iceberg import KafkaOffsets, LakeCatalog, lake_session
from cdc_platform.lake import (
    PROGRESS_TABLE,
    RAW_TABLE,
    ROW_COLUMNS,
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
    raw_table_condition,
)
from cdc_platform.lake_snapshots import day_tag, snapshot_table
from merge.types import hive_type, snapshot_value
from simple_binlog.type_table import REPRESENTATIVE_TYPES
from simple_binlog.values import encode, parse_column_type
from tests.integration.mariadb_admin import utc_admin_connection as _mysql
from tests.integration.validation.test_canonical_engines import SAMPLES, _plain
from tests.support.raw_layer import append_raw
from validation.lake import LakeWatermark, writer_name
from validation.plan import Difference
from validation.run import Options, describe, validate_table
from validation.spark_canonical import SPARK, register_functions

DAY = dt.date(2026, 11, 24)
COLUMNS = (
    ("id", "bigint unsigned"),
    ("amount", "decimal(12,2)"),
    ("note", "varchar(64)"),
    ("created", "datetime(3)"),
    ("tag", "binary(4)"),
    ("ratio", "double"),
    ("doc", "json"),
)
ROWS = 30
BASE = 18_446_744_073_709_000_000


class Applied:
    """A watermark of a scene that does not change while it is validated."""

    def mark(self) -> object:
        return None

    def wait(self, mark: object) -> None:
        return None


@pytest.fixture(scope="module")
def lake(local_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tag = uuid.uuid4().hex[:6]
    root = tmp_path_factory.mktemp("vlake")
    settings = local_stack.model_copy(
        update={
            "spark": local_stack.spark.model_copy(update={"lake_dir": root / "hive"}),
            "lake": local_stack.lake.model_copy(update={"location": str(root / "lake")}),
            "stream_writer": local_stack.stream_writer.model_copy(
                update={"database": f"vr{tag}", "name": f"vw{tag}"}
            ),
            "merge": local_stack.merge.model_copy(update={"database": f"vs{tag}"}),
            "tables": [TableMirror(db_prefix=f"vl{tag}", table_prefix="orders")],
        }
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the JSON UDF's workers
    spark = lake_session(settings, "cdc-validate-lake-tests", {"spark.sql.shuffle.partitions": "2"})
    catalog = LakeCatalog.open(spark, settings, check=False)
    for database in (settings.stream_writer.database, settings.merge.database):
        catalog.create_namespace(database)
    yield settings, spark, catalog
    for database in (settings.stream_writer.database, settings.merge.database):
        catalog.drop_namespace(database)
    spark.stop()


# -- the encoding -----------------------------------------------------------------------------


def _wires(settings: Settings) -> dict[str, list[Any]]:
    """Per representative type, the wire values of its samples as MySQL stores them."""
    name = f"vc{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(
        host="127.0.0.1",
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
        init_command="SET time_zone = '+00:00'",
    )
    found: dict[str, list[Any]] = {}
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
            for index, spec in enumerate(REPRESENTATIVE_TYPES):
                column = parse_column_type(spec)
                cursor.execute(f"CREATE TABLE {name}.t{index} (id INT PRIMARY KEY, v {spec} NULL)")
                literals = SAMPLES[_plain(spec)]
                values = ", ".join(f"({i}, {lit})" for i, lit in enumerate(literals))
                cursor.execute(f"INSERT INTO {name}.t{index} VALUES {values}")
                cursor.execute(f"SELECT v FROM {name}.t{index} ORDER BY id")
                found[spec] = [encode(column, row[0]) for row in cursor.fetchall()]
            cursor.execute(f"DROP DATABASE {name}")
    finally:
        conn.close()
    return found


def _text(wire: Any) -> str | None:
    """A wire value as merge reads it from the JSON (strings unquoted)."""
    if wire is None or isinstance(wire, str):
        return wire
    return json.dumps(wire)


def test_spark_hashes_every_type_like_python(lake: Any, local_stack: Settings) -> None:
    from pyspark.sql import functions as F

    from validation.canonical import python_piece, python_row_hash

    _, spark, _ = lake
    register_functions(spark)
    wires = _wires(local_stack)
    rng = random.Random(25)
    extra: dict[str, list[Any]] = {
        # Random doubles and floats (Java's own float texts are not always the shortest).
        "double": [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(300)]
        + [rng.uniform(-1e6, 1e6) for _ in range(300)]
        + [2e23, 5e-324, 1e23, 8.41e21, 2.82879384806159e17, 1.0e-5, 9007199254740993.0]
        # Around canonical.double_piece's exact range [2^-10, 2^53), and within it.
        + [2.0**-10, -(2.0**-10), math.nextafter(2.0**-10, 0), 2.0**53 - 1, 2.0**53, -0.5]
        + [-4503599627370495.5, -0.0]
        + [rng.uniform(-1, 1) * 2.0 ** rng.randint(-12, 55) for _ in range(300)],
        "float": [
            struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0] for _ in range(200)
        ]
        + [1.0e-5, 1.401298464324817e-45, 3.4e38],
        # Zero-part dates (merge keeps them as years after 99999).
        "date": ["0000-00-00", "2024-00-15", "2024-03-00"],
        "datetime(6)": ["0000-00-00 00:00:00.000000", "2024-03-00 10:11:12.000001"],
    }
    extra = {
        spec: [w for w in values if w == w and abs(w) != float("inf")]
        if spec in ("double", "float")
        else values
        for spec, values in extra.items()
    }
    samples = {
        spec: [*wires[spec], *extra.get(_plain(spec), []), None] for spec in REPRESENTATIVE_TYPES
    }
    length = max(len(v) for v in samples.values())
    specs = list(samples)
    rows = [
        (i, *[_text(samples[s][i]) if i < len(samples[s]) else None for s in specs])
        for i in range(length)
    ]
    frame = spark.createDataFrame(
        rows, ", ".join(["id INT", *[f"t{n} STRING" for n in range(len(specs))]])
    )
    typed = frame.select(
        "id",
        *[
            snapshot_value(F.col(f"t{n}"), hive_type(spec)).alias(f"v{n}")
            for n, spec in enumerate(specs)
        ],
    )
    shard = SPARK.shard_piece("d.t")
    select = ["id"]
    for n, spec in enumerate(specs):
        piece = SPARK.piece(f"v{n}", parse_column_type(spec))
        select += [f"{piece} AS p{n}", f"{SPARK.row_hash(shard, [piece])} AS h{n}"]
    computed = {row["id"]: row for row in typed.selectExpr(*select).collect()}
    mismatches = []
    compared = 0
    for n, spec in enumerate(specs):
        column = parse_column_type(spec)
        for i, wire in enumerate(samples[spec]):
            compared += 1
            expected = (python_piece(column, wire), python_row_hash("d.t", [column], [wire]))
            got = (computed[i][f"p{n}"], computed[i][f"h{n}"])
            if got != expected:
                mismatches.append((spec, wire, got[0], expected[0]))
    assert compared > 900
    assert mismatches == []


# -- the snapshot of a day and the lake's current state -------------------------------------


def _wire_row(values: tuple[Any, ...]) -> dict[str, Any]:
    return {
        name: encode(parse_column_type(spec), value)
        for (name, spec), value in zip(COLUMNS, values, strict=True)
    }


class Scene:
    """The MySQL table (one shard), its snapshot of ``DAY`` and its raw changes after it."""

    def __init__(self, settings: Settings, spark: Any, catalog: LakeCatalog) -> None:
        self.settings, self.spark, self.catalog = settings, spark, catalog
        mirror = settings.tables[0]
        self.table = mirror.name
        self.db, self.shard = f"{mirror.db_prefix}_00", "orders_00"
        self.conn = _mysql(settings)
        self.offset = 1_000_000
        self.raw: list[tuple[Any, ...]] = []
        with self.conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {self.db}")
            cur.execute(
                f"CREATE TABLE {self.db}.{self.shard} ("
                + ", ".join(
                    f"{n} {s}{' PRIMARY KEY' if n == 'id' else ' NULL'}" for n, s in COLUMNS
                )
                + ")"
            )
            rows = [
                f"({BASE + i}, {i}.5, {'NULL' if i % 7 == 0 else repr('n' * (i % 3))}, "
                f"'2024-01-05 10:11:12.{i:03d}', x'{i:08x}', {i % 9}e{i % 30 - 15}, "
                f'\'{{"b": {i % 4}, "a": [1.5, "x"]}}\')'
                for i in range(1, ROWS + 1)
            ]
            cur.execute(f"INSERT INTO {self.db}.{self.shard} VALUES {', '.join(rows)}")

    def close(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {self.db}")
        self.conn.close()

    def rows(self) -> dict[int, dict[str, Any]]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(n for n, _ in COLUMNS)} FROM {self.db}.{self.shard}")
            return {int(r[0]): _wire_row(r) for r in cur.fetchall()}

    def write_snapshot(self, rows: dict[int, dict[str, Any]], tag: bool = True) -> None:
        """The snapshot table's main state (merge's types), tagged as ``DAY``'s."""
        from pyspark.sql import functions as F

        name = snapshot_table(self.settings, self.table)
        columns = ", ".join(f"`{n}` {hive_type(s)}" for n, s in COLUMNS)
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {name} ({columns}, `_binlog_offset` BIGINT, "
            "`_shard` STRING) USING iceberg TBLPROPERTIES ('format-version' = '2')"
        )
        content = [(orjson.dumps(row).decode(),) for row in rows.values()]
        frame = self.spark.createDataFrame(content, "content STRING").select(
            *[
                snapshot_value(F.get_json_object("content", f"$.{n}"), hive_type(s)).alias(n)
                for n, s in COLUMNS
            ],
            F.lit(500).cast("bigint").alias("_binlog_offset"),
            F.lit(f"{self.db}.{self.shard}").alias("_shard"),
        )
        frame.writeTo(name).overwritePartitions()
        if tag:
            self.spark.sql(f"ALTER TABLE {name} CREATE OR REPLACE TAG `{day_tag(DAY)}`")

    def change(self, sql: str, event: str, key: int) -> None:
        """A change after the cut: made in MySQL and written to the raw layer (``DAY`` + 1)."""
        before = self.rows().get(key)
        with self.conn.cursor() as cur:
            cur.execute(sql.format(t=f"{self.db}.{self.shard}"))
        after = self.rows().get(key)
        content = after if event != "DELETE" else before
        self.offset += 1
        self.raw.append(
            (
                self.offset,
                0,
                event,
                self.db,
                self.shard,
                "BINLOG",
                1,
                ["id"],
                "{}",
                orjson.dumps(content).decode(),
                orjson.dumps(before).decode() if event == "UPDATE" else None,
                None,
                "t",
                0,
                self.offset,
                None,
                (DAY + dt.timedelta(days=1)).isoformat(),
            )
        )

    def write_raw(self) -> None:
        database = self.settings.stream_writer.database
        ddl = ", ".join(f"`{n}` {k}" for n, k in (*ROW_COLUMNS, ("dt", "STRING")))
        frame = self.spark.createDataFrame(self.raw, ddl)
        offsets = KafkaOffsets({("t", 0): self.offset})
        append_raw(self.catalog, database, self.table, frame, offsets)


@pytest.fixture()
def scene(lake: Any) -> Iterator[Scene]:
    settings, spark, catalog = lake
    made = Scene(settings, spark, catalog)
    yield made
    made.close()
    spark.sql(f"DROP TABLE IF EXISTS {snapshot_table(settings, made.table)}")
    if RAW_TABLE in catalog.table_names(settings.stream_writer.database):
        raw = catalog.name(settings.stream_writer.database, RAW_TABLE)
        spark.sql(f"DELETE FROM {raw} WHERE {raw_table_condition(made.table)}")


@pytest.mark.timeout(600)
def test_the_snapshot_of_a_day_is_compared_with_mysql_as_of_its_cut(scene: Scene) -> None:
    settings, table = scene.settings, scene.table
    at_cut = scene.rows()
    missing = BASE + 7
    scene.write_snapshot({k: r for k, r in at_cut.items() if k != missing})
    # MySQL moves on after the cut: an update, a delete, an insert, all in the raw layer.
    scene.change("UPDATE {t} SET note = 'later' WHERE id = " + str(BASE + 3), "UPDATE", BASE + 3)
    scene.change("DELETE FROM {t} WHERE id = " + str(BASE + 4), "DELETE", BASE + 4)
    scene.change(
        "INSERT INTO {t} (id, amount, created) VALUES (" + str(BASE + 99) + ", 1, '2024-01-01')",
        "INSERT",
        BASE + 99,
    )
    scene.write_raw()
    options = Options(chunk_rows=8, leaf_rows=4, chunk_time_s=None, snapshot_day=DAY)
    result = validate_table(
        settings,
        table,
        ["snapshot", "lake"],
        options,
        watermarks={"snapshot": Applied(), "lake": Applied()},
    )
    assert not result.unreachable, result.unreachable
    snapshot, current = result.reports
    # Only the key missing from the snapshot, although MySQL changed three keys since.
    assert [(r.key, r.difference) for r in snapshot.differences] == [
        ((missing,), Difference.MISSING)
    ], describe(snapshot)
    assert snapshot.differences[0].source is not None
    # The lake's current state (the snapshot + the raw changes since) lacks the same key.
    assert [(r.key, r.difference) for r in current.differences] == [
        ((missing,), Difference.MISSING)
    ], describe(current)


@pytest.mark.timeout(600)
def test_the_lake_current_state_equals_mysql_and_an_extra_row_is_found(scene: Scene) -> None:
    settings, table = scene.settings, scene.table
    rows = scene.rows()
    scene.write_snapshot(rows)
    scene.change("UPDATE {t} SET amount = 77.25 WHERE id = " + str(BASE + 11), "UPDATE", BASE + 11)
    scene.change("DELETE FROM {t} WHERE id = " + str(BASE + 12), "DELETE", BASE + 12)
    scene.write_raw()
    options = Options(chunk_rows=8, leaf_rows=4, chunk_time_s=None)
    equal = validate_table(settings, table, ["lake"], options, watermarks={"lake": Applied()})
    assert equal.equal, "\n".join(describe(equal.reports[0]))
    assert equal.reports[0].rows == ROWS - 1

    extra = BASE + 5000
    scene.write_snapshot({**rows, extra: {**rows[BASE + 1], "id": str(extra)}}, tag=False)
    found = validate_table(settings, table, ["lake"], options, watermarks={"lake": Applied()})
    [report] = found.reports
    assert [(r.key, r.difference) for r in report.differences] == [((extra,), Difference.EXTRA)], (
        describe(report)
    )
    assert report.differences[0].target is not None


def test_the_lakes_applied_position_is_the_stream_writers_committed_progress(lake: Any) -> None:
    settings, spark, catalog = lake
    database = settings.stream_writer.database
    ensure_progress_table(catalog, database)
    writer = writer_name(settings)
    watermark = LakeWatermark(settings.kafka, "vt-topic", catalog, database, writer, timeout_s=1)
    offsets = {("vt-topic", 0): 42, ("vt-topic", 1): 7, ("other", 0): 9}
    # As the stream writer's state holds them (``WriterState.to_json``).
    partitions = [{"topic": t, "partition": p, "nextOffset": o} for (t, p), o in offsets.items()]
    try:
        assert watermark.committed([0, 1]) == {}
        commit_writer_progress(
            catalog,
            database,
            WriterProgress(writer, 1, 1, {"partitions": partitions}),
            KafkaOffsets(offsets),
        )
        assert watermark.committed([0, 1]) == {0: 42, 1: 7}
        watermark.wait({0: 42, 1: 7})  # reached
        with pytest.raises(Exception, match="did not catch up"):
            watermark.wait({0: 43})

        # The writer goes quiet while another commits; maintenance expires every snapshot
        # but the newest: the writer's commit is gone, its row is not.
        for batch in range(3):
            other = WriterProgress("another-writer", batch, batch, {})
            commit_writer_progress(catalog, database, other, KafkaOffsets({("other", 0): batch}))
        spark.sql(
            f"CALL {catalog.catalog}.system.expire_snapshots(table => "
            f"'{database}.{PROGRESS_TABLE}', older_than => TIMESTAMP '2999-01-01 00:00:00', "
            "retain_last => 1)"
        )
        assert catalog.committed_offsets(database, PROGRESS_TABLE, writer) is None
        assert watermark.committed([0, 1]) == {0: 42, 1: 7}
    finally:
        watermark.close()
        spark.sql(f"DROP TABLE IF EXISTS {catalog.name(database, PROGRESS_TABLE)}")
