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

Skew: a group's rows are split into ``round(rows / rows_per_file)`` files (at least one), by
Kafka offset, so a table 50× hotter than the rest is written by several tasks at once, and a
quiet table gets a single file per batch instead of one per Spark task.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRouter

DEAD_LETTER_TABLE = "dead_letter"
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


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One logical table × dt × Kafka partition in a batch, as aggregated by Spark."""

    table: str
    dt: str
    topic: str
    partition: int
    rows: int
    min_offset: int
    max_offset: int
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A file of the batch: rows of ``group`` whose Kafka offset is in [start, end]."""

    file_id: int
    table: str
    dt: str
    name: FileName

    @property
    def relative_path(self) -> str:
        return f"{self.table}/dt={self.dt}/{self.name}"


def files_for(rows: int, rows_per_file: int) -> int:
    """How many files a group of ``rows`` gets: each near ``rows_per_file``, at least one.

    Rounding (not ceiling) keeps every file within [0.67, 1.5] × the target once a group
    holds at least two files' worth, and never produces a tiny remainder file.
    """
    if rows_per_file < 1:
        raise ValueError("rows_per_file must be at least 1")
    return max(1, round(rows / rows_per_file))


def offset_ranges(min_offset: int, max_offset: int, files: int) -> list[tuple[int, int]]:
    """Split the inclusive range [min, max] into ``files`` contiguous inclusive sub-ranges."""
    span = max_offset - min_offset + 1
    files = min(files, span)
    # File i holds the offsets with floor((offset - min) * files / span) == i (what
    # ``file_index`` and the Spark side compute); the first such offset is ceil(i * span / files).
    bounds = [min_offset + -((-span * i) // files) for i in range(files + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(files)]


def file_index(offset: int, min_offset: int, max_offset: int, files: int) -> int:
    """The file (0-based) of a row of the group, matching ``offset_ranges``: the Spark side
    computes the same expression, ``floor((offset - min) * files / span)``."""
    span = max_offset - min_offset + 1
    files = min(files, span)
    return ((offset - min_offset) * files) // span


@dataclass(frozen=True, slots=True)
class FilePlan:
    files: list[PlannedFile]
    # (table, dt, topic, partition) → (min offset, max offset, number of files)
    splits: dict[tuple[str, str, str, int], tuple[int, int, int]]


def plan_files(
    groups: list[GroupStats],
    batch_id: int,
    batch_ts: str,
    target_file_bytes: int,
    bytes_per_row: dict[str, float],
    default_bytes_per_row: float,
) -> FilePlan:
    """Cut every group into files near the target size, numbered from 0 in a stable order.

    ``bytes_per_row`` is each table's Parquet bytes per row measured on earlier batches; a
    table seen for the first time uses ``default_bytes_per_row``.
    """
    files: list[PlannedFile] = []
    splits: dict[tuple[str, str, str, int], tuple[int, int, int]] = {}
    ordered = sorted(groups, key=lambda g: (g.table, g.dt, g.topic, g.partition))
    for group in ordered:
        per_row = bytes_per_row.get(group.table) or default_bytes_per_row
        rows_per_file = max(1, math.floor(target_file_bytes / max(per_row, 1.0)))
        count = files_for(group.rows, rows_per_file)
        ranges = offset_ranges(group.min_offset, group.max_offset, count)
        key = (group.table, group.dt, group.topic, group.partition)
        splits[key] = (group.min_offset, group.max_offset, len(ranges))
        for index, (start, end) in enumerate(ranges):
            name = FileName(batch_ts, batch_id, index, group.topic, group.partition, start, end)
            files.append(PlannedFile(len(files), group.table, group.dt, name))
    return FilePlan(files, splits)
