"""Pure parts of the entry point: topics, writer name, checkpoint, Kafka options, settings."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cdc_platform.config import MySQLInstance, Settings, StreamWriterSettings
from simple_binlog.errors import ConfigError
from stream_writer.job import (
    ProxyTracebackAtDebug,
    kafka_away,
    kafka_options,
    plan_run,
    proxy_tracebacks_at_debug,
    query_failure,
)


def _settings(**stream_writer: object) -> Settings:
    return Settings(
        instances=[
            MySQLInstance(name="local", host="127.0.0.1"),
            MySQLInstance(name="orders", host="127.0.0.1"),
        ],
        stream_writer=StreamWriterSettings(**stream_writer),  # type: ignore[arg-type]
        spark={"lake_dir": Path("/lake")},  # type: ignore[arg-type]
    )


def test_instances_give_topics_name_and_checkpoint() -> None:
    run = plan_run(_settings(), ["orders", "local"], [], None)
    assert run.topics == ["cdc.binlog.orders", "cdc.binlog.local"]
    assert run.name == "local+orders"
    assert run.paths.checkpoint_dir == Path("/lake/_stream_writer/local+orders/checkpoint")


def test_all_instances_by_default_and_unknown_instance_is_one_sentence() -> None:
    assert plan_run(_settings(), [], [], None).topics == ["cdc.binlog.local", "cdc.binlog.orders"]
    with pytest.raises(ConfigError, match="no MySQL instance named 'nope'"):
        plan_run(_settings(), ["nope"], [], None)


def test_configured_name_and_checkpoint_win() -> None:
    settings = _settings(name="lake-a", checkpoint_dir=Path("/ckpt"))
    run = plan_run(settings, [], ["t1"], None)
    assert (run.name, run.topics, run.paths.checkpoint_dir) == ("lake-a", ["t1"], Path("/ckpt"))


def test_kafka_options_read_committed_from_earliest_with_a_batch_cap() -> None:
    options = kafka_options(_settings(max_offsets_per_trigger=1234), ["a", "b"])
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["startingOffsets"] == "earliest"
    assert options["subscribe"] == "a,b"
    assert options["maxOffsetsPerTrigger"] == "1234"
    assert options["failOnDataLoss"] == "true"
    assert "maxOffsetsPerTrigger" not in kafka_options(_settings(max_offsets_per_trigger=0), ["a"])


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("time_zone", "Mars/Olympus", "not a known time zone"),
        ("database", "Bad-Name", "must be a Hive name"),
        ("trigger_interval_s", 0, "greater than 0"),
    ],
)
def test_bad_settings_are_refused(field: str, value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        StreamWriterSettings(**{field: value})  # type: ignore[arg-type]


SPARK_WRAPPED = """[STREAM_FAILED] Query  terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink.
org.apache.spark.sql.execution.streaming.sources.ForeachBatchUserFuncException: [FOREACH_BATCH_USER_FUNCTION_ERROR] Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/work/stream_writer/writer.py", line 154, in __call__
    manifest = self._stage(batch, batch_id)
{cause}
\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(ForeachBatchSink.scala:60)
Caused by: py4j.Py4JException: An exception was raised by the Python Proxy."""


@pytest.mark.parametrize(
    ("cause", "shown"),
    [
        (
            "stream_writer.commit.CommitError: batch 7 is committed but its file x is gone.",
            "batch 7 is committed but its file x is gone.",
        ),
        (
            "pyspark.errors.exceptions.captured.AnalysisException: [UNABLE_TO_INFER_SCHEMA] no.",
            "AnalysisException: [UNABLE_TO_INFER_SCHEMA] no.",
        ),
    ],
)
def test_a_failed_query_shows_the_python_cause_not_the_jvm_wrappers(cause: str, shown: str) -> None:
    assert query_failure(SPARK_WRAPPED.format(cause=cause)) == shown


def test_a_failure_without_a_python_cause_shows_its_first_line() -> None:
    assert query_failure("java.lang.IllegalStateException: broker gone\n\tat x") == (
        "java.lang.IllegalStateException: broker gone"
    )


KAFKA_TIMEOUT = """py4j.protocol.Py4JJavaError: An error occurred while calling o499.parquet.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed
Caused by: org.apache.spark.SparkException: Exception thrown in awaitResult:
Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before \
the position for partition cdc.binlog.orders-0 could be determined"""


def test_without_a_python_cause_the_innermost_jvm_cause_is_shown() -> None:
    assert query_failure(KAFKA_TIMEOUT) == (
        "TimeoutException: Timeout of 60000ms expired before the position for partition "
        "cdc.binlog.orders-0 could be determined"
    )


def test_kafka_away_is_told_apart_from_errors_a_restart_cannot_cure() -> None:
    assert kafka_away(KAFKA_TIMEOUT)
    assert kafka_away("Caused by: org.apache.kafka.common.errors.DisconnectException")
    assert not kafka_away(
        "java.lang.IllegalStateException: Cannot fetch offset 17 (GroupId: x). Some data may "
        "have been lost because they are not available in Kafka any more"
    )
    assert not kafka_away(SPARK_WRAPPED.format(cause="stream_writer.commit.CommitError: gone."))


@pytest.mark.parametrize(
    ("merge_writer", "configured"), [(None, None), (None, "nightly"), ("other", "nightly")]
)
def test_merge_waits_on_the_progress_the_writer_commits(
    merge_writer: str | None, configured: str | None
) -> None:
    # Merge finds the writer's progress row by the writer's name, not through the writer's
    # code: both must name the same writer for every way the name is chosen.
    from merge.job import writer_name

    base = _settings(name=configured)
    settings = base.model_copy(
        update={"merge": base.merge.model_copy(update={"writer": merge_writer})}
    )
    writer = plan_run(settings, [], [], merge_writer)
    assert writer_name(settings) == writer.name


def _py4j_record(message: str) -> logging.LogRecord:
    return logging.LogRecord("py4j.clientserver", logging.ERROR, __file__, 1, message, (), None)


def test_py4js_traceback_of_a_failed_batch_shows_only_at_debug_level() -> None:
    # py4j logs every error the batch function raises, with its traceback, before the query
    # fails with it; the writer says that error in one sentence (query_failure).
    logger = logging.getLogger("py4j.clientserver")
    before = logger.level
    proxy_error = "There was an exception while executing the Python Proxy on the Python Side."
    try:
        logger.setLevel(logging.INFO)
        record = _py4j_record(proxy_error)
        assert not ProxyTracebackAtDebug().filter(record)
        assert record.levelname == "DEBUG"
        logger.setLevel(logging.DEBUG)
        assert ProxyTracebackAtDebug().filter(_py4j_record(proxy_error))
        # Every other py4j record is left as it is.
        logger.setLevel(logging.INFO)
        other = _py4j_record("Could not authenticate connection.")
        assert ProxyTracebackAtDebug().filter(other) and other.levelname == "ERROR"
    finally:
        logger.setLevel(before)


def test_the_filter_is_installed_once_on_both_py4j_loggers() -> None:
    proxy_tracebacks_at_debug()
    proxy_tracebacks_at_debug()
    for name in ("py4j.clientserver", "py4j.java_gateway"):
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, ProxyTracebackAtDebug) for f in filters) == 1
