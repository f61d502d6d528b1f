"""Fixtures of the merge tests: one Spark session with the lake's Iceberg catalog (on the
stack's PostgreSQL metastore) per test module, and a ``Shop`` per test: its own MariaDB shard
databases, lake directory, raw and snapshot namespaces and warehouse schema, dropped
afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from cdc_platform.config import Settings
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from tests.integration.lake.conftest import storage_services, with_lake
from tests.integration.merge.harness import Shop, unique_prefix
from tests.integration.mirror.targets import pg_connect


@pytest.fixture(scope="module")
def merge_stack(local_stack: Settings) -> Settings:
    """The settings a module's merges run with: the local lake (a module may override it with
    another storage: ``lake_on``)."""
    return local_stack


def lake_on(local_stack: Settings, kind: str) -> Iterator[Settings]:
    """``local_stack`` with the lake on storage ``kind``: each test's own folder on local
    disk (the default), a prefix of the module's own on the stack's SeaweedFS or HDFS, whose
    services are started once."""
    if kind == "local":
        yield local_stack
        return
    from stack import hdfs

    tag = uuid.uuid4().hex[:8]
    location = {
        "s3": f"s3://{LOCAL_S3_BUCKET}/cdc-tests/merge-{tag}",
        "hdfs": f"{hdfs.uri()}/cdc-tests/merge-{tag}",
    }[kind]
    for _ in storage_services(local_stack, [kind]):
        yield with_lake(local_stack, location, f"lake_{kind}")


@pytest.fixture(scope="module")
def spark(
    local_stack: Settings, merge_stack: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    from cdc_platform.iceberg import S3Storage, lake_session, storage_for

    lake = tmp_path_factory.mktemp("merge-lake")
    scoped = merge_stack.model_copy(
        update={"spark": merge_stack.spark.model_copy(update={"lake_dir": lake})}
    )
    # S3A's settings for the stack's SeaweedFS in every module's session, whatever its
    # storage: the embedded metastore keeps, per JVM thread, the Hadoop settings of the first
    # session that used it (Hive's HMSHandler), and a later module on S3 needs them there.
    s3 = storage_for(with_lake(local_stack, f"s3://{LOCAL_S3_BUCKET}/cdc-tests", "lake_s3"))
    assert isinstance(s3, S3Storage)
    conf = {f"spark.hadoop.{key}": value for key, value in s3.hadoop_conf().items()}
    session = lake_session(scoped, "cdc-mirror-merge-tests", extra_conf=conf)
    yield session
    session.stop()


@pytest.fixture
def shop(merge_stack: Settings, spark: Any, tmp_path: Path) -> Iterator[Shop]:
    prefix = unique_prefix()
    tag = uuid.uuid4().hex[:8]
    shop = Shop(
        settings=merge_stack,
        prefix=prefix,
        lake=tmp_path / "lake",
        raw_database=f"mg_raw_{tag}",
        writer=f"test-{tag}",
        spark_session=spark,
    )
    shop.create()
    yield shop
    shop.drop()
    lake = shop.lake_catalog(spark)
    for namespace in (shop.raw_database, f"{shop.raw_database}_snap"):
        if spark.catalog.databaseExists(f"{lake.catalog}.{namespace}"):
            lake.drop_namespace(namespace)
    spark.sql(f"DROP DATABASE IF EXISTS spark_catalog.{shop.raw_database}_snap_dt CASCADE")
    with pg_connect(merge_stack) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(f"{shop.raw_database}_pg")
            )
        )
