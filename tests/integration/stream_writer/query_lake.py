"""Spark job of the stream writer tests (a process of its own): reads every logical table of
a lake database, as any downstream reader would, through its view (``<database>.<table>`` in
the session catalog) and through the raw table ``_cdc_changes`` filtered by ``logicalTable``
(the two must agree), and prints one line ``RESULT {json}``: per logical table its days
(``dt``), its rows' Kafka coordinates, days and row keys, and the Kafka offsets the raw
table's newest commit records; for the dead-letter table the coordinates and errors; for the
progress table the writer's rows. ``--drop`` then drops the database, its views and its
files (it belongs to the test alone).

Usage: query_lake.py <database> [--drop]
"""

from __future__ import annotations

import json
import sys

from cdc_platform.config import load_settings
from cdc_platform.iceberg import LakeCatalog, lake_session
from cdc_platform.lake import (
    LOGICAL_TABLE_COLUMN,
    PROGRESS_TABLE,
    RAW_TABLE,
    raw_table_condition,
    table_columns,
)


def main(database: str, drop: bool) -> int:
    settings = load_settings()
    spark = lake_session(
        settings, f"test-query-lake-{database}", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        lake = LakeCatalog.open(spark, settings, check=False)
        result: dict[str, object] = {}
        raw = lake.name(database, RAW_TABLE)
        tables = (
            {
                str(r[0])
                for r in spark.sql(f"SELECT DISTINCT {LOGICAL_TABLE_COLUMN} FROM {raw}").collect()
            }
            if RAW_TABLE in lake.table_names(database)
            else set()
        )
        if PROGRESS_TABLE in lake.table_names(database):
            tables.add(PROGRESS_TABLE)
        for table in sorted(tables):
            if table == PROGRESS_TABLE:
                frame = spark.table(lake.name(database, table))
            else:
                columns = [name for name, _ in table_columns(table)]
                frame = spark.table(raw).where(raw_table_condition(table)).select(*columns)
                view = spark.table(f"spark_catalog.`{database}`.`{table}`")
                assert view.columns == columns, (table, view.columns)
                assert view.exceptAll(frame).count() == 0 == frame.exceptAll(view).count(), (
                    f"the view of {table} does not show the raw table's rows"
                )
            if table == PROGRESS_TABLE:
                result[table] = {
                    "rows": [
                        [r["writer"], r["batch_id"], r["ready_days"], json.loads(r["state"])]
                        for r in frame.collect()
                    ]
                }
                continue
            if table == "dead_letter":
                rows = [
                    [r["kafkaPartition"], r["kafkaOffset"], r["error"], r["dt"]]
                    for r in frame.collect()
                ]
            else:
                rows = [
                    [
                        r["kafkaPartition"],
                        r["kafkaOffset"],
                        r["binlogOffset"],
                        r["dt"],
                        r["kafkaTopic"],
                        r["schemaName"],
                        r["tableName"],
                        json.loads(r["content"])["id"],
                    ]
                    for r in frame.collect()
                ]
            offsets = lake.committed_offsets(database, RAW_TABLE)
            result[table] = {
                "days": sorted({row[-1] if table == "dead_letter" else row[3] for row in rows}),
                "rows": rows,
                "offsets": None
                if offsets is None
                else {f"{t}:{p}": o for (t, p), o in offsets.next_offsets.items()},
            }
        print("RESULT " + json.dumps(result), flush=True)
        if drop:
            lake.drop_namespace(database)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--drop" in sys.argv[2:]))
