"""Tagged days of a snapshot table as other readers and later schemas see them: a second
engine (pyiceberg) reading a day's tag, merge-on-read delete files included, and the days
before a MySQL column was dropped or renamed."""

from __future__ import annotations

from typing import Any

from cdc_platform.lake_snapshots import day_tag
from merge.job import Merger, MergeRequest
from tests.integration.lake.second_engine import pyiceberg_properties
from tests.integration.merge.harness import Shop
from tests.integration.merge.test_merge import DAY1, DAY2, during, history, merged_first_day


def test_a_second_engine_reads_a_tagged_day_as_spark_does(spark: Any, shop: Shop) -> None:
    """pyiceberg opens the snapshot table from its metadata file and reads each day at its
    tag's snapshot: the same rows as Spark's ``VERSION AS OF 'dt-D'``, with the delete files
    merge-on-read wrote applied."""
    from pyiceberg.table import StaticTable

    settings = shop.merge_settings(check=False, buckets=2)
    merger = Merger(settings, spark)
    try:
        placed = merged_first_day(spark, shop, merger, 10)
        shop.start_day(DAY2)
        for order_no in sorted(placed)[:8]:
            shop.update(placed[order_no], order_no)
        gone = sorted(placed)[8]
        shop.delete(placed.pop(gone), gone)
        shop.write_raw(spark, DAY2)
        merger.merge(MergeRequest(shop.table, DAY2))
        name = merger.store.name(shop.table)
        deletes = spark.sql(
            f"SELECT count(*) AS n FROM {name}.delete_files VERSION AS OF '{day_tag(DAY2)}'"
        ).first()
        assert deletes is not None and deletes["n"] > 0  # the case under test: deletes to apply

        state = merger.store.state(shop.table)
        table = StaticTable.from_metadata(
            merger.store.lake.metadata_location(settings.merge.database, shop.table),
            pyiceberg_properties(settings),
        )
        for day in (DAY1, DAY2):
            by_spark = spark.sql(
                f"SELECT * FROM {name} VERSION AS OF '{day_tag(day)}' ORDER BY order_no"
            ).toArrow()
            by_pyiceberg = table.scan(snapshot_id=state.days[day]).to_arrow().sort_by("order_no")
            assert by_pyiceberg.column_names == by_spark.column_names
            assert by_pyiceberg.to_pylist() == by_spark.to_pylist(), day
        assert gone not in by_pyiceberg.column("order_no").to_pylist()
    finally:
        merger.close()


def test_a_dropped_and_a_renamed_column_keep_the_days_before_readable(
    spark: Any, shop: Shop
) -> None:
    """MySQL drops ``legacy`` and renames ``ref_old`` to ``ref_new`` on DAY2 (information_schema
    shows a rename as a drop and an add: docs/merge.md "Schema changes"). The snapshot keeps
    both old columns in place, NULL in rows changed after; DAY1's tag keeps its columns and
    values; the new column has the values of the rows changed after."""
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    try:
        shop.on_every_shard(
            "ALTER TABLE `{schema}`.`{table}` ADD COLUMN legacy VARCHAR(16) NULL, "
            "ADD COLUMN ref_old INT NULL DEFAULT 7"
        )
        placed = history(shop, 4)
        # Before the history read: in DAY1's MOCK rows.
        shop.on_every_shard(
            "UPDATE `{schema}`.`{table}` SET legacy = concat('L', id), ref_old = id"
        )
        shop.start_day(DAY1)
        shop.mock_replay(shop._second)
        shop.write_raw(spark, DAY1)
        merger.merge(MergeRequest(shop.table, DAY1))
        name = merger.store.name(shop.table)
        columns = "order_no, legacy, ref_old"
        tag1 = f"{name} VERSION AS OF '{day_tag(DAY1)}'"
        day1 = spark.sql(f"SELECT {columns} FROM {tag1} ORDER BY order_no").collect()
        assert all(row["legacy"] and row["ref_old"] for row in day1)

        shop.start_day(DAY2)
        shop.on_every_shard(
            "ALTER TABLE `{schema}`.`{table}` DROP COLUMN legacy, RENAME COLUMN ref_old TO ref_new"
        )
        untouched, changed = sorted(placed)[:2]
        shop.update(placed[changed], changed)
        fresh = shop.insert(1, during(DAY2, shop.rng))
        shop.write_raw(spark, DAY2)
        result = merger.merge(MergeRequest(shop.table, DAY2))

        assert sorted(result.schema.dropped_kept) == ["legacy", "ref_old"]
        assert result.schema.added == ["ref_new"]
        # DAY1's tag: its own columns and values, whatever main's schema is now.
        assert spark.sql(f"SELECT {columns} FROM {tag1} ORDER BY order_no").collect() == day1
        before = {row["order_no"]: row for row in day1}
        today = {
            row["order_no"]: row
            for row in spark.sql(
                f"SELECT order_no, legacy, ref_old, ref_new FROM {name} "
                f"VERSION AS OF '{day_tag(DAY2)}'"
            ).collect()
        }
        with shop.connect() as cursor:
            mysql = {}
            for schema, table in shop.shards():
                cursor.execute(f"SELECT order_no, ref_new FROM `{schema}`.`{table}`")
                mysql.update({row["order_no"]: row["ref_new"] for row in cursor.fetchall()})
        assert sorted(today) == sorted(mysql)
        # Carried over: the old columns' values, the new one NULL (not in its messages).
        carried = today[untouched]
        assert (carried["legacy"], carried["ref_old"], carried["ref_new"]) == (
            before[untouched]["legacy"],
            before[untouched]["ref_old"],
            None,
        )
        # Changed or inserted after the drop: the old columns NULL, the new one MySQL's.
        assert mysql[changed] == before[changed]["ref_old"] and mysql[fresh] == 7
        for key in (changed, fresh):
            row = today[key]
            assert (row["legacy"], row["ref_old"], row["ref_new"]) == (None, None, mysql[key]), key
    finally:
        merger.close()
