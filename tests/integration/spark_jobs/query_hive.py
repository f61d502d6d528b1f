"""Second Spark job of tests/integration/test_spark_hive.py (a process of its own).

Queries the Hive table written by kafka_to_hive.py through the shared metastore and prints
one JSON line (``RESULT {...}``) with the totals and the count per source table. With
``--drop`` it then drops the table and, if nothing else is in it, the database; with
``--drop-only`` it only does that (the test's clean-up after a failure).

Usage: query_hive.py <database> <table> [--drop | --drop-only]
"""

from __future__ import annotations

import json
import sys

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from cdc_platform.config import load_settings
from cdc_platform.spark import build_session


def drop_table(spark: SparkSession, database: str, table: str) -> None:
    """Drop the test table, and its database if nothing else is left in it."""
    spark.sql(f"DROP TABLE IF EXISTS {database}.{table}")
    try:
        # Not CASCADE: another test run may be using the same database right now.
        spark.sql(f"DROP DATABASE IF EXISTS {database} RESTRICT")
    except AnalysisException as exc:
        print(f"database {database} kept: {exc}", file=sys.stderr, flush=True)
    print("DROPPED", flush=True)


def main(database: str, table: str, mode: str) -> int:
    settings = load_settings()
    spark = build_session(
        settings, f"test-query-hive-{table}", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        if mode == "--drop-only":
            drop_table(spark, database, table)
            return 0
        qualified = f"{database}.{table}"
        total, distinct_offsets, with_content = spark.sql(
            f"SELECT count(*), count(DISTINCT binlogOffset), count(content) FROM {qualified}"
        ).first()
        per_table = {
            f"{row[0]}.{row[1]}": row[2]
            for row in spark.sql(
                f"SELECT schemaName, tableName, count(*) FROM {qualified} "
                "GROUP BY schemaName, tableName"
            ).collect()
        }
        partitions = [row[0] for row in spark.sql(f"SHOW PARTITIONS {qualified}").collect()]
        result = {
            "count": total,
            "distinct_offsets": distinct_offsets,
            "with_content": with_content,
            "per_table": per_table,
            "partitions": partitions,
        }
        print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
        if mode == "--drop":
            drop_table(spark, database, table)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
