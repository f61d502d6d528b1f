"""Pure: reading FooterSummary's lines, the java.nio filesystem settings, the partition names
of SHOW PARTITIONS."""

from __future__ import annotations

from pathlib import Path

from cdc_platform.lake import partition_days
from stream_writer import localfs
from stream_writer.writer import FileSummary, parse_footer_summary


def test_footer_summary_lines_become_file_summaries() -> None:
    text = (
        "/lake/s/_table=shop_orders/_dt=2024-03-01/part-0.parquet\t120\tcdc.a\tcdc.a\t2\t2"
        "\t1000\t1119\t1709251200000\t1709251800000\n"
        "/lake/s/_table=dead_letter/_dt=2024-03-01/part-1.parquet\t3\tcdc.a\tcdc.b\t0\t1"
        "\t7\t9\t\t\n"
    )
    assert parse_footer_summary(text) == [
        FileSummary(
            path="/lake/s/_table=shop_orders/_dt=2024-03-01/part-0.parquet",
            rows=120,
            first_topic="cdc.a",
            last_topic="cdc.a",
            first_partition=2,
            last_partition=2,
            min_offset=1000,
            max_offset=1119,
            max_event_ms=1709251800000,
        ),
        # executeTime only null (dead letters): no newest event; mixed partitions stay visible
        FileSummary(
            path="/lake/s/_table=dead_letter/_dt=2024-03-01/part-1.parquet",
            rows=3,
            first_topic="cdc.a",
            last_topic="cdc.b",
            first_partition=0,
            last_partition=1,
            min_offset=7,
            max_offset=9,
            max_event_ms=None,
        ),
    ]
    assert parse_footer_summary("") == []


def test_the_nio_filesystems_are_chosen_only_when_their_jar_is_there(tmp_path: Path) -> None:
    assert localfs.session_conf_for(tmp_path) == {}
    (tmp_path / "cdc-mirror-writer-jvm-1.jar").write_bytes(b"")
    conf = localfs.session_conf_for(tmp_path)
    assert conf == {"spark.hadoop.fs.file.impl": localfs.NIO_LOCAL_FS}
    assert localfs.nio_in_session(conf["spark.hadoop.fs.file.impl"])
    assert not localfs.nio_in_session(None)


def test_the_staging_write_never_writes_checksum_files() -> None:
    with_jar = localfs.staging_write_options(True)
    without = localfs.staging_write_options(False)
    assert with_jar["fs.file.impl"] == localfs.NIO_RAW_LOCAL_FS
    assert without["fs.file.impl"] == localfs.HADOOP_RAW_LOCAL_FS
    # A fresh instance: the session's cached file: filesystem keeps its own class.
    assert with_jar["fs.file.impl.disable.cache"] == without["fs.file.impl.disable.cache"] == "true"


def test_show_partitions_rows_give_their_days() -> None:
    assert partition_days(["dt=2024-03-01", "dt=2024-03-02"]) == ["2024-03-01", "2024-03-02"]
    assert partition_days(["other=1"]) == []
