"""Where a benchmark puts its lake: the local folder, or a prefix of its own on the stack's HDFS
or SeaweedFS S3 (started by ``cdc-mirror stack up hdfs-namenode hdfs-datanode`` /
``seaweedfs``), and the figure keys and labels per storage.

Shared by the stream writer's and the merge's benchmarks, so both address the same storages
the same way and bench.report can judge each storage's figures on their own rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STORAGES = ("local", "s3", "hdfs")


def figure_key(component: str, name: str, storage: str) -> str:
    """Pure: a figure's key; the local lake's keep their unsuffixed names (earlier runs)."""
    return f"{component}.{name}" if storage == "local" else f"{component}.{name}_{storage}"


def storage_label(storage: str) -> str:
    return {"local": "local disk", "s3": "S3 (SeaweedFS)", "hdfs": "HDFS"}[storage]


def lake_location(storage: str, work: Path, name: str) -> str:
    """The lake of the run: ``work/lake`` locally, else ``bench/<name>`` on HDFS or S3 (a
    prefix of its own per run, so runs neither meet nor depend on each other's leftovers)."""
    from cdc_platform.lake_location import LOCAL_S3_BUCKET
    from stack import hdfs

    return {
        "local": str(work / "lake"),
        "s3": f"s3://{LOCAL_S3_BUCKET}/bench/{name}",
        "hdfs": f"{hdfs.uri()}/bench/{name}",
    }[storage]


def delete_location(spark: Any, location: str) -> None:
    """Delete the run's whole prefix through Hadoop's FileSystem (the session's S3/HDFS
    settings), once its namespaces are dropped: what those leave (the prefix folder on HDFS,
    files of a run that failed half-way) must not pile up on the shared stack."""
    jvm = spark.sparkContext._jvm
    # s3:// is mapped to S3A by the session (cdc_platform.iceberg), as the lake's tables are.
    path = jvm.org.apache.hadoop.fs.Path(location)
    path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(path, True)
