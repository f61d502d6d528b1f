"""Watermarks and readiness of days. Pure logic: the writer commits ``WriterState`` to the lake
(the progress table of ``cdc_platform.lake``) after each batch's raw commit.

Per Kafka partition the writer keeps, after each committed batch, the highest executeTime it
has durably written from that partition (its *watermark*: rows of one physical table sit in
one partition in commit order, so a partition's event time only moves forward apart from
small disorder, which the lateness budget absorbs), the next offset to read and the lag
(messages between that offset and the partition's last stable offset at the time).

The *global watermark* is the minimum over the partitions that still lag (their unread
messages may hold older events). A partition that is caught up holds nothing unread, so it
does not hold the others back; when every partition is caught up, the global watermark is the
highest one. A partition that never delivered a row and is caught up has no watermark at all.

Day ``dt`` (in the configured zone) is **ready** when

* global watermark ≥ midnight ending ``dt`` + lateness budget, and
* now ≥ that midnight + collector delay + Kafka delay + writer delay (the seed's rule: no row
  of ``dt`` can still be on its way from MySQL).

A day without any row (a quiet source) is ready by the same rule once the watermark has
passed it: the collector's watermark heartbeats (``simple_binlog.control``) advance a
partition's watermark like a row's executeTime, and are never written.

Once ready a day stays ready; rows that arrive for it later are written like any other and
counted as *late* per table (the writer reports them in a ``_late`` record, never drops them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from stream_writer.layout import next_midnight_ms

# The lag of a partition whose end offset Kafka did not report: it counts as lagging.
UNKNOWN_LAG = -1


@dataclass(frozen=True, slots=True)
class ReadinessRule:
    zone: ZoneInfo
    lateness_budget_ms: int
    pipeline_delay_ms: int  # collector + Kafka + writer delay

    def is_ready(self, dt: str, global_watermark_ms: int | None, now_ms: int) -> bool:
        if global_watermark_ms is None:
            return False
        midnight = next_midnight_ms(dt, self.zone)
        return (
            global_watermark_ms >= midnight + self.lateness_budget_ms
            and now_ms >= midnight + self.pipeline_delay_ms
        )


@dataclass(slots=True)
class PartitionProgress:
    topic: str
    partition: int
    next_offset: int = 0
    watermark_ms: int | None = None
    lag: int = 0

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.partition}"

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "nextOffset": self.next_offset,
            "watermarkMs": self.watermark_ms,
            "lag": self.lag,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionProgress:
        return cls(
            topic=data["topic"],
            partition=int(data["partition"]),
            next_offset=int(data["nextOffset"]),
            watermark_ms=data["watermarkMs"],
            lag=int(data["lag"]),
        )


def global_watermark(partitions: list[PartitionProgress]) -> int | None:
    lagging = [p for p in partitions if p.lag != 0]
    if lagging:
        if any(p.watermark_ms is None for p in lagging):
            return None  # a partition with unread rows and nothing written yet: unknown
        return min(p.watermark_ms for p in lagging if p.watermark_ms is not None)
    marks = [p.watermark_ms for p in partitions if p.watermark_ms is not None]
    return max(marks) if marks else None


def quiet_days(first: str, watermark_ms: int, zone: ZoneInfo) -> set[str]:
    """Every day from ``first`` to the day of ``watermark_ms`` in ``zone`` (bounded: a
    watermark far in the future, from a bad clock, adds at most a year of days)."""
    last = datetime.fromtimestamp(watermark_ms / 1000, zone).date()
    day = date.fromisoformat(first)
    found: set[str] = set()
    while day <= last and len(found) < _MAX_QUIET_DAYS:
        found.add(day.isoformat())
        day += timedelta(days=1)
    return found


_MAX_QUIET_DAYS = 366


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """What one batch contributes, per partition: the end offset and its newest event."""

    topic: str
    partition: int
    next_offset: int
    lag: int
    max_event_ms: int | None  # None: no valid row of this partition in the batch


@dataclass(slots=True)
class WriterState:
    """Everything the writer resumes from (committed as the ``state`` of its progress row)."""

    last_batch: int = -1
    partitions: dict[str, PartitionProgress] = field(default_factory=dict)
    # table → the days it has files in
    table_days: dict[str, set[str]] = field(default_factory=dict)
    ready_days: set[str] = field(default_factory=set)
    # dt → table → rows written after the day was ready
    late_rows: dict[str, dict[str, int]] = field(default_factory=dict)

    def advance(self, progress: list[BatchProgress]) -> None:
        for item in progress:
            key = f"{item.topic}:{item.partition}"
            current = self.partitions.get(key) or PartitionProgress(item.topic, item.partition)
            current.next_offset = max(current.next_offset, item.next_offset)
            current.lag = item.lag
            if item.max_event_ms is not None:
                previous = current.watermark_ms
                current.watermark_ms = (
                    item.max_event_ms if previous is None else max(previous, item.max_event_ms)
                )
            self.partitions[key] = current

    def global_watermark(self) -> int | None:
        return global_watermark(list(self.partitions.values()))

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition), the offset of the next message to read: every message
        below it is in the lake."""
        return {(p.topic, p.partition): p.next_offset for p in self.partitions.values()}

    def newly_ready(self, rule: ReadinessRule, now_ms: int) -> list[str]:
        """Days that turn ready now (sorted); the caller marks them. Those with data, and
        every day without data between the first day with data and the global watermark:
        a source with no row changes all day is ready for it once its watermark (advanced
        by the collector's heartbeats) has passed it, so merge does not wait forever."""
        mark = self.global_watermark()
        days = {dt for dts in self.table_days.values() for dt in dts}
        if days and mark is not None:
            first = min(days)
            if self.ready_days:  # days before the last ready one were decided then
                after = date.fromisoformat(max(self.ready_days)) + timedelta(days=1)
                first = max(first, after.isoformat())
            days |= quiet_days(first, mark, rule.zone)
        return sorted(dt for dt in days - self.ready_days if rule.is_ready(dt, mark, now_ms))

    def count_late(
        self, rows_by_table_day: dict[tuple[str, str], int]
    ) -> dict[str, dict[str, int]]:
        """Record rows written for days already ready; returns this batch's late rows."""
        late: dict[str, dict[str, int]] = {}
        for (table, dt), rows in sorted(rows_by_table_day.items()):
            if dt in self.ready_days and rows > 0:
                late.setdefault(dt, {})[table] = rows
                per_day = self.late_rows.setdefault(dt, {})
                per_day[table] = per_day.get(table, 0) + rows
        return late

    def to_json(self) -> dict[str, Any]:
        return {
            "lastBatch": self.last_batch,
            "partitions": [p.to_json() for p in self.partitions.values()],
            "tableDays": {t: sorted(d) for t, d in sorted(self.table_days.items())},
            "readyDays": sorted(self.ready_days),
            "lateRows": self.late_rows,
            "globalWatermarkMs": self.global_watermark(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WriterState:
        partitions = [PartitionProgress.from_json(p) for p in data.get("partitions", [])]
        return cls(
            last_batch=int(data.get("lastBatch", -1)),
            partitions={p.key: p for p in partitions},
            table_days={t: set(d) for t, d in data.get("tableDays", {}).items()},
            ready_days=set(data.get("readyDays", [])),
            late_rows={dt: dict(t) for dt, t in data.get("lateRows", {}).items()},
        )
