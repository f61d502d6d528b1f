"""The Spark settings every cdc-mirror job starts with (pure: no JVM)."""

from __future__ import annotations

from cdc_platform.config import Settings, SparkSettings
from cdc_platform.spark import spark_conf


def test_a_local_master_never_waits_for_locality() -> None:
    # A task preferring a host without an executor (an HDFS DataNode's) would otherwise wait
    # for a resource offer that the local backend never makes: the stage stalls for good.
    for master in ("local", "local[2]", "local[*]"):
        conf = spark_conf(Settings(spark=SparkSettings(master=master)), [])
        assert conf["spark.locality.wait"] == "0s"


def test_a_cluster_master_keeps_sparks_locality_wait() -> None:
    conf = spark_conf(Settings(spark=SparkSettings(master="yarn")), [])
    assert "spark.locality.wait" not in conf


def test_the_driver_and_executors_jit_compile_huge_generated_methods() -> None:
    # HotSpot leaves a method above 8,000 bytecode bytes interpreted unless told otherwise,
    # and the stream writer's whole-stage generated processNext is that big.
    conf = spark_conf(Settings(), [])
    assert "-XX:-DontCompileHugeMethods" in conf["spark.driver.extraJavaOptions"].split()
    assert "-XX:-DontCompileHugeMethods" in conf["spark.executor.extraJavaOptions"].split()
    # The metastore's Derby home stays on the driver's options beside it.
    assert any(
        option.startswith("-Dderby.system.home=")
        for option in conf["spark.driver.extraJavaOptions"].split()
    )
