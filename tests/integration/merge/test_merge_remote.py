"""The merge on a remote lake: S3 (the stack's SeaweedFS) in every run, HDFS as well with
``CDC_TEST_HDFS=1`` (each storage's services started once if they are not running): the raw
layer and the snapshot table there, two days merged and one merged again on a branch, each
day's tag equal to MySQL, its files on that storage; and the hourly snapshots' scenario of
``test_hourly.py`` (the raw commits read incrementally for late rows, the hour tags; without
its checks and retention, which the storage does not change) in the same Spark session,
and the check's ``stalled`` flag from the check stored with the previous tag there; and the
day read through ``cdc-mirror sql-server`` (Spark's Thrift server) with beeline
(``test_sql_server.py``'s scenario). The rest of the merge's behaviour does not depend on the
storage and is tested on local disk (``test_merge.py``); maintenance runs on each storage
(``test_maintenance.py``), the catalog itself in ``tests/integration/lake``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake_snapshots import day_tag
from merge.job import Merger, MergeRequest
from tests.integration.lake.conftest import TESTED_STORAGES
from tests.integration.merge.conftest import lake_on
from tests.integration.merge.harness import Shop, snapshot_rows
from tests.integration.merge.test_hourly import hourly_snapshots_scenario
from tests.integration.merge.test_merge import (
    DAY1,
    DAY2,
    assert_snapshot_equals_mysql,
    merged_first_day,
    random_day,
    stalled_without_local_records,
)
from tests.integration.merge.test_sql_server import thrift_query_scenario


@pytest.fixture(scope="module", params=[kind for kind in TESTED_STORAGES if kind != "local"])
def merge_stack(request: pytest.FixtureRequest, local_stack: Settings) -> Iterator[Settings]:
    """The module's merges under a prefix of their own on each remote storage."""
    yield from lake_on(local_stack, request.param)


def test_days_merged_and_merged_again_on_a_remote_lake(spark: Any, shop: Shop) -> None:
    settings = shop.merge_settings(check=False, buckets=2)
    kind = settings.lake_location.kind
    assert kind != "local"
    merger = Merger(settings, spark)
    placed = merged_first_day(spark, shop, merger, 20)
    day1 = snapshot_rows(spark, settings, shop.table, DAY1)
    shop.start_day(DAY2)
    random_day(shop, DAY2, placed, 20)
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    assert second.mode == "merge"
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)

    again = merger.merge(MergeRequest(shop.table, DAY2))
    assert again.mode == "re-merge"
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    assert snapshot_rows(spark, settings, shop.table, DAY1) == day1
    name = merger.store.name(shop.table)
    paths = spark.sql(
        f"SELECT file_path FROM {name}.files VERSION AS OF '{day_tag(DAY2)}'"
    ).collect()
    assert paths and all(row["file_path"].startswith(f"{kind}://") for row in paths)


def test_hourly_snapshots_on_a_remote_lake(spark: Any, shop: Shop) -> None:
    assert shop.merge_settings().lake_location.kind != "local"
    hourly_snapshots_scenario(spark, shop, storage_only=True)


def test_the_check_is_stalled_by_the_previous_tag_on_a_remote_lake(spark: Any, shop: Shop) -> None:
    assert shop.merge_settings().lake_location.kind != "local"
    stalled_without_local_records(spark, shop)


def test_snapshot_through_the_thrift_server_on_a_remote_lake(
    spark: Any, shop: Shop, tmp_path: Path
) -> None:
    assert shop.merge_settings().lake_location.kind != "local"
    thrift_query_scenario(spark, shop, tmp_path)
