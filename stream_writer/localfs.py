"""Which Hadoop filesystem the stream writer uses for ``file:`` paths.

PyPI's pyspark ships no libhadoop, and without it Hadoop's local filesystem runs ``chmod`` in a
child process for every file and directory it creates (``RawLocalFileSystem.setPermission``;
no configuration switch avoids it): ~10-20 ms each here, with ~200 files a batch. The
repository's ``stack/jvm/writer`` module (built by ``cdc-mirror stack up`` into
``<stack.home>/jars/spark/``, on every job's classpath) holds the same filesystems setting the
mode bits with ``java.nio`` in the JVM:

* ``NioLocalFileSystem``: Hadoop's default local filesystem (with checksum files), for the
  whole session (``spark.hadoop.fs.file.impl``): checkpoints, the metastore's directories,
  the Iceberg tables' data and metadata files on a local lake;
* ``NioRawLocalFileSystem``: the same without checksum files (in the jar; the writer no
  longer selects it, since Iceberg writes the data files through the session's filesystem).

Only ``file:`` is affected; a lake on HDFS or S3 keeps its own filesystem. Without the jar
(a machine whose stack predates it) Hadoop's own classes are used, more slowly.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

JAR_GLOB = "cdc-mirror-writer-jvm-*.jar"
NIO_LOCAL_FS = "io.cdcmirror.hadoop.NioLocalFileSystem"
NIO_RAW_LOCAL_FS = "io.cdcmirror.hadoop.NioRawLocalFileSystem"
HADOOP_RAW_LOCAL_FS = "org.apache.hadoop.fs.RawLocalFileSystem"


def has_nio_jar(spark_jars_dir: Path) -> bool:
    return any(spark_jars_dir.glob(JAR_GLOB))


def session_conf(nio_available: bool) -> dict[str, str]:
    """Pure: the Spark session settings for ``file:`` paths."""
    return {"spark.hadoop.fs.file.impl": NIO_LOCAL_FS} if nio_available else {}


def session_conf_for(spark_jars_dir: Path) -> dict[str, str]:
    """``session_conf`` for the jars a session will load; says so when the jar is missing."""
    available = has_nio_jar(spark_jars_dir)
    if not available:
        log.warning(
            "%s has no %s: Hadoop's local filesystem forks chmod for every file (slower); "
            "run 'cdc-mirror stack up' to build it",
            spark_jars_dir,
            JAR_GLOB,
        )
    return session_conf(available)


def nio_in_session(hadoop_file_impl: str | None) -> bool:
    """Pure: whether a session was started with the java.nio filesystem (so its jar loads)."""
    return hadoop_file_impl == NIO_LOCAL_FS
