"""First Spark job of tests/integration/test_spark_hive.py (a process of its own).

Reads a Kafka topic with Spark's Kafka source (batch, earliest to latest offsets), parses the
SimpleBinlog JSON and writes a partitioned Hive table through the shared metastore. Then it
prints ``READY <rows>`` and keeps its SparkSession open until its stdin is closed, so a
second Spark process can query the table while this one still holds its metastore client.

Usage: kafka_to_hive.py <topic> <database> <table>
"""

from __future__ import annotations

import sys

from pyspark.sql import functions as F

from cdc_platform.config import load_settings
from cdc_platform.spark import build_session
from stream_writer.transform import MESSAGE_SCHEMA


def main(topic: str, database: str, table: str) -> int:
    settings = load_settings()
    spark = build_session(
        settings, f"test-kafka-to-hive-{table}", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        raw = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
            .option("kafka.isolation.level", "read_committed")
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("failOnDataLoss", "true")
            .load()
        )
        value = F.col("value").cast("string")
        rows = (
            raw.select(
                # The lake writer's own message schema (row images stay JSON text).
                F.from_json(value, MESSAGE_SCHEMA).alias("m"),
                F.col("partition").alias("kafkaPartition"),
                F.col("offset").alias("kafkaOffset"),
            )
            .select("m.*", "kafkaPartition", "kafkaOffset")
            .withColumn(
                "dt",
                F.date_format(F.timestamp_millis(F.col("executeTime")), "yyyy-MM-dd"),
            )
        )
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        (
            rows.write.format("parquet")
            .mode("overwrite")
            .partitionBy("dt")
            .saveAsTable(f"{database}.{table}")
        )
        written = spark.table(f"{database}.{table}").count()
        print(f"READY {written}", flush=True)
        # Hold the session (and its metastore connection) open until the test says so.
        sys.stdin.read()
    finally:
        spark.stop()
    print("STOPPED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
