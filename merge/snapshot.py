"""The snapshot tables: ``<merge.database>.<logical table>``, partitioned by ``dt``, and how a
merge publishes a partition atomically.

Layout (``<lake>/<database>.db/<table>/``)::

    _staging/<dt>-<runId>/             Spark writes here (a killed merge leaves it behind)
    _versions/dt=<dt>/run=<runId>/     a finished write, renamed here in one step
    _records/…                         (none: merge records live under <lake>/_merge/)

The partition ``dt`` of the Hive table points at one complete version directory. Publishing
is: Spark writes the staging directory; it is renamed into ``_versions`` (one rename); then
one metastore call points the partition at it (``ADD IF NOT EXISTS PARTITION … LOCATION``
for a new day, ``PARTITION … SET LOCATION`` when re-merging a day). That metastore call is
the commit point: before it, readers see the previous state, after it the whole new
partition. Renaming into ``dt=<dt>`` itself, as the seed did, cannot replace an existing day
atomically (the old directory has to move away first, and readers see no data in between),
which is why each run gets its own directory and the partition moves instead. Names starting
with ``_`` are skipped by Hive and Spark listings, so MSCK REPAIR never mistakes staging or
old versions for partitions. Superseded versions and abandoned staging directories are
removed after a successful publish.

Files: rows are cut by key range into files of about ``merge.rows_per_file`` rows, sorted
by key inside each file. An incremental merge (``merge.job``) rewrites only the files of
yesterday's version that hold a changed key; the others are carried into the new version
as hard links (same bytes, no copy; a copy where links are impossible), so cost follows the
change as far as the changes cluster by key. On HDFS/S3 the same plan would reference or
copy the untouched files; links are what a local/POSIX lake offers.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from merge.schema import META_COLUMNS, SchemaPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


class SnapshotStore:
    def __init__(
        self, spark: SparkSession, database: str, lake_dir: Path, file_format: str = "parquet"
    ) -> None:
        self.spark = spark
        self.database = database
        self.root = lake_dir / f"{database}.db"
        self.file_format = file_format

    def qualified(self, table: str) -> str:
        return f"{self.database}.`{table}`"

    def table_dir(self, table: str) -> Path:
        return self.root / table

    def staging_dir(self, table: str, dt: str, run_id: str) -> Path:
        return self.table_dir(table) / "_staging" / f"{dt}-{run_id}"

    def version_dir(self, table: str, dt: str, run_id: str) -> Path:
        return self.table_dir(table) / "_versions" / f"dt={dt}" / f"run={run_id}"

    # -- metastore ------------------------------------------------------------------------------
    def ensure_database(self) -> None:
        self.spark.sql(
            f"CREATE DATABASE IF NOT EXISTS {self.database} LOCATION {_quote(str(self.root))}"
        )

    def exists(self, table: str) -> bool:
        return bool(self.spark.catalog.tableExists(f"{self.database}.{table}"))

    def data_columns(self, table: str) -> list[tuple[str, str]] | None:
        """The table's data columns (name, Hive type) without ``dt`` and bookkeeping, or None."""
        if not self.exists(table):
            return None
        meta = {name for name, _ in META_COLUMNS}
        schema = self.spark.table(f"{self.database}.{table}").schema
        return [
            (field.name, field.dataType.simpleString())
            for field in schema.fields
            if field.name not in meta and field.name != "dt"
        ]

    def partitions(self, table: str) -> list[str]:
        """The table's days; none for a table that does not exist (one metastore call)."""
        from pyspark.errors import AnalysisException  # noqa: PLC0415

        try:
            rows = self.spark.sql(f"SHOW PARTITIONS {self.qualified(table)}").collect()
        except AnalysisException:
            if self.exists(table):
                raise  # not a missing table: the caller must hear of it
            return []
        return sorted(str(row[0]).removeprefix("dt=") for row in rows)

    def partition_location(self, table: str, dt: str) -> str | None:
        from pyspark.errors import AnalysisException  # noqa: PLC0415

        try:
            # One metastore call; a missing table or partition is an AnalysisException.
            rows = self.spark.sql(
                f"DESCRIBE FORMATTED {self.qualified(table)} PARTITION (dt={_quote(dt)})"
            ).collect()
        except AnalysisException:
            return None
        for row in rows:
            if str(row[0]).strip() == "Location":
                # The metastore keeps URIs; a local lake's are reported as plain paths.
                return str(row[1]).strip().removeprefix("file:")
        return None

    def evolve(self, table: str, plan: SchemaPlan, exists: bool | None = None) -> None:
        """Create the table, or bring it to ``plan``'s columns (``exists``: already known).

        Added columns: ``ADD COLUMNS`` (Spark puts them after the existing ones, so the
        bookkeeping columns of the plan go before them in files; columns are matched by
        name, never by position). Widened types: Spark cannot change a Hive column's type in
        place, so the external table's definition is recreated with every partition's
        location (data files are not touched; older files are read with the wider type).
        """
        columns = [*plan.columns, *META_COLUMNS]
        stored = "PARQUET" if self.file_format == "parquet" else "ORC"
        create = (
            f"CREATE EXTERNAL TABLE IF NOT EXISTS {self.qualified(table)} ({_ddl(columns)}) "
            f"PARTITIONED BY (dt STRING) STORED AS {stored} "
            f"LOCATION {_quote(str(self.table_dir(table)))}"
        )
        if not (self.exists(table) if exists is None else exists):
            self.spark.sql(create)
            return
        if plan.widened:
            locations = {dt: self.partition_location(table, dt) for dt in self.partitions(table)}
            current = self.spark.table(f"{self.database}.{table}").columns
            ordered = [c for c in current if c != "dt"]
            types = {**dict(columns)}
            recreated = [(name, types[name]) for name in ordered if name in types]
            recreated += [(n, t) for n, t in columns if n not in ordered]
            self.spark.sql(f"DROP TABLE {self.qualified(table)}")  # external: files stay
            self.spark.sql(
                f"CREATE EXTERNAL TABLE {self.qualified(table)} ({_ddl(recreated)}) "
                f"PARTITIONED BY (dt STRING) STORED AS {stored} "
                f"LOCATION {_quote(str(self.table_dir(table)))}"
            )
            specs = " ".join(
                f"PARTITION (dt={_quote(dt)}) LOCATION {_quote(location)}"
                for dt, location in locations.items()
                if location
            )
            if specs:
                self.spark.sql(f"ALTER TABLE {self.qualified(table)} ADD {specs}")
            log.info("snapshot table %s: widened %s", table, ", ".join(plan.widened))
        elif plan.added:
            added = [(n, t) for n, t in plan.columns if n in plan.added]
            self.spark.sql(f"ALTER TABLE {self.qualified(table)} ADD COLUMNS ({_ddl(added)})")
            log.info("snapshot table %s: added %s", table, ", ".join(plan.added))

    # -- data -----------------------------------------------------------------------------------
    def file_rows(self, paths: list[Path]) -> dict[Path, int]:
        """Rows in each data file, from its footer (Parquet) or file tail (ORC), read by the
        driver: no Spark job, no column data. Counting through a Spark job costs more than
        the rest of a small incremental merge, and grouping rows by file scans every row."""
        jvm: Any = self.spark.sparkContext._jvm
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        counts: dict[Path, int] = {}
        for path in paths:
            hadoop_path = jvm.org.apache.hadoop.fs.Path(str(path))
            if self.file_format == "parquet":
                source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
                    hadoop_path, conf
                )
                reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
                try:
                    counts[path] = int(reader.getRecordCount())
                finally:
                    reader.close()
            else:
                options = jvm.org.apache.orc.OrcFile.readerOptions(conf)
                reader = jvm.org.apache.orc.OrcFile.createReader(hadoop_path, options)
                try:
                    counts[path] = int(reader.getNumberOfRows())
                finally:
                    reader.close()
        return counts

    def read(self, table: str, dt: str) -> DataFrame:
        self.spark.catalog.refreshTable(f"{self.database}.{table}")
        return self.spark.table(f"{self.database}.{table}").where(f"dt = {_quote(dt)}").drop("dt")

    def publish(
        self,
        table: str,
        dt: str,
        run_id: str,
        rows: DataFrame,
        carried: list[Path],
        replace: bool | None = None,
    ) -> Path:
        """Write ``rows`` (plus the ``carried`` files of an earlier version) as partition ``dt``
        atomically; returns the new version directory. ``replace``: whether ``dt`` is known to
        exist already (one metastore call instead of two); None when unknown."""
        staging = self.staging_dir(table, dt, run_id)
        target = self.version_dir(table, dt, run_id)
        rows.write.format(self.file_format).mode("overwrite").save(str(staging))
        for source in carried:
            destination = staging / source.name
            if destination.exists():
                raise FileExistsError(f"{destination} exists; file names must be unique")
            try:
                os.link(source, destination)
            except OSError:
                shutil.copy2(source, destination)  # another filesystem: links impossible
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)
        location = _quote(str(target))
        qualified = self.qualified(table)
        spec = f"PARTITION (dt={_quote(dt)})"
        if replace is None:
            self.spark.sql(f"ALTER TABLE {qualified} ADD IF NOT EXISTS {spec} LOCATION {location}")
        elif not replace:
            # Without IF NOT EXISTS: a day that appeared meanwhile (another merge of it) fails
            # here rather than silently keeping the other run's location.
            self.spark.sql(f"ALTER TABLE {qualified} ADD {spec} LOCATION {location}")
        if replace is None or replace:
            # A re-merge of the day: move the existing partition (the commit point).
            self.spark.sql(f"ALTER TABLE {qualified} {spec} SET LOCATION {location}")
        self.spark.catalog.refreshTable(f"{self.database}.{table}")
        self._clean(table, dt, keep=target)
        return target

    def _clean(self, table: str, dt: str, keep: Path) -> None:
        """Remove superseded versions of ``dt`` and staging directories of dead runs of ``dt``."""
        for old in keep.parent.glob("run=*"):
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)
        for abandoned in (self.table_dir(table) / "_staging").glob(f"{dt}-*"):
            shutil.rmtree(abandoned, ignore_errors=True)
