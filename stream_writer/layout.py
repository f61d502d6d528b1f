"""Where a row goes in the lake and how a batch is cut into files. Pure logic, no Spark.

Layout: ``<lake>/<database>.db/<logical table>/dt=<yyyy-MM-dd>/<file>``, the logical table
from the shard rules (``ordercenter_07.orderinfo_42`` → ``ordercenter_orderinfo``) and ``dt``
the calendar day of ``executeTime`` in the configured time zone (``stream_writer.time_zone``,
UTC by default; midnight for readiness is taken in the same zone).

File names say where every row came from, like Kafka Connect HDFS does::

    binlog-<batchTs>-<batchId>-<n>+<topic>+<partition>+<startOffset>+<endOffset>.parquet

``batchTs`` is the batch's start (UTC, ``yyyyMMddHHmmss``), ``batchId`` Spark's micro-batch
id and ``n`` the file's index in its group (the seed's ``-[n]``). A group is one logical
table × one ``dt`` × one Kafka partition, so a file holds rows of exactly one partition: a
backfill looks for the file whose range holds the row's offset, and a reader can tell two
copies of the same rows apart by their overlapping ranges. Offsets are inclusive. The shards
of a logical table that live in K partitions therefore give K files per batch (at least); the
batch manifest lists them all.

Skew: a group's rows are written in offset order and rolled over to a new file every
``rows_per_file`` rows (from the target file size and the Parquet bytes per row measured on
earlier batches), so a table 50× hotter than the rest is spread over several files, and a
quiet table gets a single file per batch and Kafka partition, not one per Spark task.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from cdc_platform.lake import DEAD_LETTER_TABLE
from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRouter

_FILE_NAME = re.compile(
    r"^binlog-(?P<batch_ts>\d{14})-(?P<batch_id>\d+)-(?P<n>\d+)"
    r"\+(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)"
    r"\+(?P<start>\d+)\+(?P<end>\d+)\.parquet$"
)


def logical_table(router: ShardRouter, schema: str, table: str) -> str:
    """The logical table a physical table's rows are written to (ConfigError if unroutable)."""
    name = router.route(schema, table).name
    if name == DEAD_LETTER_TABLE:
        raise ConfigError(
            f"shard routing maps {schema}.{table} to {DEAD_LETTER_TABLE!r}, the name of the "
            "stream writer's dead-letter table; change the shard rules."
        )
    return name


def day_of(execute_time_ms: int, zone: ZoneInfo) -> str:
    """``dt`` of an executeTime (epoch milliseconds) in ``zone``."""
    return datetime.fromtimestamp(execute_time_ms / 1000, zone).strftime("%Y-%m-%d")


def next_midnight_ms(dt: str, zone: ZoneInfo) -> int:
    """Epoch milliseconds of the midnight that ends day ``dt`` in ``zone`` (DST-aware)."""
    following = date.fromisoformat(dt) + timedelta(days=1)
    midnight = datetime(following.year, following.month, following.day, tzinfo=zone)
    return int(midnight.timestamp() * 1000)


def batch_timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M%S")


@dataclass(frozen=True, slots=True)
class FileName:
    batch_ts: str
    batch_id: int
    index: int
    topic: str
    partition: int
    start_offset: int
    end_offset: int

    def __str__(self) -> str:
        return (
            f"binlog-{self.batch_ts}-{self.batch_id}-{self.index}"
            f"+{self.topic}+{self.partition}+{self.start_offset}+{self.end_offset}.parquet"
        )

    @classmethod
    def parse(cls, name: str) -> FileName:
        match = _FILE_NAME.match(name)
        if match is None:
            raise ValueError(f"{name!r} is not a stream writer file name")
        return cls(
            batch_ts=match["batch_ts"],
            batch_id=int(match["batch_id"]),
            index=int(match["n"]),
            topic=match["topic"],
            partition=int(match["partition"]),
            start_offset=int(match["start"]),
            end_offset=int(match["end"]),
        )

    def holds(self, topic: str, partition: int, offset: int) -> bool:
        return (
            topic == self.topic
            and partition == self.partition
            and self.start_offset <= offset <= self.end_offset
        )


# Parquet bytes per row assumed before the writer measured its own files.
DEFAULT_BYTES_PER_ROW = 150.0


def rows_per_file(target_file_bytes: int, bytes_per_row: float) -> int:
    """Rows a file may hold to stay near the target size (Spark's ``maxRecordsPerFile``)."""
    return max(1, math.floor(target_file_bytes / max(bytes_per_row, 1.0)))


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A file Spark wrote for the batch, with what its columns say."""

    path: str
    table: str
    dt: str
    topic: str
    partition: int
    min_offset: int
    max_offset: int
    rows: int
    size: int


def name_files(
    staged: list[StagedFile], batch_ts: str, batch_id: int
) -> list[tuple[StagedFile, FileName]]:
    """Final names: within each table × dt × Kafka partition, files are numbered from 0 in
    offset order, and each name carries the file's own first and last offset."""
    ordered = sorted(staged, key=lambda f: (f.table, f.dt, f.topic, f.partition, f.min_offset))
    named: list[tuple[StagedFile, FileName]] = []
    previous: tuple[str, str, str, int] | None = None
    index = 0
    for item in ordered:
        group = (item.table, item.dt, item.topic, item.partition)
        index = index + 1 if group == previous else 0
        previous = group
        named.append(
            (
                item,
                FileName(
                    batch_ts,
                    batch_id,
                    index,
                    item.topic,
                    item.partition,
                    item.min_offset,
                    item.max_offset,
                ),
            )
        )
    return named
