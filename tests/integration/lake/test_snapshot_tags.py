"""The snapshot tables' day and hour tags read without Spark (``cdc_platform.snapshot_tags``,
what the scheduler asks once a pass): the metastore's metadata location and the metadata file
on the storage, set by Spark's ``CREATE TAG`` as merge sets them; on HDFS through the
NameNode's WebHDFS API (``lake.webhdfs``)."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from cdc_platform.iceberg import LakeCatalog
from cdc_platform.lake_snapshots import FACTS_PREFIX
from cdc_platform.snapshot_tags import SnapshotTagReader, SnapshotTags
from tests.integration.lake.conftest import LakeSpark

COLUMNS = (("id", "BIGINT"), ("name", "STRING"))


@pytest.mark.parametrize("kind", ["local", "hdfs", "s3"])
def test_the_tags_of_each_table_are_read_without_spark(lake_spark: LakeSpark, kind: str) -> None:
    spark = lake_spark.spark
    ns = f"lk_{uuid.uuid4().hex[:10]}"
    base = lake_spark.settings[kind]
    settings = base.model_copy(update={"merge": base.merge.model_copy(update={"database": ns})})
    catalog = LakeCatalog.open(spark, settings)
    catalog.create_namespace(ns)
    try:
        catalog.create_table(ns, "orders", COLUMNS)
        catalog.create_table(ns, "users", COLUMNS)
        orders = catalog.name(ns, "orders")
        spark.sql(f"INSERT INTO {orders} VALUES (1, 'a')")
        spark.sql(f"ALTER TABLE {orders} CREATE TAG `hr-2026-11-26-03`")
        spark.sql(f"ALTER TABLE {orders} CREATE TAG `dt-2026-11-25`")
        spark.sql(f"ALTER TABLE {orders} CREATE BRANCH `merge-work`")  # not a tag
        reader = SnapshotTagReader(settings)

        tags = reader.tags(["orders", "users", "never_created"])

        [committed_ms] = {
            row.committed_at.timestamp() * 1000
            for row in spark.sql(f"SELECT committed_at FROM {orders}.snapshots").collect()
        }
        assert tags["orders"] == SnapshotTags(
            {date(2026, 11, 25): int(committed_ms)},
            {(date(2026, 11, 26), 3): int(committed_ms)},
        )
        assert tags["users"] == SnapshotTags()
        assert tags["never_created"] == SnapshotTags()

        # A tag set later (a new metadata file) is seen at the next look.
        spark.sql(f"INSERT INTO {orders} VALUES (2, 'b')")
        spark.sql(f"ALTER TABLE {orders} CREATE TAG `hr-2026-11-26-04`")
        hours = reader.tags(["orders"])["orders"].hours
        assert sorted(hours) == [(date(2026, 11, 26), 3), (date(2026, 11, 26), 4)]
        assert hours[(date(2026, 11, 26), 4)] > hours[(date(2026, 11, 26), 3)]

        # The merge facts stored with a day's tag (a table property of the same metadata
        # file) say whether its merge was provisional (--skip-readiness).
        facts = f"{FACTS_PREFIX}dt-2026-11-25"
        spark.sql(
            f"""ALTER TABLE {orders} SET TBLPROPERTIES ('{facts}'='{{"provisional": true}}')"""
        )
        assert reader.tags(["orders"])["orders"].provisional == {date(2026, 11, 25): True}
    finally:
        catalog.drop_namespace(ns)
