"""The lake: the raw change layer's tables and where its readiness records live.

The Hive side: one external table per logical table, partitioned by ``dt`` (strings).

Tables are Hive Parquet tables (``STORED AS PARQUET``) at
``<lake>/<database>.db/<logical table>``, so Spark and Hive read them alike. Partitions are
added with ``ALTER TABLE … ADD IF NOT EXISTS PARTITION``, which makes every call repeatable.
Spark and Hive skip files and directories whose names start with ``_`` or ``.`` (``_SUCCESS``
and the like), and the writer's staging area is outside the table directories anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEAD_LETTER_TABLE = "dead_letter"
# The columns of every logical table's files and Hive table (``dt`` is the partition).
ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("binlogOffset", "BIGINT"),
    ("executeTime", "BIGINT"),
    ("eventType", "STRING"),
    ("schemaName", "STRING"),
    ("tableName", "STRING"),
    ("source", "STRING"),
    ("version", "BIGINT"),
    ("primaryKeys", "ARRAY<STRING>"),
    ("columnTypes", "STRING"),
    ("content", "STRING"),
    ("beforeContent", "STRING"),
    ("position", "STRING"),
    ("kafkaTopic", "STRING"),
    ("kafkaPartition", "INT"),
    ("kafkaOffset", "BIGINT"),
    ("kafkaTimestamp", "TIMESTAMP"),
)

# The dead-letter table: messages that break the contract, kept with their raw bytes.
DEAD_LETTER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kafkaTopic", "STRING"),
    ("kafkaPartition", "INT"),
    ("kafkaOffset", "BIGINT"),
    ("kafkaTimestamp", "TIMESTAMP"),
    ("kafkaKey", "BINARY"),
    ("error", "STRING"),
    ("raw", "BINARY"),
)


def readiness_dir(lake_dir: Path, writer_name: str) -> Path:
    """Where a stream writer publishes the readiness records merge waits for."""
    return lake_dir / "_ready" / writer_name


def default_writer_name(instances: Iterable[str]) -> str:
    """The name of a stream writer that reads the topics of ``instances``."""
    return "+".join(sorted(instances))


def _quote(path: Path) -> str:
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


class HiveCatalog:
    """The writer's Hive tables and ``dt`` partitions, with as few metastore calls as possible.

    A metastore call costs 0.1-0.3 s here (the embedded Hive client over PostgreSQL, one call
    at a time inside Spark), and a first batch over 200 tables needs 400 of them. So a table
    or partition the catalog has already seen is never asked about again: the tables of the
    database are listed once per process; the partitions of a table that existed before are
    listed once (instead of an ``ADD IF NOT EXISTS`` per batch); and the partitions the
    writer's state says it registered before a restart (``remember``) cost nothing.
    """

    def __init__(self, spark: SparkSession, database: str, lake_dir: Path) -> None:
        self.spark = spark
        self.database = database
        self.root = lake_dir / f"{database}.db"
        self._tables: set[str] = set()
        self._existing: set[str] | None = None  # tables found in the metastore, listed once
        self._listed: set[str] = set()  # existing tables whose partitions were listed
        self._partitions: set[tuple[str, str]] = set()
        self._remembered: dict[str, set[str]] = {}
        self._storage: Any = None  # the tables' storage format (a JVM object), asked once

    def table_dir(self, table: str) -> Path:
        return self.root / table

    def ensure_database(self) -> None:
        self.spark.sql(
            f"CREATE DATABASE IF NOT EXISTS {self.database} LOCATION {_quote(self.root)}"
        )

    def remember(self, table_days: dict[str, set[str]]) -> None:
        """Partitions registered by an earlier run (the writer's state records a table's day
        only after its partition was added); trusted for tables that still exist."""
        for table, days in table_days.items():
            self._remembered.setdefault(table, set()).update(days)

    def _existing_tables(self) -> set[str]:
        if self._existing is None:
            rows = self.spark.sql(f"SHOW TABLES IN {self.database}").collect()
            self._existing = {row["tableName"] for row in rows if not row["isTemporary"]}
            self._tables.update(self._existing)
            for table, days in self._remembered.items():
                if table in self._existing:
                    self._partitions.update((table, dt) for dt in days)
        return self._existing

    def ensure_table(self, table: str) -> None:
        if table in self._tables:
            return
        columns = DEAD_LETTER_COLUMNS if table == DEAD_LETTER_TABLE else ROW_COLUMNS
        ddl = ", ".join(f"`{name}` {kind}" for name, kind in columns)
        self.spark.sql(
            f"CREATE EXTERNAL TABLE IF NOT EXISTS {self.database}.`{table}` ({ddl}) "
            f"PARTITIONED BY (dt STRING) STORED AS PARQUET "
            f"LOCATION {_quote(self.table_dir(table))}"
        )
        self._tables.add(table)

    def _list_partitions(self, table: str) -> None:
        """Learn the partitions of a table that existed before this process (one call).

        Asked of Spark's external catalog directly: ``SHOW PARTITIONS`` resolves the table
        as a query would, ~10× the cost of the metastore call itself (~250 ms against ~20).
        """
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None  # a classic (non-Connect) session
        external = self.spark._jsparkSession.sessionState().catalog().externalCatalog()
        names = external.listPartitionNames(self.database, table, jvm.scala.Option.empty())
        listed = [str(name) for name in jvm.scala.jdk.javaapi.CollectionConverters.asJava(names)]
        self._partitions.update((table, dt) for dt in partition_days(listed))
        self._listed.add(table)

    def add_partitions(self, table: str, days: list[str]) -> None:
        """Register ``dt=`` partitions (one statement per table; repeatable)."""
        wanted = sorted(set(days))
        if all((table, dt) in self._partitions for dt in wanted):
            return
        if table in self._existing_tables() and table not in self._listed:
            self._list_partitions(table)
        new = [dt for dt in wanted if (table, dt) not in self._partitions]
        if not new:
            return
        self.ensure_table(table)
        self._create_partitions(table, new)
        self._partitions.update((table, dt) for dt in new)

    def _create_partitions(self, table: str, days: list[str]) -> None:
        """``ALTER TABLE … ADD IF NOT EXISTS PARTITION … LOCATION …`` as one call of Spark's
        external catalog: the statement also resolves and refreshes the table in this session
        (which reads none of them), a quarter of its cost here. Each partition has the
        table's storage format (the same for all of the writer's tables, asked once)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None  # a classic (non-Connect) session
        external = self.spark._jsparkSession.sessionState().catalog().externalCatalog()
        if self._storage is None:
            self._storage = external.getTable(self.database, table).storage()
        storage, catalog = self._storage, jvm.org.apache.spark.sql.catalyst.catalog
        created_ms = int(time.time() * 1000)
        partitions = jvm.java.util.ArrayList()
        for dt in days:
            spec = jvm.java.util.HashMap()
            spec.put("dt", dt)
            location = jvm.java.net.URI((self.table_dir(table) / f"dt={dt}").as_uri())
            partition_storage = catalog.CatalogStorageFormat(
                jvm.scala.Option.apply(location),
                storage.inputFormat(),
                storage.outputFormat(),
                storage.serde(),
                storage.compressed(),
                storage.properties(),
            )
            partitions.add(
                catalog.CatalogTablePartition(
                    jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(spec),
                    partition_storage,
                    jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap()),
                    created_ms,
                    -1,  # never accessed, as Spark sets it
                    jvm.scala.Option.empty(),
                )
            )
        external.createPartitions(
            self.database,
            table,
            jvm.org.apache.spark.api.python.PythonUtils.toSeq(partitions),
            True,  # ignoreIfExists: repeatable after a crash
        )

    def add_all(self, days_by_table: dict[str, list[str]], threads: int = 4) -> None:
        """``add_partitions`` for many tables; the metastore calls of different tables run in
        a few threads (a first batch over hundreds of tables creates them all)."""
        pending = {
            table: days
            for table, days in days_by_table.items()
            if any((table, dt) not in self._partitions for dt in days)
        }
        if not pending:
            return
        self._existing_tables()  # listed once, before the threads share it
        if len(pending) <= 1:
            for table, days in pending.items():
                self.add_partitions(table, days)
            return
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="metastore") as pool:
            for future in [pool.submit(self.add_partitions, t, d) for t, d in pending.items()]:
                future.result()


def partition_days(names: list[str]) -> list[str]:
    """Pure: the ``dt`` values of partition names (``dt=2024-03-01``)."""
    return [name.removeprefix("dt=") for name in names if name.startswith("dt=")]
