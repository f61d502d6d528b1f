"""The merge on an S3 lake (the stack's SeaweedFS, started once if it is not running): the raw
layer and the snapshot table in a bucket, two days merged and one merged again on a branch,
each day's tag equal to MySQL. The rest of the merge's behaviour does not depend on the
storage and is tested on local disk (``test_merge.py``); the catalog itself is tested on every
storage in ``tests/integration/lake``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from cdc_platform.lake_snapshots import day_tag
from merge.job import Merger, MergeRequest
from tests.integration.lake.conftest import with_lake
from tests.integration.merge.harness import Shop, snapshot_rows
from tests.integration.merge.test_merge import (
    DAY1,
    DAY2,
    assert_snapshot_equals_mysql,
    merged_first_day,
    random_day,
)


@pytest.fixture(scope="module")
def merge_stack(local_stack: Settings) -> Iterator[Settings]:
    """The module's merges on ``s3://<local bucket>/cdc-tests/merge-<tag>``."""
    from stack.manager import LocalStack

    stack = LocalStack(local_stack)
    done = stack.up(["seaweedfs"])
    location = f"s3://{LOCAL_S3_BUCKET}/cdc-tests/merge-{uuid.uuid4().hex[:8]}"
    yield with_lake(local_stack, location, "lake_s3")
    started_here = [name for name, what in done.items() if what == "started"]
    if started_here and os.environ.get("CDC_MIRROR_TESTS_STOP_STACK") == "1":
        stack.down(started_here)


def test_days_merged_and_merged_again_on_s3(spark: Any, shop: Shop) -> None:
    settings = shop.merge_settings(check=False, buckets=2)
    assert settings.lake_location.kind == "s3"
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
    assert paths and all(row["file_path"].startswith("s3://") for row in paths)
