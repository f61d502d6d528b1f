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
from tests.integration.merge.harness import Shop, unique_prefix
from tests.integration.mirror.targets import pg_connect


@pytest.fixture(scope="module")
def merge_stack(local_stack: Settings) -> Settings:
    """The settings a module's merges run with: the local lake (a module may override it with
    another storage)."""
    return local_stack


@pytest.fixture(scope="module")
def spark(merge_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from cdc_platform.iceberg import lake_session

    lake = tmp_path_factory.mktemp("merge-lake")
    scoped = merge_stack.model_copy(
        update={"spark": merge_stack.spark.model_copy(update={"lake_dir": lake})}
    )
    session = lake_session(scoped, "cdc-mirror-merge-tests")
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
