"""The raw change layer of the lake: its one Iceberg table and the stream writer's progress.

The stream writer writes the rows of every logical table into ONE Iceberg v2 table,
``<catalog>.<database>._cdc_changes`` (``RAW_TABLE``; ``cdc_platform.iceberg``; database
default ``ods_binlog_source``), partitioned by ``dt`` (a string, ``yyyy-MM-dd``) and
``logicalTable`` hashed into ``RAW_TABLE_BUCKETS`` buckets, with the columns of
``RAW_TABLE_COLUMNS``: those of ``ROW_COLUMNS``, the dead-letter columns (null on ordinary
rows), ``logicalTable`` (``dead_letter`` for dead letters) and ``dt``. One micro-batch is
one commit of it, whatever the number of logical tables: a commit through the metastore
costs the same for one row as for a million.

Downstream SQL keeps a table per logical table: a Hive view ``<database>.<table>`` (in Spark's
session catalog, so ``./run sql`` and the Thrift server read it as before) selecting the
table's columns (``table_columns``) from ``_cdc_changes`` where ``logicalTable`` is it. The
product's own readers read the base table filtered by ``logicalTable`` (a view has no time
travel).

Its progress is a table of the same database, ``_cdc_writer_progress``, partitioned by writer:
one row per writer (``PROGRESS_COLUMNS``), replaced by one Iceberg commit after each batch's
table commits. It holds the writer's state as JSON (``state``: the next Kafka offset,
watermark and lag of every partition, the days each table has rows for, the ready days and
the late rows counted per day and table) and the ready days as a column. Merge, a downstream
scheduler and the writer itself after a restart read it from there, so what they see is
always committed, on every storage, without a rename or a file of our own:

    SELECT ready_days FROM lake.ods_binlog_source._cdc_writer_progress WHERE writer = 'local'
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cdc_platform.config import Settings
from cdc_platform.hive_metastore import CURRENT_SNAPSHOT_SUMMARY, table_parameter
from cdc_platform.iceberg import OFFSETS_PROPERTY, WRITER_PROPERTY, KafkaOffsets, LakeCatalog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)
_T = TypeVar("_T")

DEAD_LETTER_TABLE = "dead_letter"
PROGRESS_TABLE = "_cdc_writer_progress"
# The raw layer's one table, and its column naming a row's logical table.
RAW_TABLE = "_cdc_changes"
LOGICAL_TABLE_COLUMN = "logicalTable"
# The partition column of every raw table: the day of executeTime (dead letters: of the Kafka
# timestamp) in ``stream_writer.time_zone``.
DAY_COLUMN = "dt"
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

# The columns of ``RAW_TABLE``: every logical table's and the dead letters' in one row type.
RAW_TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    *ROW_COLUMNS,
    *(column for column in DEAD_LETTER_COLUMNS if column not in ROW_COLUMNS),
    (LOGICAL_TABLE_COLUMN, "STRING"),
    (DAY_COLUMN, "STRING"),
)
# The raw table's partitions: the day, and the logical table hashed into a few buckets
# (Iceberg's bucket transform), not the logical table itself. A batch writes a file per
# partition each of its tasks meets: with a partition per logical table that was one file per
# table a batch (~200 in the bench), and each file costs a fixed price beyond its bytes (~4 ms
# of the writer's CPU and ~2 ms of the store's for a PUT on S3: the writer ran at 0.74-0.85x
# of Spark's own sink there, 0.91-0.97x with 8 buckets, 2026-11-27-raw-buckets-s21). The
# price is on the read side: a read of one table's day (merge, a view) opens its bucket's
# files of that day, which hold the other tables of its bucket too (Iceberg prunes by the
# bucket, then by each file's ``logicalTable`` bounds, then filters the rows), and a table's
# expiry rewrites those files without its rows (docs/stream_writer.md, "Layout"). The writer
# follows the table's partition spec, whatever it is: an operator may evolve it.
RAW_TABLE_BUCKETS = 8
RAW_TABLE_PARTITIONING: tuple[str, ...] = (
    DAY_COLUMN,
    f"bucket({RAW_TABLE_BUCKETS}, {LOGICAL_TABLE_COLUMN})",
)
# The order ``cdc-mirror maintain`` compacts a bucket's files of a day in (Iceberg's sort
# rewrite): a day bigger than the target file size comes out as files each holding a run of
# logical tables, whose bounds then keep a read of one table (a view, a validation, merge's
# checks for late rows) out of the files of the others; bin-packing would mix them again in
# every file.
RAW_COMPACTION_ORDER = f"{LOGICAL_TABLE_COLUMN} ASC NULLS LAST, binlogOffset ASC NULLS LAST"
# Nothing filters on the JSON texts and raw bytes: no column metrics for them.
_NO_METRICS = ("content", "beforeContent", "columnTypes", "position", "raw", "error", "kafkaKey")
# A file holds several logical tables (its bucket's): their names' bounds whole, not cut to
# Iceberg's default 16 characters, so that a read of one table skips the files whose range of
# names does not hold it even where names share a long prefix.
_FULL_METRICS = (LOGICAL_TABLE_COLUMN,)
# Several writers (and maintenance) commit to ``RAW_TABLE``: an append that lost a race is
# retried by Iceberg from a fresh read; its defaults (4 retries, at most 60 s) are for one
# writer per table.
_COMMIT_RETRIES = {
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "50",
    "commit.retry.max-wait-ms": "5000",
    "commit.retry.total-timeout-ms": "600000",
}


# A table committed to every batch keeps its metadata small: each commit writes a metadata
# file listing every snapshot the table holds; Iceberg deletes the metadata files older than
# the newest ``previous-versions-max`` after each commit (its default keeps them all, until
# orphan removal), and ``cdc-mirror maintain`` expires the snapshots.
METADATA_CLEANUP_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


def raw_table_properties(target_file_mb: float) -> dict[str, str]:
    """Pure: the Iceberg properties of ``RAW_TABLE``. Rows are written by the task that read
    them (no shuffle before the write: ``distribution-mode=none``), each task keeping a file
    open per partition it holds (fanout), rolled at ``target_file_mb``."""
    return {
        "write.target-file-size-bytes": str(int(target_file_mb * 1024 * 1024)),
        "write.distribution-mode": "none",
        "write.spark.fanout.enabled": "true",
        **{f"write.metadata.metrics.column.{column}": "none" for column in _NO_METRICS},
        **{f"write.metadata.metrics.column.{column}": "full" for column in _FULL_METRICS},
        **METADATA_CLEANUP_PROPERTIES,
        **_COMMIT_RETRIES,
    }


def ensure_raw_table(lake: LakeCatalog, database: str, target_file_mb: float = 64.0) -> None:
    """The database and ``RAW_TABLE`` (repeatable; an existing table keeps its settings, but
    one an earlier version made gets ``METADATA_CLEANUP_PROPERTIES``)."""
    lake.create_namespace(database)
    if RAW_TABLE not in lake.table_names(database):
        lake.create_table(
            database,
            RAW_TABLE,
            RAW_TABLE_COLUMNS,
            partitioned_by=RAW_TABLE_PARTITIONING,
            properties=raw_table_properties(target_file_mb),
        )
    elif lake.ensure_properties(database, RAW_TABLE, METADATA_CLEANUP_PROPERTIES):
        log.info("lake: %s.%s given its metadata cleanup properties", database, RAW_TABLE)


def raw_view_query(catalog_table: str, table: str) -> str:
    """Pure: the query of the view of logical table ``table``: its own columns of
    ``catalog_table`` (the quoted name of ``RAW_TABLE``) where ``logicalTable`` is it."""
    columns = ", ".join(f"`{name}`" for name, _ in table_columns(table))
    return (
        f"SELECT {columns} FROM {catalog_table} "  # noqa: S608 - quoted names, escaped text
        f"WHERE `{LOGICAL_TABLE_COLUMN}` = '{_sql_text(table)}'"
    )


def raw_view_sql(catalog_table: str, view: str, table: str) -> str:
    """Pure: the statement that makes ``view`` (``<database>.<table>`` in Spark's session
    catalog) show the logical table ``table`` of ``catalog_table`` (the quoted name of
    ``RAW_TABLE``) in its own columns."""
    return f"CREATE OR REPLACE VIEW spark_catalog.{view} AS {raw_view_query(catalog_table, table)}"


# Metastore clients that store copied views at once: the metastore (embedded in the Spark JVM)
# serves each on a thread and a database connection of its own, and a view's call spends most
# of its time waiting for PostgreSQL (4 at once: 9.9 ms a view against 25 ms for one, loaded).
VIEW_COPY_CLIENTS = 4
# What the metastore sets itself when a table's record lacks it: each copy gets its own.
_DDL_TIME_PARAMETER = "transient_lastDdlTime"
_ALREADY_EXISTS = "org.apache.hadoop.hive.metastore.api.AlreadyExistsException"
_NO_SUCH_OBJECT = "org.apache.hadoop.hive.metastore.api.NoSuchObjectException"
_VIEW_TYPE = "VIRTUAL_VIEW"
# A view property holding a digest of the view's output columns (names, types, nullability),
# set by whoever makes the view by SQL: while it is unchanged, ``replace_view_text`` may change
# the view's query without Spark analysing it.
VIEW_COLUMNS_PROPERTY = "cdc-mirror.view-columns"
# The view properties Spark's CREATE VIEW takes from the session itself rather than from the
# query: the SQL settings the view runs with (the session's changed ones and its time zone:
# ``spark.sql.ansi.enabled``, ``spark.sql.session.timeZone``, ...; a setting not stored runs
# at its default) and the current catalog and namespace unqualified names resolve in.
SESSION_VIEW_PREFIXES = ("view.sqlConfig.", "view.catalogAndNamespace.")


class RawViews:
    """Makes the views of logical tables (``raw_view_sql``) in a Spark session, cheaply.

    ``CREATE VIEW`` analyses its query, which loads ``RAW_TABLE`` from the metastore and
    reads its metadata file (the lake's catalog keeps no table cache), before the one
    metastore call that stores the view: 0.2-0.5 s a view under load, 34 s for a first run
    over 200 tables. The views of the row tables differ only in their name and the logical
    table in their text (same columns, same properties), so only the first one of a session
    is made by SQL; each next one is a copy of the metastore's record of it (Hive's ``Table``,
    as Spark stored it) with the name and the text changed, stored by one metastore call
    (``create_table``), several at once (``VIEW_COPY_CLIENTS``) on metastore clients of their
    own: Spark's session catalog would add three lookups a view and serialise every call
    under its Hive client's lock. The dead-letter view has columns of its own: made by SQL."""

    def __init__(
        self,
        spark: Any,
        catalog_table: str,
        database: str,
        clients: int = VIEW_COPY_CLIENTS,
    ) -> None:
        self.spark = spark
        self.catalog_table = catalog_table
        self.database = database
        self._template: Any = None  # the metastore's Table of a row table's view
        # Long-lived threads: each keeps its metastore client (and the JVM thread behind it).
        self._copiers = ThreadPoolExecutor(clients, thread_name_prefix="cdc-view-copies")
        self._clients = MetastoreClients(spark)

    def make(self, table: str) -> None:
        """The view ``<database>.<table>`` (one that exists already is left as it is when
        copied, replaced when made by SQL: both show the same rows)."""
        failed = self.make_all([table])
        if table in failed:
            raise failed[table]

    def make_all(self, tables: Iterable[str]) -> dict[str, Exception]:
        """The views of ``tables`` (as ``make``); returns the ones that failed, with why
        (every other one is made)."""
        failed: dict[str, Exception] = {}
        copies: dict[str, Future[None]] = {}
        for table in tables:
            if self._template is None or table == DEAD_LETTER_TABLE:
                try:
                    self._make_by_sql(table)
                except Exception as exc:  # noqa: BLE001 - returned to the caller
                    failed[table] = exc
            else:
                copies[table] = self._copiers.submit(self._store_copy, table)
        for table, copy in copies.items():
            error = copy.exception()
            if isinstance(error, Exception):
                failed[table] = error
        return failed

    def close(self) -> None:
        """Stop the copying threads, then close every metastore client they and the caller
        made (``MetastoreClients.close``)."""
        self._copiers.shutdown(wait=True)
        self._clients.close()

    def _make_by_sql(self, table: str) -> None:
        self.spark.sql(raw_view_sql(self.catalog_table, f"`{self.database}`.`{table}`", table))
        if table != DEAD_LETTER_TABLE and self._template is None:
            try:
                template = self._client().getTable(self.database, table)
            except Exception as exc:  # noqa: BLE001 - the view is made; the next one by SQL too
                log.warning(
                    "the view %s is made; the next ones are made by SQL as well (its metastore "
                    "record could not be read: %s)",
                    table,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
                return
            template.getParameters().remove(_DDL_TIME_PARAMETER)
            self._template = template

    def _store_copy(self, table: str) -> None:
        """Store the template with ``table``'s name and text (the metastore sets the times)."""
        view = self._template.deepCopy()
        view.setTableName(table)
        _set_view_text(view, raw_view_query(self.catalog_table, table))
        try:
            self._client().createTable(view)
        except Exception as exc:
            if _java_class(exc) != _ALREADY_EXISTS:
                raise

    def _client(self) -> Any:
        """This thread's metastore client."""
        return self._clients.get()


def metastore_client(spark: Any) -> Any:
    """A Hive metastore client of its own (Java's ``IMetaStoreClient``), made with the Hive
    settings of Spark's session catalog: one call a metastore operation, where Spark's catalog
    adds lookups of its own and serialises every call under its Hive client's lock. Not
    thread-safe: one per thread."""
    jvm = spark.sparkContext._jvm
    hive = spark._jsparkSession.sharedState().externalCatalog().unwrapped()
    return jvm.org.apache.hadoop.hive.metastore.RetryingMetaStoreClient.getProxy(
        hive.client().conf(), True
    )


class MetastoreClients:
    """A metastore client per thread (``metastore_client``), made at its first use, until
    ``close``. Every client made is kept in a list as well: with a ``thrift://`` metastore
    each holds a socket (and py4j keeps its Java object) until it is closed, including the
    client of a thread that has ended, which a thread-local alone no longer reaches."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._by_thread = threading.local()
        self._lock = threading.Lock()
        self._made: list[Any] = []

    def get(self) -> Any:
        client = getattr(self._by_thread, "client", None)
        if client is None:
            client = metastore_client(self._spark)
            with self._lock:
                self._made.append(client)
            self._by_thread.client = client
        return client

    def close(self) -> None:
        """Close every client made so far, by any thread (the owner calls this once no
        thread uses them any more); a next ``get`` makes a new one. A client that fails to
        close is logged and the others are closed: closing never fails its owner's stop."""
        with self._lock:
            made, self._made = self._made, []
            self._by_thread = threading.local()
        for client in made:
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - logged; the next ones are closed
                log.warning(
                    "a metastore client could not be closed: %s",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )


def _set_view_text(record: Any, text: str) -> None:
    """``text`` as the query of a view's metastore record, as Spark's ``CREATE VIEW`` stores
    it: the same text in both fields."""
    record.setViewOriginalText(text)  # what SHOW CREATE TABLE and Hive show
    record.setViewExpandedText(text)  # what Spark runs


def view_session_properties(spark: Any) -> dict[str, str]:
    """The properties a ``CREATE VIEW`` in ``spark`` would store now from the session itself
    (``SESSION_VIEW_PREFIXES``: its SQL settings, catalog and namespace), as Spark itself
    makes them: for a temporary view of a constant, which reads no table and calls no
    metastore (Spark's rules of what it keeps are its own: ``ViewHelper``)."""
    jvm = spark.sparkContext._jvm
    probe = f"cdc_view_session_{uuid.uuid4().hex}"
    spark.sql(f"CREATE TEMPORARY VIEW `{probe}` AS SELECT 1 AS one")
    try:
        metadata = (
            spark._jsparkSession.sessionState()
            .catalog()
            .getTempViewOrPermanentTableMetadata(
                jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(probe)
            )
        )
        return session_part(
            jvm.scala.jdk.javaapi.CollectionConverters.asJava(metadata.properties())
        )
    finally:
        spark.catalog.dropTempView(probe)


def session_part(properties: Mapping[Any, Any]) -> dict[str, str]:
    """Pure: the entries of a view's properties (or a metastore record's parameters) Spark
    takes from the session (``SESSION_VIEW_PREFIXES``)."""
    return {
        str(key): str(value)
        for key, value in properties.items()
        if str(key).startswith(SESSION_VIEW_PREFIXES)
    }


def replace_view_text(
    client: Any,
    database: str,
    view: str,
    text: str,
    mark: str,
    session: Mapping[str, str],
) -> bool:
    """Make the view ``database.view`` (Spark's session catalog) run the query ``text`` with
    the session properties ``session`` (``view_session_properties``: what ``CREATE OR
    REPLACE VIEW`` would store now) by one metastore call that changes its stored text and
    those properties, when its record carries the property ``VIEW_COLUMNS_PROPERTY`` =
    ``mark`` (the caller's digest of the view's output columns: unchanged, so what Spark
    stored of them at ``CREATE VIEW`` holds for the new text); nothing when it runs ``text``
    with them already. False, untouched, when the view must be made by ``CREATE OR REPLACE
    VIEW``: there is none, or its columns differ (or are not marked).

    The session's properties are replaced, not kept from the view's creation: a view runs
    with the SQL settings stored with it, and a merge or maintenance run under other ones
    (``spark.sql.ansi.enabled``, the session time zone) must leave the view reading as one
    made by it would. ``CREATE OR REPLACE VIEW`` analyses its query (each table it reads
    loaded from the catalog) and, in Spark 4.0, drops the view before storing it again, a
    moment in which a reader finds none; this is one read of the record and at most one
    ``alter_table``."""
    try:
        record = client.getTable(database.lower(), view.lower())
    except Exception as exc:
        if _java_class(exc) == _NO_SUCH_OBJECT:
            return False
        raise
    if str(record.getTableType()) != _VIEW_TYPE:
        return False
    parameters = record.getParameters()
    if parameters is None or parameters.get(VIEW_COLUMNS_PROPERTY) != mark:
        return False
    stored_session = session_part(parameters)
    same_text = record.getViewOriginalText() == text and record.getViewExpandedText() == text
    if same_text and stored_session == dict(session):
        return True
    _set_view_text(record, text)
    for key in stored_session:
        parameters.remove(key)
    for key, value in session.items():
        parameters.put(key, value)
    parameters.remove(_DDL_TIME_PARAMETER)  # the metastore sets the time of the change
    client.alter_table(database.lower(), view.lower(), record)
    return True


def _java_class(error: BaseException) -> str | None:
    """The class name of the JVM exception behind a py4j error (None for another error)."""
    java = getattr(error, "java_exception", None)
    return None if java is None else str(java.getClass().getName())


# The snapshot-summary property of a progress commit holding the writer's newest ready days
# (comma-separated): the Hive metastore keeps the current snapshot's summary among the table's
# parameters, so a process without Spark (the scheduler) reads them there.
READY_DAYS_PROPERTY = "cdc-mirror.ready-days"
_READY_DAYS_KEPT = 400  # a summary above 32,672 characters is not copied to the metastore

PROGRESS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("writer", "STRING"),
    ("batch_id", "BIGINT"),
    ("committed_ms", "BIGINT"),
    ("ready_days", "ARRAY<STRING>"),
    ("state", "STRING"),
)


def table_columns(table: str) -> tuple[tuple[str, str], ...]:
    """The columns of a logical table (its view; ``raw_rows``), ``dt`` last."""
    columns = DEAD_LETTER_COLUMNS if table == DEAD_LETTER_TABLE else ROW_COLUMNS
    return (*columns, (DAY_COLUMN, "STRING"))


def default_writer_name(instances: Iterable[str]) -> str:
    """The name of a stream writer that reads the topics of ``instances``."""
    return "+".join(sorted(instances))


@dataclass(frozen=True, slots=True)
class WriterProgress:
    """A writer's last committed progress (a row of ``PROGRESS_TABLE``)."""

    writer: str
    batch_id: int
    committed_ms: int
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def ready_days(self) -> list[str]:
        return sorted(self.state.get("readyDays", []))

    @property
    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition), the offset of the next message to read (every message
        below it is in the lake)."""
        return {
            (str(p["topic"]), int(p["partition"])): int(p["nextOffset"])
            for p in self.state.get("partitions", [])
        }

    def late_rows(self, dt: str, table: str) -> int:
        """Rows of ``table`` written for ``dt`` after the day was ready."""
        return int(self.state.get("lateRows", {}).get(dt, {}).get(table, 0))

    def ready_record(self, dt: str) -> dict[str, Any] | None:
        """What the writer says about a ready day (None while it is not ready)."""
        if dt not in self.state.get("readyDays", []):
            return None
        tables = sorted(t for t, days in self.state.get("tableDays", {}).items() if dt in days)
        return {
            "dt": dt,
            "writer": self.writer,
            "batchId": self.batch_id,
            "committedMs": self.committed_ms,
            "globalWatermarkMs": self.state.get("globalWatermarkMs"),
            "tablesWithData": tables,
            "lateRows": self.state.get("lateRows", {}).get(dt, {}),
        }


def read_writer_progress(lake: LakeCatalog, database: str, writer: str) -> WriterProgress | None:
    """The writer's last committed progress; None when it has committed none (or the table
    does not exist yet)."""
    return read_all_writer_progress(lake, database, only=writer).get(writer)


def read_all_writer_progress(
    lake: LakeCatalog, database: str, only: str | None = None
) -> dict[str, WriterProgress]:
    """Every writer's (or writer ``only``'s) last committed progress, by writer name (empty
    without the table)."""
    frame = if_table_exists(lambda: lake.spark.table(lake.name(database, PROGRESS_TABLE)))
    if frame is None:
        return {}
    if only is not None:
        frame = frame.where(f"writer = '{_sql_text(only)}'")
    newest: dict[str, Any] = {}
    for row in frame.select("writer", "batch_id", "committed_ms", "state").collect():
        seen = newest.get(row["writer"])
        if seen is None or (row["committed_ms"], row["batch_id"]) > (
            seen["committed_ms"],
            seen["batch_id"],
        ):
            newest[row["writer"]] = row
    return {
        writer: WriterProgress(
            writer=writer,
            batch_id=int(row["batch_id"]),
            committed_ms=int(row["committed_ms"]),
            state=json.loads(row["state"]),
        )
        for writer, row in newest.items()
    }


def commits_ahead_of_progress(
    commits: Iterable[tuple[int, Mapping[str, str]]],
    progress: Mapping[str, Mapping[tuple[str, int], int]],
) -> set[int]:
    """Pure: of the raw table's commits (snapshot id and summary, NEWEST FIRST), the newest
    of each writer when it records an offset beyond that writer's committed progress (a
    crash between the raw commit and the progress commit). The restarted writer finds its
    position in that commit (``stream_writer.writer``): expiring it would make the writer
    write those rows again."""
    ahead: set[int] = set()
    seen: set[str] = set()
    for snapshot_id, summary in commits:
        writer = summary.get(WRITER_PROPERTY)
        text = summary.get(OFFSETS_PROPERTY)
        if writer is None or text is None or writer in seen:
            continue
        seen.add(writer)
        committed = progress.get(writer, {})
        offsets = KafkaOffsets.decode(text).next_offsets
        if any(offset > committed.get(key, 0) for key, offset in offsets.items()):
            ahead.add(snapshot_id)
    return ahead


# The progress table's metadata stays small (``METADATA_CLEANUP_PROPERTIES``): each writer
# commits once a batch (every 30 s or so); every reader reads the rows of the current snapshot
# (``read_all_writer_progress``), so ``cdc-mirror maintain`` expires the others. A commit that
# lost a race to another writer's is retried from a fresh read (``_COMMIT_RETRIES``).
PROGRESS_TABLE_PROPERTIES = {**METADATA_CLEANUP_PROPERTIES, **_COMMIT_RETRIES}


def ensure_progress_table(lake: LakeCatalog, database: str) -> None:
    """The database and its progress table with ``PROGRESS_TABLE_PROPERTIES`` (repeatable;
    a table an earlier version made without them gets them)."""
    lake.create_namespace(database)
    if PROGRESS_TABLE not in lake.table_names(database):
        lake.create_table(
            database,
            PROGRESS_TABLE,
            PROGRESS_COLUMNS,
            partitioned_by=("writer",),
            properties=PROGRESS_TABLE_PROPERTIES,
        )
    elif lake.ensure_properties(database, PROGRESS_TABLE, PROGRESS_TABLE_PROPERTIES):
        log.info("lake: %s.%s given its metadata cleanup properties", database, PROGRESS_TABLE)


def commit_writer_progress(
    lake: LakeCatalog,
    database: str,
    progress: WriterProgress,
    offsets: KafkaOffsets,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Replace the writer's progress row: ONE Iceberg commit of ``PROGRESS_TABLE`` recording
    ``offsets`` and the writer's name in its snapshot summary, made on the driver
    (``LakeCatalog.replace_row``: no Spark job for one row)."""
    row, summary = progress_commit(progress, properties)
    lake.replace_row(database, PROGRESS_TABLE, row, offsets, summary)


def progress_commit(
    progress: WriterProgress, properties: Mapping[str, str] | None = None
) -> tuple[dict[str, str | int | list[str] | None], dict[str, str]]:
    """Pure: the writer's progress row (a value per column of ``PROGRESS_COLUMNS``) and the
    properties its commit's snapshot summary records besides the offsets."""
    values = (
        progress.writer,
        progress.batch_id,
        progress.committed_ms,
        progress.ready_days,
        json.dumps(progress.state, sort_keys=True),
    )
    row: dict[str, str | int | list[str] | None] = dict(
        zip((name for name, _ in PROGRESS_COLUMNS), values, strict=True)
    )
    summary = {
        **(properties or {}),
        WRITER_PROPERTY: progress.writer,
        READY_DAYS_PROPERTY: ",".join(progress.ready_days[-_READY_DAYS_KEPT:]),
    }
    return row, summary


def ready_days_from_metastore(settings: Settings, database: str, writer: str) -> list[str] | None:
    """The writer's newest ready days as the Hive metastore (PostgreSQL) holds them: the
    summary of the progress table's current snapshot, for a process without Spark. None when
    that snapshot is another writer's (several writers share the database: ask Spark,
    ``read_writer_progress``) or the metastore is not PostgreSQL; [] before any commit."""
    summaries = table_parameter(
        settings,
        database,
        CURRENT_SNAPSHOT_SUMMARY,
        table=PROGRESS_TABLE,
        what="the read of the metastore's progress",
    )
    if summaries is None:
        return None
    text = summaries.get(PROGRESS_TABLE)
    if text is None:
        return []
    summary = json.loads(text)
    if summary.get(WRITER_PROPERTY) != writer:
        return None
    return [day for day in str(summary.get(READY_DAYS_PROPERTY, "")).split(",") if day]


# -- reading the raw layer (merge, validation, verify) ------------------------------------


def raw_table_condition(table: str) -> str:
    """Pure: the SQL condition selecting the rows of logical table ``table`` in ``RAW_TABLE``
    (a read with it opens the files of the table's bucket whose ``logicalTable`` bounds may
    hold it, and keeps its rows only)."""
    return f"{LOGICAL_TABLE_COLUMN} = '{_sql_text(table)}'"


def raw_rows(
    lake: LakeCatalog, database: str, table: str, where: str, snapshot: int | None = None
) -> DataFrame:
    """Rows of logical table ``table`` in ``RAW_TABLE`` matching the SQL condition ``where``
    (on ``dt`` and the row columns), as of the raw table's ``snapshot`` (None: its current
    one), with the logical table's own columns (``table_columns``); no rows, with those
    columns, when the writer has not created the raw table. Time travel is the base table's:
    a view has no snapshots."""
    columns = [name for name, _ in table_columns(table)]
    name = lake.name(database, RAW_TABLE)
    base = if_table_exists(
        lambda: (
            lake.spark.table(name)
            if snapshot is None
            else lake.spark.sql(f"SELECT * FROM {name} VERSION AS OF {int(snapshot)}")  # noqa: S608 - quoted names
        )
    )
    if base is not None:
        return base.where(raw_table_condition(table)).where(where).select(*columns)
    ddl = ", ".join(f"`{name}` {kind}" for name, kind in table_columns(table))
    return lake.spark.createDataFrame([], schema=ddl)


# The condition of what Spark raises for a table that does not exist (Iceberg's catalog: also
# for a missing database).
_NO_SUCH_TABLE = "TABLE_OR_VIEW_NOT_FOUND"


def if_table_exists(load: Callable[[], _T]) -> _T | None:
    """``load()``, which loads one table (a read Spark analyses at once, or the table's Java
    object), or None when the table does not exist: one catalog load, where ``SHOW TABLES``
    first is one more metastore call, which Iceberg's Hive catalog answers by fetching the
    record of every table and view of the database (the raw database holds a view per logical
    table)."""
    from pyspark.errors import AnalysisException  # noqa: PLC0415

    try:
        return load()
    except AnalysisException as exc:
        # PySpark raises the JVM's NoSuchTableException (also for a missing namespace) as
        # this condition.
        if exc.getCondition() == _NO_SUCH_TABLE:
            return None
        raise


def _sql_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")
