"""The lake as Apache Iceberg tables (format v2) in the shared Hive metastore, on any storage.

One interface over the three storages of ``lake.location`` (``cdc_platform.lake_location``),
chosen by configuration the way pyiceberg's ``load_catalog`` chooses a catalog:

* ``storage_for(settings)`` → a ``LakeStorage`` (local folder, HDFS or S3): the Spark and
  Hadoop settings that reach it, the Iceberg FileIO properties another engine needs, the
  secrets no message may show, and ``check()``, which proves the location can be written
  before a component consumes anything;
* ``lake_session(settings, app)`` → a SparkSession with Iceberg's runtime and the catalog
  ``lake`` (``settings.lake.catalog``): ``type=hive`` on the stack's metastore, warehouse at
  the location, the lock-free commit of Hive 2.3.10, ``S3FileIO`` on ``s3://`` and Hadoop's
  S3A for the metastore's own calls;
* ``LakeCatalog``: namespaces, tables, and the exactly-once primitive: ``append(df, table,
  offsets)`` is one Iceberg commit whose snapshot summary records the Kafka offsets it covers,
  and ``committed_offsets(table)`` reads them back from the table's current snapshot lineage.

Storage errors (the JVM's, through py4j) become one sentence naming the location and the
cause, through one table (``map_lake_error``), with every secret removed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc_platform.config import Settings
from cdc_platform.lake_location import LakeLocation, S3Access, resolve_s3_access, scrub
from simple_binlog.errors import ConfigError, ServiceUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# The snapshot-summary property that holds the Kafka offsets a commit covers.
OFFSETS_PROPERTY = "cdc-mirror.kafka-offsets"
# The snapshot-summary property naming the stream writer that made a commit (several writers
# may share a table; each resumes from its own commits).
WRITER_PROPERTY = "cdc-mirror.writer"
# The table property every table cdc-mirror creates is stamped with: the version of the layout
# it writes (columns, partitioning, the table properties and snapshot summaries it relies on).
# Raised whenever a release changes that layout incompatibly; a component refuses a table of
# another layout (or one cdc-mirror did not create) before it reads or writes anything.
LAYOUT_PROPERTY = "cdc-mirror.layout-version"
# 3: the raw table partitioned by day and a bucket of logical tables (2: by logical table and
# day, which this version still reads, writes and maintains: the writer follows a table's
# partition spec, and maintenance drops whole files of a spec without buckets by its filter).
LAYOUT_VERSION = 3
OLDEST_LAYOUT_READ = 2
# The Iceberg format version of every table (row-level deletes, the merge's copy-on-write).
FORMAT_VERSION = 2
_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Iceberg's metastore client pool per catalog; the stream writer's concurrent table commits
# (``stream_writer.writer``) use up to this many.
METASTORE_CLIENTS = 8

# -- errors ------------------------------------------------------------------------------------


class LakeUnreachableError(ServiceUnavailableError):
    """The lake's storage did not answer (retrying later may succeed)."""


class LakeAccessError(ConfigError):
    """The storage answered but refused: a missing bucket, wrong credentials, no permission."""


class IncompatibleTableError(ConfigError):
    """A table of the lake was written by an incompatible version (of cdc-mirror's layout or
    of Iceberg's format), or not by cdc-mirror at all."""


def incompatibility(properties: Mapping[str, str], format_version: int) -> str | None:
    """Pure: why a table with these Iceberg ``properties`` and ``format_version`` cannot be
    used by this version, or None when it can."""
    stamped = properties.get(LAYOUT_PROPERTY)
    if stamped is None:
        return (
            f"it was not created by cdc-mirror (it has no {LAYOUT_PROPERTY} property), or by a "
            "version before the layout was stamped"
        )
    if stamped not in {str(v) for v in range(OLDEST_LAYOUT_READ, LAYOUT_VERSION + 1)}:
        newer = stamped.isdigit() and int(stamped) > LAYOUT_VERSION
        return (
            f"it was written by {'a newer' if newer else 'another'} version of cdc-mirror "
            f"({LAYOUT_PROPERTY} {stamped}; this version reads {OLDEST_LAYOUT_READ} to "
            f"{LAYOUT_VERSION})"
        )
    if format_version != FORMAT_VERSION:
        return (
            f"it is an Iceberg format version {format_version} table; this version reads "
            f"format version {FORMAT_VERSION}"
        )
    return None


# (substring of the Java exception chain, cause for a user, error class): first match wins.
_LAKE_ERRORS: tuple[tuple[tuple[str, ...], str, type[Exception]], ...] = (
    (
        ("NoSuchBucket", "UnknownStoreException", "The specified bucket does not exist"),
        "the bucket {bucket} does not exist",
        LakeAccessError,
    ),
    (
        ("InvalidAccessKeyId", "SignatureDoesNotMatch", "The AWS Access Key Id"),
        "the S3 credentials were refused (wrong access key id or secret access key)",
        LakeAccessError,
    ),
    (
        ("AccessDeniedException", "AccessDenied", "Status Code: 403", "status code 403"),
        "access was denied (check the credentials and their permissions)",
        LakeAccessError,
    ),
    (
        ("AccessControlException", "Permission denied"),
        "permission was denied",
        LakeAccessError,
    ),
    (
        ("UnknownHostException",),
        "the host name does not resolve",
        LakeUnreachableError,
    ),
    (
        (
            "ConnectException",
            "Connection refused",
            "ConnectTimeoutException",
            "SocketTimeoutException",
            "Unable to execute HTTP request",
            "NoRouteToHostException",
        ),
        "nothing answers there (is the service running and the address right?)",
        LakeUnreachableError,
    ),
)


def map_lake_error(location: LakeLocation, chain: str, secrets: Sequence[str]) -> Exception | None:
    """Pure: the product error for a storage failure described by ``chain`` (the Java
    exception chain as text), or None when it is not a storage failure this table knows."""
    bucket = location.host if location.kind == "s3" else ""
    for needles, cause, error in _LAKE_ERRORS:
        if any(needle in chain for needle in needles):
            return error(_sentence(location, cause.format(bucket=bucket), secrets))
    return None


def _sentence(location: LakeLocation, cause: str, secrets: Sequence[str]) -> str:
    return scrub(f"the lake at {location.uri} cannot be used: {cause}.", tuple(secrets))


def _java_chain(exc: BaseException) -> str:
    """The Java exception and its causes, as text (class names and messages)."""
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    parts = [str(exc)]
    depth = 0
    while throwable is not None and depth < 20:
        parts.append(str(throwable.toString()))
        throwable = throwable.getCause()
        depth += 1
    return "\n".join(parts)


# -- offsets in the commit ---------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaOffsets:
    """What a commit covers: per (topic, partition), the offset of the NEXT message to read.

    Everything below it is in the table ("after the last item", Kafka's own committed-offset
    meaning); a writer restarting from these offsets neither skips nor repeats a message.
    """

    next_offsets: Mapping[tuple[str, int], int]

    def encode(self) -> str:
        """The snapshot-summary value: ``{"topic": {"partition": next offset}}``, sorted."""
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.next_offsets.items()):
            by_topic.setdefault(topic, {})[str(partition)] = offset
        return json.dumps(by_topic, separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> KafkaOffsets:
        """Parse ``encode``'s form; ValueError naming what is wrong."""
        try:
            raw = json.loads(text)
        except ValueError:
            raise ValueError(f"the offsets property is not JSON: {text[:80]!r}") from None
        offsets: dict[tuple[str, int], int] = {}
        if not isinstance(raw, dict):
            raise ValueError("the offsets property is not an object of topics")
        for topic, partitions in raw.items():
            if not isinstance(partitions, dict):
                raise ValueError(f"the offsets of topic {topic!r} are not an object")
            for partition, offset in partitions.items():
                if not partition.isdigit() or not isinstance(offset, int) or offset < 0:
                    raise ValueError(f"bad offset for {topic}[{partition}]: {offset!r}")
                offsets[(topic, int(partition))] = offset
        return cls(offsets)


# -- storages ----------------------------------------------------------------------------------


class LakeStorage(ABC):
    """One storage kind behind one interface (see the module)."""

    def __init__(self, location: LakeLocation) -> None:
        self.location = location

    def spark_conf(self, catalog: str) -> dict[str, str]:
        """The Spark settings the storage adds to the Iceberg catalog ``catalog``."""
        return {}

    def file_io_properties(self) -> dict[str, str]:
        """Iceberg FileIO properties (the same keys in Spark's catalog and in pyiceberg)."""
        return {}

    def secrets(self) -> tuple[str, ...]:
        return ()

    @abstractmethod
    def check(self, spark: SparkSession) -> None:
        """Prove the location can be written: LakeUnreachableError or LakeAccessError, one
        sentence naming the location and the cause, otherwise."""


class LocalStorage(LakeStorage):
    def check(self, spark: SparkSession) -> None:
        path = self.location.local_path
        try:
            path.mkdir(parents=True, exist_ok=True)
            # A name of this process's: components starting at once each probe their own.
            probe = path / f".cdc-mirror-probe-{os.getpid()}-{threading.get_ident()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise LakeAccessError(_sentence(self.location, exc.strerror or str(exc), ())) from None


class _HadoopStorage(LakeStorage):
    """A storage reached through a Hadoop FileSystem (HDFS; S3A for the metastore's calls)."""

    def probe_conf(self) -> dict[str, str]:
        """Hadoop settings of the check only: fail within seconds, not after minutes of
        retries (the session keeps Hadoop's patient defaults)."""
        return {}

    def check(self, spark: SparkSession) -> None:
        jvm: Any = spark.sparkContext._jvm
        conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        for key, value in self.probe_conf().items():
            conf.set(key, value)
        with lake_errors(self.location, self.secrets()):
            path = jvm.org.apache.hadoop.fs.Path(self.location.uri + "/")
            fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(path.toUri(), conf)
            try:
                fs.mkdirs(path)
                fs.getFileStatus(path)
            finally:
                fs.close()


class HdfsStorage(_HadoopStorage):
    def spark_conf(self, catalog: str) -> dict[str, str]:
        # Closing a file, the client asks the NameNode whether its last block is reported
        # and, if not yet, sleeps before asking again: 400 ms at first by default, for each
        # file, so a batch closing hundreds of small files waited tens of seconds. The first
        # ask usually comes before the DataNode's report (sent as soon as the block is
        # finalised, a few ms), and a NameNode whose files keep one replica closes nothing
        # before it (``dfs.namenode.file.close.num-committed-allowed`` needs more expected
        # replicas than the minimum). A small day's merge closes its ~17 files one after
        # another in one task, each waiting the first re-ask: ask again after 4 ms, doubling,
        # as many times as it takes to wait at least as long in all (4 ms x (2^12 - 1) =
        # 16.4 s, the default 400 ms x (2^5 - 1) = 12.4 s).
        return {
            "spark.hadoop.dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "4",
            "spark.hadoop.dfs.client.block.write.locateFollowingBlock.retries": "12",
        }

    def probe_conf(self) -> dict[str, str]:
        return {
            "ipc.client.connect.max.retries": "1",
            "ipc.client.connect.max.retries.on.timeouts": "1",
            "ipc.client.connect.timeout": "5000",
            "dfs.client.retry.policy.enabled": "false",
        }


class S3Storage(_HadoopStorage):
    def __init__(self, location: LakeLocation, access: S3Access) -> None:
        super().__init__(location)
        self.access = access

    def secrets(self) -> tuple[str, ...]:
        return self.access.secrets()

    def file_io_properties(self) -> dict[str, str]:
        access = self.access
        properties = {
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "client.region": access.region,
            "s3.path-style-access": str(access.path_style).lower(),
        }
        if access.endpoint:
            properties["s3.endpoint"] = access.endpoint
        if access.access_key_id and access.secret_access_key:
            properties["s3.access-key-id"] = access.access_key_id.get_secret_value()
            properties["s3.secret-access-key"] = access.secret_access_key.get_secret_value()
        return properties

    def hadoop_conf(self) -> dict[str, str]:
        """S3A under the ``s3`` scheme: the metastore creates and lists the lake's folders."""
        access = self.access
        conf = {
            "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.endpoint.region": access.region,
            "fs.s3a.path.style.access": str(access.path_style).lower(),
        }
        if access.endpoint:
            conf["fs.s3a.endpoint"] = access.endpoint
            conf["fs.s3a.connection.ssl.enabled"] = str(
                access.endpoint.startswith("https://")
            ).lower()
        if access.access_key_id and access.secret_access_key:
            conf["fs.s3a.access.key"] = access.access_key_id.get_secret_value()
            conf["fs.s3a.secret.key"] = access.secret_access_key.get_secret_value()
            conf["fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            )
        return conf

    def spark_conf(self, catalog: str) -> dict[str, str]:
        prefix = f"spark.sql.catalog.{catalog}"
        conf = {f"{prefix}.{key}": value for key, value in self.file_io_properties().items()}
        conf.update({f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()})
        return conf

    def probe_conf(self) -> dict[str, str]:
        return {
            **self.hadoop_conf(),
            "fs.s3a.bucket.probe": "2",  # a missing bucket fails at once, by name
            "fs.s3a.attempts.maximum": "1",
            "fs.s3a.retry.limit": "1",
            "fs.s3a.retry.interval": "100ms",
            "fs.s3a.connection.establish.timeout": "5s",
            "fs.s3a.connection.timeout": "10s",
        }


def storage_for(settings: Settings, env: Mapping[str, str] | None = None) -> LakeStorage:
    """The storage ``lake.location`` names (S3 settings completed from ``env``, default the
    process environment)."""
    location = settings.lake_location
    if location.kind == "hdfs":
        return HdfsStorage(location)
    if location.kind == "s3":
        access = resolve_s3_access(settings.lake.s3, os.environ if env is None else env)
        return S3Storage(location, access)
    return LocalStorage(location)


@contextmanager
def lake_errors(location: LakeLocation, secrets: Sequence[str]) -> Iterator[None]:
    """Translate a storage failure raised through py4j into the product's error (one table);
    anything the table does not know is re-raised as it is."""
    try:
        yield
    except Exception as exc:  # py4j's and PySpark's captured errors; unknown ones re-raised
        mapped = map_lake_error(location, _java_chain(exc), secrets)
        if mapped is None:
            raise
        raise mapped from None


# -- Spark -------------------------------------------------------------------------------------


def iceberg_jars(jars_home: Path) -> list[Path]:
    """Iceberg's runtime, the AWS bundle and S3A, resolved by the stack (``stack/jvm/iceberg``)."""
    folder = jars_home / "iceberg"
    jars = sorted(folder.glob("*.jar"))
    if not any(p.name.startswith("iceberg-spark-runtime") for p in jars):
        raise ConfigError(f"Iceberg's jars are missing from {folder}; run 'cdc-mirror stack up'.")
    return jars


def catalog_conf(catalog: str, storage: LakeStorage) -> dict[str, str]:
    """Pure: the Spark settings of the Iceberg catalog ``catalog`` on ``storage``."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        "spark.sql.extensions": _EXTENSIONS,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        # The shared Hive metastore (embedded client on PostgreSQL, as ``spark_conf`` sets).
        f"{prefix}.type": "hive",
        f"{prefix}.warehouse": storage.location.uri,
        # Every reader sees the latest commit (no 30 s table cache across sessions).
        f"{prefix}.cache-enabled": "false",
        f"{prefix}.table-default.format-version": "2",
        # Hive 2.3.10's metastore commits atomically without Hive locks (whose tables the
        # embedded metastore lacks: NEXT_LOCK_ID).
        "spark.hadoop.iceberg.engine.hive.lock-enabled": "false",
        # Iceberg mirrors each table's schema into the metastore's columns; Hive's check that
        # a column keeps a compatible type at its position refuses Iceberg's own schema
        # evolution (a dropped or moved column), as Iceberg's Hive documentation says.
        "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
        # Metastore clients Iceberg keeps per catalog (its default is 2): the stream writer
        # commits to many tables at once, and each commit holds a client for its metadata
        # refresh and its alter_table.
        f"{prefix}.clients": str(METASTORE_CLIENTS),
        # The metastore clients Iceberg opens pool their connections with DBCP (PySpark ships
        # no BoneCP, Hive's default).
        "spark.hadoop.datanucleus.connectionPoolingType": "DBCP",
        **storage.spark_conf(catalog),
    }


def lake_session(
    settings: Settings, app_name: str, extra_conf: dict[str, str] | None = None
) -> SparkSession:
    """A Spark session with the lake's Iceberg catalog (``settings.lake.catalog``)."""
    from cdc_platform.spark import build_session  # noqa: PLC0415 - imports pyspark

    storage = storage_for(settings)
    iceberg_jars(settings.stack.home.resolve() / "jars")  # build_session puts them on spark.jars
    conf = {**catalog_conf(settings.lake.catalog, storage), **(extra_conf or {})}
    log.info("lake: Iceberg catalog %r at %s", settings.lake.catalog, storage.location.uri)
    return build_session(settings, app_name, extra_conf=conf)


# -- the catalog -------------------------------------------------------------------------------

# The writer jar's (stack/jvm/writer) one-job write of many tables' data files.
BATCH_WRITE_CLASS = "io.cdcmirror.spark.IcebergBatchWrite"
# The writer jar's driver-side commit of one row replacing its partition (``replace_row``).
PROGRESS_COMMIT_CLASS = "io.cdcmirror.spark.ProgressCommit"


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def stamp() -> dict[str, str]:
    """The table properties every table cdc-mirror creates carries (``incompatibility``)."""
    return {"format-version": str(FORMAT_VERSION), LAYOUT_PROPERTY: str(LAYOUT_VERSION)}


class LakeCatalog:
    """Iceberg tables of the lake, through a session from ``lake_session``."""

    def __init__(self, spark: SparkSession, storage: LakeStorage, catalog: str) -> None:
        self.spark = spark
        self.storage = storage
        self.catalog = catalog
        # (namespace, table) → Iceberg's Java table object, for ``write_files``.
        self._tables_cache: dict[tuple[str, str], Any] = {}
        self._cache_lock = threading.Lock()

    @classmethod
    def open(cls, spark: SparkSession, settings: Settings, check: bool = True) -> LakeCatalog:
        """The catalog of ``settings``; with ``check``, the location is proven writable first."""
        lake = cls(spark, storage_for(settings), settings.lake.catalog)
        if check:
            lake.storage.check(spark)
        return lake

    @property
    def location(self) -> LakeLocation:
        return self.storage.location

    def name(self, namespace: str, table: str) -> str:
        return f"{_ident(self.catalog)}.{_ident(namespace)}.{_ident(table)}"

    def _errors(self) -> Any:
        return lake_errors(self.location, self.storage.secrets())

    def create_namespace(self, namespace: str) -> None:
        """``<location>/<namespace>.db``, registered in the metastore (repeatable)."""
        where = self.location.child(f"{namespace}.db").replace("'", "\\'")
        with self._errors():
            self.spark.sql(
                f"CREATE NAMESPACE IF NOT EXISTS {_ident(self.catalog)}.{_ident(namespace)} "
                f"LOCATION '{where}'"
            )

    def drop_namespace(self, namespace: str) -> None:
        """Drop the namespace, its tables and every file below ``<location>/<namespace>.db``.

        The tables are dropped from the metastore and the folder deleted through Hadoop's
        FileSystem, not with ``DROP TABLE … PURGE`` (Iceberg's purge runs a Spark job per
        table that stalled in local mode here)."""
        jvm: Any = self.spark.sparkContext._jvm
        where = self.location.child(f"{namespace}.db")
        with self._errors():
            # The views of the namespace's Hive database (the raw layer's per-table views in
            # Spark's session catalog): the metastore drops no database that holds any.
            if (
                self.spark.sql("SHOW NAMESPACES IN spark_catalog")
                .where(f"namespace = '{namespace}'")
                .count()
            ):
                for row in self.spark.sql(
                    f"SHOW VIEWS IN spark_catalog.{_ident(namespace)}"
                ).collect():
                    if not row.isTemporary:
                        self.spark.sql(
                            f"DROP VIEW IF EXISTS spark_catalog.{_ident(namespace)}."
                            f"{_ident(row.viewName)}"
                        )
            rows = self.spark.sql(
                f"SHOW TABLES IN {_ident(self.catalog)}.{_ident(namespace)}"
            ).collect()
            for row in rows:
                self.spark.sql(f"DROP TABLE IF EXISTS {self.name(namespace, row.tableName)}")
            self.spark.sql(f"DROP NAMESPACE IF EXISTS {_ident(self.catalog)}.{_ident(namespace)}")
            path = jvm.org.apache.hadoop.fs.Path(where)
            path.getFileSystem(self.spark._jsc.hadoopConfiguration()).delete(path, True)

    def create_table(
        self,
        namespace: str,
        table: str,
        columns: Sequence[tuple[str, str]],
        partitioned_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """An Iceberg v2 table (repeatable); ``columns`` as (name, Spark SQL type),
        ``properties``: further table properties."""
        ddl = ", ".join(f"{_ident(name)} {kind}" for name, kind in columns)
        partitions = f" PARTITIONED BY ({', '.join(partitioned_by)})" if partitioned_by else ""
        settings = {**stamp(), **(properties or {})}
        listed = ", ".join(f"'{key}'='{value}'" for key, value in settings.items())
        with self._errors():
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.name(namespace, table)} ({ddl}) USING iceberg"
                f"{partitions} TBLPROPERTIES ({listed})"
            )

    def append(
        self,
        frame: DataFrame,
        namespace: str,
        table: str,
        offsets: KafkaOffsets,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Append ``frame`` as ONE commit whose snapshot summary records ``offsets`` (and
        ``properties``): after it, ``committed_offsets`` returns them; if it fails, the table
        keeps its previous snapshot and offsets (Iceberg's atomic commit)."""
        with self._errors():
            self._writer(frame, namespace, table, offsets, properties).append()

    def replace_row(
        self,
        namespace: str,
        table: str,
        row: Mapping[str, str | int | list[str] | None],
        offsets: KafkaOffsets,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Replace the partition ``row`` (a value per column name) falls in with that one row,
        as ONE commit recording ``offsets`` (and ``properties``) like ``append``, the one
        Spark's ``overwritePartitions`` makes, written and committed on the driver through
        Iceberg's Java API (``PROGRESS_COMMIT_CLASS``): no Spark job, query analysis or table
        load for one row.
        The commit starts from a fresh read of the table (several writers share it); the
        table object is this process's (``_cached_table``)."""
        values, summary = self.java_row_commit(row, offsets, properties)
        with self._errors():
            self._jar_class(PROGRESS_COMMIT_CLASS).replacePartition(
                self._cached_table(namespace, table), values, summary
            )

    def java_row_commit(
        self,
        row: Mapping[str, str | int | list[str] | None],
        offsets: KafkaOffsets,
        properties: Mapping[str, str] | None = None,
    ) -> tuple[Any, Any]:
        """``replace_row``'s arguments as ``PROGRESS_COMMIT_CLASS`` takes them: the row and
        the snapshot summary, as Java maps."""
        jvm: Any = self.spark.sparkContext._jvm
        values = jvm.java.util.HashMap()
        for column, value in row.items():
            # A list as one text (one py4j call, not one per item: the ready days grow).
            values.put(column, list_text(value) if isinstance(value, list) else value)
        # What Spark's write of the row recorded as well.
        summary = _java_summary(
            jvm,
            offsets,
            {"spark.app.id": self.spark.sparkContext.applicationId, **(properties or {})},
        )
        return values, summary

    def ensure_properties(self, namespace: str, table: str, properties: Mapping[str, str]) -> bool:
        """Set those of ``properties`` the table lacks, in one metadata commit (retried from a
        fresh read if another commit lands first); False when it has them all (no commit). A
        value the table holds otherwise stays: an operator's ``ALTER TABLE … SET
        TBLPROPERTIES`` wins. The table object is this process's (``_cached_table``)."""
        with self._errors():
            java_table = self._cached_table(namespace, table)
            held = {str(k) for k in dict(java_table.properties())}
            missing = {k: v for k, v in properties.items() if k not in held}
            if not missing:
                return False
            update = java_table.updateProperties()
            for key, value in missing.items():
                update = update.set(key, value)
            update.commit()
        return True

    def _writer(
        self,
        frame: DataFrame,
        namespace: str,
        table: str,
        offsets: KafkaOffsets,
        properties: Mapping[str, str] | None,
    ) -> Any:
        writer = frame.writeTo(self.name(namespace, table)).option(
            f"snapshot-property.{OFFSETS_PROPERTY}", offsets.encode()
        )
        for key, value in (properties or {}).items():
            writer = writer.option(f"snapshot-property.{key}", value)
        return writer

    def write_files(
        self,
        frame: DataFrame,
        namespace: str,
        tables: Sequence[str],
        layouts: Mapping[str, int],
    ) -> StagedFiles:
        """Write the data files of ``frame`` for many ``tables`` of ``namespace`` and count
        all of its rows, in ONE Spark job, committing nothing (``StagedFiles.commit`` does, one
        commit per table; ``StagedFiles.counts`` has the counts).

        ``frame``: the input columns of ``BATCH_WRITE_CLASS`` (table, write?, day, topic,
        partition, offset, event ms, source schema, source table, then one struct column per
        column layout); ``layouts``: each of ``tables``'s struct column (its schema's names,
        order and Spark types). Rows of other tables are counted, not written."""
        jvm: Any = self.spark.sparkContext._jvm
        with self._errors():
            java_tables = jvm.java.util.HashMap()
            java_layouts = jvm.java.util.HashMap()
            for table in tables:
                java_tables.put(table, self._cached_table(namespace, table))
                java_layouts.put(table, layouts[table])
            java = self._batch_write().write(frame._jdf, java_tables, java_layouts)
        return StagedFiles(self, namespace, java)

    def _batch_write(self) -> Any:
        """``BATCH_WRITE_CLASS``; ConfigError when the stack's writer jar predates it."""
        return self._jar_class(BATCH_WRITE_CLASS)

    def _jar_class(self, name: str) -> Any:
        """The writer jar's class ``name``; ConfigError when the stack's jar predates it."""
        from py4j.java_gateway import (  # type: ignore[import-untyped]  # noqa: PLC0415 - pyspark's
            JavaClass,
        )

        found: Any = self.spark.sparkContext._jvm
        for part in name.split("."):
            found = getattr(found, part)
        if not isinstance(found, JavaClass):  # py4j's view of a class it cannot load
            raise ConfigError(
                f"the stack's writer jar has no {name}; run 'cdc-mirror stack up' "
                "to build the current one."
            )
        return found

    def check_batch_write(self) -> None:
        """ConfigError (one sentence) when the stack's writer jar lacks ``BATCH_WRITE_CLASS``
        or ``PROGRESS_COMMIT_CLASS``, or an older one is loaded: the stream writer checks
        before it reads anything."""
        self._jar_class(PROGRESS_COMMIT_CLASS)
        batch_write = self._batch_write()
        methods = {str(m.getName()) for m in batch_write._java_lang_class.getMethods()}
        if "countsJson" not in methods:
            raise ConfigError(
                f"the stack's writer jar has an older {BATCH_WRITE_CLASS}; run 'cdc-mirror "
                "stack up' to build the current one."
            )

    def _cached_table(self, namespace: str, table: str) -> Any:
        """The table's Java object, loaded once per process (or kept from the last fresh load:
        ``_keep``): an Iceberg commit refreshes its metadata before it applies (and retries on
        a conflict), so a cached object commits as safely as a fresh one and saves a metastore
        call and a metadata read per table."""
        key = (namespace, table)
        with self._cache_lock:
            cached = self._tables_cache.get(key)
        if cached is None:
            cached = self._table(namespace, table)
            with self._cache_lock:
                self._tables_cache[key] = cached
        return cached

    def _keep(self, namespace: str, table: str, java_table: Any) -> None:
        """Keep a freshly loaded table object for ``_cached_table``: the stream writer loads
        every table at start (``check_compatible``, ``committed_offsets``), and its first
        batch would otherwise load each once more, one after another, before its job."""
        with self._cache_lock:
            self._tables_cache[(namespace, table)] = java_table

    def table_names(self, namespace: str) -> set[str]:
        """The tables of ``namespace`` (one metastore call)."""
        with self._errors():
            rows = self.spark.sql(
                f"SHOW TABLES IN {_ident(self.catalog)}.{_ident(namespace)}"
            ).collect()
        return {str(row.tableName) for row in rows}

    def _table(self, namespace: str, table: str) -> Any:
        jvm: Any = self.spark.sparkContext._jvm
        name = f"{self.catalog}.{namespace}.{table}"
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, name
        )

    def committed_offsets(
        self, namespace: str, table: str, writer: str | None = None, fresh: bool = True
    ) -> KafkaOffsets | None:
        """The offsets of the newest commit in the table's current lineage that recorded
        some (commits without, e.g. compaction, are passed over) and, given ``writer``, was
        made by that writer (``WRITER_PROPERTY``); None for a table no such ``append`` has
        committed to. Read fresh from the catalog, or with ``fresh=False`` from the table as
        this process last loaded or committed it (``check_compatible`` loads every table):
        enough for a writer's own commits, which only that writer makes.
        Not for the progress table: ``cdc-mirror maintain`` expires its snapshots, a quiet
        writer's last commit with them; its row holds the same offsets
        (``cdc_platform.lake.read_writer_progress``)."""
        with self._errors():
            if fresh:
                java_table = self._table(namespace, table)
                self._keep(namespace, table, java_table)
            else:
                java_table = self._cached_table(namespace, table)
            snapshot = java_table.currentSnapshot()
            while snapshot is not None:
                summary = snapshot.summary()
                value = summary.get(OFFSETS_PROPERTY)
                if value is not None and (writer is None or summary.get(WRITER_PROPERTY) == writer):
                    return KafkaOffsets.decode(str(value))
                parent = snapshot.parentId()
                snapshot = java_table.snapshot(parent) if parent is not None else None
        return None

    def check_compatible(self, namespace: str, tables: Iterable[str]) -> None:
        """Refuse, with IncompatibleTableError (one sentence naming the table's location and
        the cause), the first of ``tables`` that exists and this version cannot use
        (``incompatibility``); a missing table passes (it will be created). The tables'
        metadata is read a few at once: a writer restarting over hundreds of tables."""
        if not self.spark.catalog.databaseExists(f"{self.catalog}.{namespace}"):
            return
        names = sorted(set(tables) & self.table_names(namespace))

        def check(table: str) -> None:
            with self._errors():
                java_table = self._table(namespace, table)
                properties = {str(k): str(v) for k, v in dict(java_table.properties()).items()}
                version = int(java_table.operations().current().formatVersion())
                # As the lake's location is written (Hadoop shortens file:/// to file:/).
                where = re.sub(r"^file:/(?!/)", "file:///", str(java_table.location()))
            cause = incompatibility(properties, version)
            if cause is not None:
                raise IncompatibleTableError(
                    f"the lake table {namespace}.{table} at {where} cannot be used: {cause}."
                )
            self._keep(namespace, table, java_table)

        if len(names) <= 1:
            for table in names:
                check(table)
            return
        with ThreadPoolExecutor(min(4, len(names)), thread_name_prefix="cdc-layout") as pool:
            for future in [pool.submit(check, table) for table in names]:
                future.result()

    def metadata_location(self, namespace: str, table: str) -> str:
        """The table's current metadata file: what another engine opens (pyiceberg's
        ``StaticTable.from_metadata``) with ``storage.file_io_properties()``."""
        with self._errors():
            return str(self._table(namespace, table).operations().current().metadataFileLocation())


class StagedFiles:
    """Data files ``LakeCatalog.write_files`` wrote for several tables, not committed yet."""

    def __init__(self, lake: LakeCatalog, namespace: str, java: Any) -> None:
        self._lake = lake
        self._namespace = namespace
        self._java = java

    @property
    def tables(self) -> set[str]:
        """The tables that got files."""
        return {str(name) for name in self._java.tables()}

    def counts(self) -> dict[str, Any]:
        """The rows' counts (``BATCH_WRITE_CLASS.countsJson``): ``groups``, one ``[table,
        day, topic, partition, rows, min offset, max offset, newest event ms or None]`` per
        table, day and Kafka partition; ``sources``, ``[table, topic, schema, table]`` per
        source table routed to a table."""
        counts: dict[str, Any] = json.loads(str(self._java.countsJson()))
        return counts

    def commit(
        self, table: str, offsets: KafkaOffsets, properties: Mapping[str, str] | None = None
    ) -> None:
        """Append the files written for ``table`` as ONE commit whose snapshot summary
        records ``offsets`` (and ``properties``), as ``LakeCatalog.append`` does; if it fails,
        the table keeps its previous snapshot. Commits of different tables may run at once."""
        jvm: Any = self._lake.spark.sparkContext._jvm
        summary = _java_summary(jvm, offsets, properties)
        with self._lake._errors():
            self._java.commit(table, self._lake._cached_table(self._namespace, table), summary)


# What precedes each item of a list passed to the writer jar as one text
# (``ProgressCommit.LIST_SEPARATOR``).
_LIST_SEPARATOR = "\u001f"


def list_text(items: Sequence[str]) -> str:
    """Pure: ``items`` as the one text ``ProgressCommit.fromListText`` reads back: each item
    preceded by U+001F ("" is the empty list); ValueError for an item holding U+001F."""
    if any(_LIST_SEPARATOR in item for item in items):
        raise ValueError(f"a list item holds U+001F, which separates the items: {items!r}")
    return "".join(_LIST_SEPARATOR + item for item in items)


def _java_summary(jvm: Any, offsets: KafkaOffsets, properties: Mapping[str, str] | None) -> Any:
    """A commit's snapshot-summary properties as a Java map: ``offsets`` and ``properties``."""
    summary = jvm.java.util.HashMap()
    summary.put(OFFSETS_PROPERTY, offsets.encode())
    for key, value in (properties or {}).items():
        summary.put(key, value)
    return summary
