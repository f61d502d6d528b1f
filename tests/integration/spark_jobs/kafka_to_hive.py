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
from pyspark.sql.types import LongType, StringType, StructField, StructType

from simple_binlog.config import load_settings
from simple_binlog.spark import build_session

# The top-level fields of a SimpleBinlog message; row images stay JSON strings.
SCHEMA = StructType(
    [
        StructField("version", LongType()),
        StructField("binlogOffset", LongType()),
        StructField("executeTime", LongType()),
        StructField("eventType", StringType()),
        StructField("schemaName", StringType()),
        StructField("tableName", StringType()),
        StructField("source", StringType()),
    ]
)


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
                F.from_json(value, SCHEMA).alias("m"),
                F.get_json_object(value, "$.content").alias("content"),
                F.col("partition").alias("kafkaPartition"),
                F.col("offset").alias("kafkaOffset"),
            )
            .select("m.*", "content", "kafkaPartition", "kafkaOffset")
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
