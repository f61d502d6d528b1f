"""Spark job of the stream writer tests (a process of its own): reads every table of a lake
database through the Iceberg catalog on the shared metastore, as any downstream reader
would, and prints one line ``RESULT {json}``: per table its days (``dt``), its rows' Kafka
coordinates, days and row keys, and the Kafka offsets its newest commit records; for the
dead-letter table the coordinates and errors; for the progress table the writer's rows.
``--drop`` then drops the database and its files (it belongs to the test alone).

Usage: query_lake.py <database> [--drop]
"""

from __future__ import annotations

import json
import sys

from cdc_platform.config import load_settings
from cdc_platform.iceberg import LakeCatalog, lake_session
from cdc_platform.lake import PROGRESS_TABLE


def main(database: str, drop: bool) -> int:
    settings = load_settings()
    spark = lake_session(
        settings, f"test-query-lake-{database}", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        lake = LakeCatalog.open(spark, settings, check=False)
        result: dict[str, object] = {}
        for table in sorted(lake.table_names(database)):
            frame = spark.table(lake.name(database, table))
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
            offsets = lake.committed_offsets(database, table)
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
