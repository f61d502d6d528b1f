"""Spark job of the stream writer tests (a process of its own): reads every table of a Hive
database through the shared metastore, as any downstream reader would, and prints one line
``RESULT {json}``: per table its partitions and its rows' Kafka coordinates, file names and
row keys; for the dead-letter table the coordinates and errors. ``--drop`` then drops the
database (CASCADE: it belongs to the test alone).

Usage: query_lake.py <database> [--drop]
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import functions as F

from cdc_platform.config import load_settings
from cdc_platform.spark import build_session


def main(database: str, drop: bool) -> int:
    settings = load_settings()
    spark = build_session(
        settings, f"test-query-lake-{database}", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        result: dict[str, object] = {}
        for row in spark.sql(f"SHOW TABLES IN {database}").collect():
            table = row["tableName"]
            qualified = f"{database}.{table}"
            partitions = [r[0] for r in spark.sql(f"SHOW PARTITIONS {qualified}").collect()]
            frame = spark.table(qualified).withColumn(
                "file", F.element_at(F.split(F.input_file_name(), "/"), -1)
            )
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
                        r["file"],
                        r["schemaName"],
                        r["tableName"],
                        json.loads(r["content"])["id"],
                    ]
                    for r in frame.collect()
                ]
            result[table] = {"partitions": partitions, "rows": rows}
        print("RESULT " + json.dumps(result), flush=True)
        if drop:
            spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--drop" in sys.argv[2:]))
