"""Helpers of the merge tests: sharded MariaDB tables changed by a workload that also records
the SimpleBinlog message of every change, the raw change layer written from those messages in
the stream writer's layout (its Iceberg table and columns, its committed progress naming ready days),
and a comparison of a snapshot with MySQL.

Each message's row images are read back from MariaDB right after (or before) the statement
and encoded with the contract's own encoder (``simple_binlog.values.encode``), so the lake holds
exactly what the collector would publish. Offsets follow the contract: BINLOG offsets are
``second × 10^6 + seq`` in execution order; MOCK rows (the history read) carry (read time −
5 minutes) with seq 0, so later BINLOG changes win.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pymysql
import yaml

from cdc_platform.config import (
    MergeSettings,
    Settings,
    TableMirror,
)
from simple_binlog.values import encode, parse_column_type

SHARDS = 3
TABLE_DDL = """
CREATE TABLE `{schema}`.`{table}` (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  order_no VARCHAR(32) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  qty INT UNSIGNED NOT NULL,
  big BIGINT UNSIGNED NULL,
  status ENUM('NEW','PAID','SHIPPED') NOT NULL,
  note VARCHAR(64) NULL,
  created_at DATETIME(6) NOT NULL,
  payload VARBINARY(16) NULL,
  UNIQUE KEY (order_no)
)"""
# The snapshot and MySQL compared column by column, as text (exact for every type used).
SNAPSHOT_TEXT = {
    "order_no": "order_no",
    "amount": "cast(amount as string)",
    "qty": "cast(qty as string)",
    "big": "cast(big as string)",
    "status": "status",
    "note": "note",
    "created_at": "date_format(created_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS')",
    "payload": "base64(payload)",
    "id": "cast(id as string)",
}
MYSQL_TEXT = {
    "order_no": "order_no",
    "amount": "CAST(amount AS CHAR)",
    "qty": "CAST(qty AS CHAR)",
    "big": "CAST(big AS CHAR)",
    "status": "status",
    "note": "note",
    "created_at": "DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s.%f')",
    "payload": "TO_BASE64(payload)",
    "id": "CAST(id AS CHAR)",
}


def day_start(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


@dataclass
class Shop:
    """One test's sharded table ``<prefix>_00..02.orders_00..02`` and its change messages."""

    settings: Settings
    prefix: str
    lake: Path
    raw_database: str
    writer: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    spark_session: Any = None  # the tests' Spark session (readiness is committed through it)
    days: set[str] = field(default_factory=set)
    ready: set[str] = field(default_factory=set)
    late: dict[str, dict[str, int]] = field(default_factory=dict)
    watermark_ms: int | None = None  # the writer's global watermark committed by mark_ready
    _second: int = 0
    _seq: int = 0
    _serial: int = 0
    _batch: int = 0

    @property
    def table(self) -> str:
        return f"{self.prefix}_orders"

    def shards(self) -> list[tuple[str, str]]:
        return [(f"{self.prefix}_{n:02d}", f"orders_{n:02d}") for n in range(SHARDS)]

    def mirror(self, **overrides: Any) -> TableMirror:
        fields: dict[str, Any] = {
            "db_prefix": self.prefix,
            "table_prefix": "orders",
            "key": ["order_no"],
            "check_column": "created_at",
            "targets": ["hive"],
        }
        fields.update(overrides)
        return TableMirror(**fields)

    def merge_settings(self, mirrors: list[TableMirror] | None = None, **merge: Any) -> Settings:
        return self.settings.model_copy(
            update={
                "spark": self.settings.spark.model_copy(update={"lake_dir": self.lake}),
                "stream_writer": self.settings.stream_writer.model_copy(
                    update={"database": self.raw_database, "name": self.writer}
                ),
                "merge": MergeSettings(database=f"{self.raw_database}_snap", **merge),
                "mirror": self.settings.mirror.model_copy(
                    update={"warehouse_schema": f"{self.raw_database}_pg"}
                ),
                "tables": mirrors or [self.mirror()],
            }
        )

    # -- MySQL ------------------------------------------------------------------------------
    @contextmanager
    def connect(self) -> Iterator[Any]:
        instance = self.settings.instances[0]
        connection = pymysql.connect(
            host=instance.host,
            port=instance.port,
            user=self.settings.stack.admin_user,
            password=self.settings.stack.admin_password.get_secret_value(),
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
        )
        try:
            with connection.cursor(pymysql.cursors.DictCursor) as cursor:
                yield cursor
        finally:
            connection.close()

    def on_every_shard(self, statement: str) -> None:
        """Run ``statement`` (``{schema}`` and ``{table}`` filled in) on each shard's table."""
        with self.connect() as cursor:
            for schema, table in self.shards():
                cursor.execute(statement.format(schema=schema, table=table))

    def create(self, ddl: str = TABLE_DDL) -> None:
        with self.connect() as cursor:
            for schema, table in self.shards():
                cursor.execute(f"CREATE DATABASE `{schema}`")
                cursor.execute(ddl.format(schema=schema, table=table))

    def drop(self) -> None:
        with self.connect() as cursor:
            for schema, _ in self.shards():
                cursor.execute(f"DROP DATABASE IF EXISTS `{schema}`")

    def column_types(self, cursor: Any, schema: str, table: str) -> dict[str, str]:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        return {row["COLUMN_NAME"]: row["COLUMN_TYPE"] for row in cursor.fetchall()}

    def _image(self, cursor: Any, schema: str, table: str, order_no: str) -> dict[str, Any] | None:
        cursor.execute(f"SELECT * FROM `{schema}`.`{table}` WHERE order_no = %s", (order_no,))
        row = cursor.fetchone()
        if row is None:
            return None
        types = self.column_types(cursor, schema, table)
        return {name: encode(parse_column_type(types[name]), row[name], name) for name in types}

    # -- messages ---------------------------------------------------------------------------
    def start_day(self, day: date) -> None:
        self._second = day_start(day) + 3600
        self._seq = 0

    def _next_offset(self) -> tuple[int, int]:
        self._seq += 1
        if self._seq > 5:  # a few rows per second, then the clock moves on
            self._second += self.rng.randint(1, 30)
            self._seq = 1
        return self._second * 1_000_000 + self._seq, self._second * 1000

    def _record(
        self,
        cursor: Any,
        event: str,
        schema: str,
        table: str,
        content: dict[str, Any],
        before: dict[str, Any] | None,
        source: str = "BINLOG",
        offset: tuple[int, int] | None = None,
    ) -> None:
        binlog_offset, execute_ms = offset or self._next_offset()
        self.messages.append(
            {
                "binlogOffset": binlog_offset,
                "executeTime": execute_ms,
                "eventType": event,
                "schemaName": schema,
                "tableName": table,
                "source": source,
                "version": 1,
                "primaryKeys": ["id"],
                "columnTypes": json.dumps(self.column_types(cursor, schema, table)),
                "content": json.dumps(content),
                "beforeContent": None if before is None else json.dumps(before),
            }
        )

    def new_order_no(self) -> str:
        self._serial += 1
        return f"o{self._serial:06d}"

    def insert(self, shard: int, created: datetime, order_no: str | None = None) -> str:
        schema, table = self.shards()[shard]
        order_no = order_no or self.new_order_no()
        with self.connect() as cursor:
            cursor.execute(
                f"INSERT INTO `{schema}`.`{table}` (order_no, amount, qty, big, status, note, "
                "created_at, payload) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    order_no,
                    f"{self.rng.randint(0, 99999)}.{self.rng.randint(0, 99):02d}",
                    self.rng.randint(0, 4_294_967_295),
                    self.rng.choice(
                        [None, 18_446_744_073_709_551_615, self.rng.randint(0, 10**12)]
                    ),
                    self.rng.choice(["NEW", "PAID"]),
                    self.rng.choice([None, "", "gift", "ünïcode ✓"]),
                    created,
                    self.rng.choice([None, b"", bytes(self.rng.randrange(256) for _ in range(5))]),
                ),
            )
            image = self._image(cursor, schema, table, order_no)
            assert image is not None
            self._record(cursor, "INSERT", schema, table, image, None)
        return order_no

    def update(self, shard: int, order_no: str, new_order_no: str | None = None) -> str:
        schema, table = self.shards()[shard]
        with self.connect() as cursor:
            before = self._image(cursor, schema, table, order_no)
            assert before is not None, order_no
            cursor.execute(
                f"UPDATE `{schema}`.`{table}` SET amount = amount + 1, status = %s, note = %s, "
                "order_no = %s WHERE order_no = %s",
                (
                    self.rng.choice(["PAID", "SHIPPED"]),
                    f"upd {self.rng.randint(0, 999)}",
                    new_order_no or order_no,
                    order_no,
                ),
            )
            after = self._image(cursor, schema, table, new_order_no or order_no)
            assert after is not None
            self._record(cursor, "UPDATE", schema, table, after, before)
        return new_order_no or order_no

    def delete(self, shard: int, order_no: str) -> None:
        schema, table = self.shards()[shard]
        with self.connect() as cursor:
            before = self._image(cursor, schema, table, order_no)
            assert before is not None, order_no
            cursor.execute(f"DELETE FROM `{schema}`.`{table}` WHERE order_no = %s", (order_no,))
            self._record(cursor, "DELETE", schema, table, before, None)

    def mock_replay(self, read_second: int) -> None:
        """Every current row as a MOCK INSERT, offset (read time − 5 min) with seq 0."""
        offset = ((read_second - 300) * 1_000_000, read_second * 1000)
        with self.connect() as cursor:
            for schema, table in self.shards():
                cursor.execute(f"SELECT order_no FROM `{schema}`.`{table}`")
                for row in cursor.fetchall():
                    image = self._image(cursor, schema, table, row["order_no"])
                    assert image is not None
                    self._record(cursor, "INSERT", schema, table, image, None, "MOCK", offset)

    # -- the lake ---------------------------------------------------------------------------
    def lake_catalog(self, spark: Any) -> Any:
        from cdc_platform.iceberg import LakeCatalog

        return LakeCatalog.open(spark, self.merge_settings(), check=False)

    def write_raw(self, spark: Any, day: date, ready: bool = True) -> None:
        """The recorded messages as rows of ``dt=day`` of this shop's table in the raw Iceberg
        table (the stream writer's one table of every logical table), one commit."""
        from cdc_platform.lake import ROW_COLUMNS, ensure_raw_table
        from tests.support.raw_layer import append_raw

        names = [name for name, _ in ROW_COLUMNS]
        rows = []
        for n, message in enumerate(self.messages):
            row = {
                **message,
                "position": None,
                "kafkaTopic": "cdc.test.merge",
                "kafkaPartition": 0,
                "kafkaOffset": n,
                "kafkaTimestamp": datetime.fromtimestamp(message["executeTime"] / 1000, UTC),
            }
            rows.append((*(row[name] for name in names), str(day)))
        columns = [*ROW_COLUMNS, ("dt", "STRING")]
        lake = self.lake_catalog(spark)
        ensure_raw_table(lake, self.raw_database)
        if rows:
            ddl = ", ".join(f"`{name}` {kind}" for name, kind in columns)
            append_raw(lake, self.raw_database, self.table, spark.createDataFrame(rows, schema=ddl))
        self.messages.clear()
        self.days.add(str(day))
        if ready:
            self.mark_ready(day)

    def mark_ready(self, day: date | None, late_rows: dict[str, int] | None = None) -> None:
        """The stream writer's committed progress, naming ``day`` ready (with ``late_rows``
        of this shop's table counted for it; None: no new ready day), and its global
        watermark at ``self.watermark_ms`` (hourly snapshots)."""
        from cdc_platform.iceberg import KafkaOffsets
        from cdc_platform.lake import WriterProgress, commit_writer_progress, ensure_progress_table

        if day is not None:
            self.ready.add(str(day))
        if late_rows is not None and day is not None:
            self.late.setdefault(str(day), {}).update(late_rows)
        lake = self.lake_catalog(self.spark_session)
        ensure_progress_table(lake, self.raw_database)
        self._batch += 1
        progress = WriterProgress(
            writer=self.writer,
            batch_id=self._batch,
            committed_ms=int(datetime.now(UTC).timestamp() * 1000) + self._batch,
            state={
                "readyDays": sorted(self.ready),
                "tableDays": {self.table: sorted(self.days)},
                "lateRows": self.late,
                "globalWatermarkMs": self.watermark_ms,
            },
        )
        offsets = KafkaOffsets({("cdc.test.merge", 0): self._batch})
        commit_writer_progress(lake, self.raw_database, progress, offsets)

    def write_config(self, path: Path, extra: dict[str, Any] | None = None, **table: Any) -> Path:
        """A config file for ``cdc-mirror`` commands run in another process on this shop
        (``extra``: further sections; ``table``: further settings of its table mirror)."""
        settings = self.merge_settings(check=False)
        document = {
            "spark": {"lake_dir": str(settings.lake_dir)},
            # The lake's S3 settings are the stack's defaults (SeaweedFS) in these tests.
            "lake": {
                "location": settings.lake.location or str(settings.lake_dir),
                "catalog": settings.lake.catalog,
            },
            "stream_writer": {"database": self.raw_database, "name": self.writer},
            "merge": {"database": settings.merge.database, "check": False},
            "mirror": {"warehouse_schema": settings.mirror.warehouse_schema},
            "stack": {"home": str(settings.stack.home.resolve())},
            "tables": [
                {
                    "db_prefix": self.prefix,
                    "table_prefix": "orders",
                    "key": ["order_no"],
                    "check_column": "created_at",
                    "targets": ["hive"],
                    **table,
                }
            ],
            **(extra or {}),
        }
        path.write_text(yaml.safe_dump(document))
        return path

    # -- comparison -------------------------------------------------------------------------
    def mysql_rows(self) -> dict[str, dict[str, str | None]]:
        select = ", ".join(f"{expr} AS `{name}`" for name, expr in MYSQL_TEXT.items())
        rows: dict[str, dict[str, str | None]] = {}
        with self.connect() as cursor:
            for schema, table in self.shards():
                cursor.execute(f"SELECT {select} FROM `{schema}`.`{table}`")
                for row in cursor.fetchall():
                    rows[row["order_no"]] = {**row, "_shard": f"{schema}.{table}"}
        return rows


def snapshot_rows(
    spark: Any, settings: Settings, table: str, day: date
) -> dict[str, dict[str, Any]]:
    """The snapshot of ``day`` as merge's readers get it (``snapshot_as_of``: its tag)."""
    from cdc_platform.lake_snapshots import snapshot_as_of

    columns = [f"{expr} AS `{name}`" for name, expr in SNAPSHOT_TEXT.items()]
    found = snapshot_as_of(spark, settings, table, day).selectExpr(*columns, "_shard").collect()
    rows = {row["order_no"]: row.asDict() for row in found}
    assert len(rows) == len(found), "a key appears twice in the snapshot"
    return rows


def unique_prefix() -> str:
    return f"mg{uuid.uuid4().hex[:6]}"


def history_times(day: date, rng: random.Random, old: bool = False) -> datetime:
    """A creation time within the check window of ``day`` (or 60 days before it)."""
    back = timedelta(
        days=60 if old else rng.randint(1, 5),
        seconds=rng.randint(0, 86_399),
        microseconds=rng.randint(0, 999_999),
    )
    return datetime(day.year, day.month, day.day) - back
