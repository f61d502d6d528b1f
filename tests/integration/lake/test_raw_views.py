"""The per-logical-table views of the raw table (``cdc_platform.lake.RawViews``): the first by
``CREATE VIEW``, the next ones as copies of its catalog entry. Both kinds show exactly their
table's rows, with the same text; the copy's field order is the one of this Spark."""

from __future__ import annotations

import uuid

from cdc_platform.iceberg import LakeCatalog
from cdc_platform.lake import (
    DEAD_LETTER_TABLE,
    RAW_TABLE,
    RawViews,
    copyable_view_entry,
    raw_view_query,
)
from tests.integration.lake.conftest import LakeSpark
from tests.support.raw_layer import append_raw


def test_copied_views_show_their_tables_rows_like_made_ones(lake_spark: LakeSpark) -> None:
    spark = lake_spark.spark
    lake = LakeCatalog.open(spark, lake_spark.settings["local"])
    database = f"rv_{uuid.uuid4().hex[:10]}"
    lake.create_namespace(database)
    try:
        for table, ids in (("shop_orders", [1, 2]), ("shop_items", [7]), ("shop_users", [9])):
            frame = spark.createDataFrame(
                [(i, f"{table}-{i}", "2026-11-25") for i in ids],
                "binlogOffset BIGINT, content STRING, dt STRING",
            )
            append_raw(lake, database, table, frame)
        catalog_table = lake.name(database, RAW_TABLE)
        views = RawViews(spark, catalog_table, database)
        for table in ("shop_orders", "shop_items", DEAD_LETTER_TABLE, "shop_users"):
            views.make(table)

        # This Spark's CatalogTable is of the order the copy expects: the later views were
        # copied, not made by SQL (else the fast path would be gone without a word).
        entry = (
            spark._jsparkSession.sessionState()
            .catalog()
            .getTableRawMetadata(views._identifier("shop_items"))
        )
        assert copyable_view_entry(entry)
        assert views._template is not None
        for table, ids in (("shop_orders", [1, 2]), ("shop_items", [7]), ("shop_users", [9])):
            rows = spark.sql(
                f"SELECT binlogOffset, content, dt FROM spark_catalog.`{database}`.`{table}`"
            ).collect()
            assert sorted(r.binlogOffset for r in rows) == ids
            assert {r.content for r in rows} == {f"{table}-{i}" for i in ids}
            text = spark.sql(f"SHOW CREATE TABLE spark_catalog.`{database}`.`{table}`").first()[0]
            assert raw_view_query(catalog_table, table) in text
        assert (
            spark.sql(f"SELECT * FROM spark_catalog.`{database}`.`{DEAD_LETTER_TABLE}`").count()
            == 0
        )
    finally:
        lake.drop_namespace(database)


class _Entry:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def productArity(self) -> int:
        return len(self.names)

    def productElementName(self, index: int) -> str:
        return self.names[index]


def test_an_entry_of_another_field_order_is_not_copied() -> None:
    names = [f"field{i}" for i in range(21)]
    names[0], names[8], names[13], names[20] = (
        "identifier",
        "createTime",
        "viewText",
        "viewOriginalText",
    )
    assert copyable_view_entry(_Entry(names))
    moved = [*names]
    moved[13], moved[14] = moved[14], moved[13]
    assert not copyable_view_entry(_Entry(moved))
    assert not copyable_view_entry(_Entry([*names, "extra"]))
