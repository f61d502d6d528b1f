"""The chaos suite's Spark process: ``cdc_mirror.verify.spark_checks`` (snapshot digests of the
given days, the raw layer's Kafka coordinates) written to a JSON file, then the test's own
Hive databases dropped, so the suite starts one Spark session for both.

Usage: spark_job.py --table T --output FILE [--dt D ...] [--drop DATABASE ...]
(configured by the suite's ``CDC_MIRROR_…`` variables). ``--drop`` alone only drops.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from cdc_mirror.verify import CHECK_SPARK_CONF, spark_checks
from cdc_platform.config import load_settings
from cdc_platform.iceberg import lake_session


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--dt", action="append", default=[])
    parser.add_argument("--drop", action="append", default=[])
    args = parser.parse_args()
    settings = load_settings()
    spark = lake_session(settings, "chaos-spark-job", CHECK_SPARK_CONF)
    try:
        if args.table:
            found = spark_checks(spark, settings, args.table, args.dt, raw=True)
            args.output.write_bytes(orjson.dumps(found.to_json()))
        for database in args.drop:
            spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
