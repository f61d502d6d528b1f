"""The Spark settings every cdc-mirror job starts with (pure: no JVM)."""

from __future__ import annotations

import re

import pytest

from cdc_platform.config import Settings, SparkSettings
from cdc_platform.spark import spark_conf, split_secret_conf
from simple_binlog.errors import ConfigError


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


def test_secrets_are_kept_off_the_jvms_start() -> None:
    # The builder's settings become spark-submit's arguments, which every local user reads.
    conf = {
        "spark.sql.catalog.lake.s3.access-key-id": "AKIA",
        "spark.sql.catalog.lake.s3.secret-access-key": "s3cr3t",
        "spark.hadoop.fs.s3a.access.key": "AKIA",
        "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
        "spark.hadoop.fs.s3a.session.token": "t0ken",
        "spark.hadoop.javax.jdo.option.ConnectionPassword": "pw",
        "spark.sql.catalog.lake.s3.endpoint": "http://127.0.0.1:28333",
        "spark.hadoop.fs.s3a.path.style.access": "true",
    }
    launch, secret = split_secret_conf(conf)
    assert set(secret) == set(list(conf)[:6])
    assert set(launch) == set(list(conf)[6:])


def test_the_metastore_password_is_not_a_launch_setting() -> None:
    conf = spark_conf(Settings(), [])
    launch, secret = split_secret_conf(conf)
    assert list(secret) == ["spark.hadoop.javax.jdo.option.ConnectionPassword"]
    assert launch["spark.hadoop.javax.jdo.option.ConnectionUserName"] == "cdc"
    # Spark hides the same keys wherever it shows settings (SET, logs, plans).
    assert conf["spark.redaction.regex"] == "(?i)secret|password|token|access[.\\-]?key|jaas"


def test_a_kafka_jaas_config_is_a_secret_kept_off_argv_and_redacted() -> None:
    # Kafka's sasl.jaas.config holds the SASL password inside its value; the stream writer
    # passes it to Spark's Kafka source as the option kafka.sasl.jaas.config.
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="pw";'
    for key in ("kafka.sasl.jaas.config", "spark.kafka.sasl.jaas.config"):
        launch, secret = split_secret_conf({key: jaas, "kafka.security.protocol": "SASL_SSL"})
        assert secret == {key: jaas}
        assert launch == {"kafka.security.protocol": "SASL_SSL"}
    # What Spark hides in plans and SET output (its redaction matches keys by this regex).
    redaction = re.compile(spark_conf(Settings(), [])["spark.redaction.regex"])
    assert redaction.search("kafka.sasl.jaas.config")
    assert not redaction.search("kafka.security.protocol")


@pytest.mark.parametrize(
    "key",
    [
        "spark.authenticate.secret",
        "spark.ssl.keyPassword",
        "spark.ssl.keyStorePassword",
        "spark.ssl.ui.trustStorePassword",
        "spark.ssl.rpc.keyStorePassword",
    ],
)
def test_a_secret_spark_reads_as_its_jvm_starts_is_refused_in_one_sentence(key: str) -> None:
    # Set after the start (set_secret_conf) it would be ignored; on the builder, on argv.
    with pytest.raises(ConfigError) as refused:
        split_secret_conf({key: "s3cr3t", "spark.authenticate": "true"})
    message = str(refused.value)
    assert message.startswith(f"{key} cannot be given to a cdc-mirror Spark session: ")
    assert "spark-defaults.conf" in message and "s3cr3t" not in message
    assert message.count(". ") == 0 and message.endswith(".")


def test_sparks_non_secret_security_switches_start_the_jvm_as_before() -> None:
    conf = {
        "spark.authenticate": "true",
        # A path to the secret (Spark's file-based way), not the secret itself.
        "spark.authenticate.secret.file": "/etc/cdc-mirror/spark-secret",
        "spark.ssl.enabled": "true",
        "spark.ssl.protocol": "TLSv1.3",
    }
    assert split_secret_conf(conf) == (conf, {})
