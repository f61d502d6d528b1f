"""Hours of a day for hourly snapshots: pure logic (no Spark), tested with plain values.

An hour of day ``D`` is the ``index``-th span of 3,600 s after ``D``'s midnight in the stream
writer's time zone (``stream_writer.time_zone``, the zone the raw layer's ``dt`` partitions
are cut in), so a day's hours tile it exactly from its midnight to the next one: 24 hours, or
23 / 25 on the days a daylight-saving zone moves its clocks. Its raw changes are the rows of
partition ``dt = D`` whose ``executeTime`` lies in ``[start, end)``.

An hour is **ready** by the stream writer's rule for a day, at the hour's end instead of the
midnight: its committed global watermark has passed the hour's end plus the lateness budget,
and the clock has passed the hour's end plus the pipeline's delays (no row of the hour can
still be on its way). A day the writer declared ready makes all its hours ready.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from cdc_platform.lake_snapshots import hour_tag

HOUR_MS = 3_600_000


def midnight_ms(day: date, zone: ZoneInfo) -> int:
    """The instant ``day`` starts in ``zone`` (epoch milliseconds)."""
    return int(datetime(day.year, day.month, day.day, tzinfo=zone).timestamp() * 1000)


def hours_in_day(day: date, zone: ZoneInfo) -> int:
    """How many hours ``day`` has in ``zone`` (23, 24 or 25)."""
    span = midnight_ms(day + timedelta(days=1), zone) - midnight_ms(day, zone)
    return span // HOUR_MS


@dataclass(frozen=True, slots=True, order=True)
class Hour:
    """Hour ``index`` (0-based, hours since midnight) of ``day``."""

    day: date
    index: int

    @property
    def tag(self) -> str:
        return hour_tag(self.day, self.index)

    @property
    def label(self) -> str:
        """``2026-11-25T13``: the form of ``cdc-mirror merge --hour`` and the merge records."""
        return f"{self.day.isoformat()}T{self.index:02d}"

    def start_ms(self, zone: ZoneInfo) -> int:
        return midnight_ms(self.day, zone) + self.index * HOUR_MS

    def end_ms(self, zone: ZoneInfo) -> int:
        return self.start_ms(zone) + HOUR_MS

    def is_last(self, zone: ZoneInfo) -> bool:
        """Whether the hour ends the day (its end is the day cut)."""
        return self.index == hours_in_day(self.day, zone) - 1

    def previous(self, zone: ZoneInfo) -> Hour:
        if self.index > 0:
            return Hour(self.day, self.index - 1)
        before = self.day - timedelta(days=1)
        return Hour(before, hours_in_day(before, zone) - 1)

    def next(self, zone: ZoneInfo) -> Hour:
        if self.is_last(zone):
            return Hour(self.day + timedelta(days=1), 0)
        return Hour(self.day, self.index + 1)


def parse_hour(text: str, zone: ZoneInfo) -> Hour:
    """``2026-11-25T13`` as an Hour of that day in ``zone``; ValueError with one sentence."""
    day_text, separator, hour_text = text.partition("T")
    try:
        day = date.fromisoformat(day_text)
        index = int(hour_text)
    except ValueError:
        raise ValueError(f"{text!r} is not an hour like 2026-11-25T13") from None
    if not separator or len(hour_text) != 2:
        raise ValueError(f"{text!r} is not an hour like 2026-11-25T13")
    hours = hours_in_day(day, zone)
    if not 0 <= index < hours:
        raise ValueError(f"{day} has hours 00 to {hours - 1:02d} in {zone.key} (got {text!r})")
    return Hour(day, index)


def day_hours(day: date, zone: ZoneInfo) -> list[Hour]:
    return [Hour(day, index) for index in range(hours_in_day(day, zone))]


def hour_of(instant_ms: int, zone: ZoneInfo) -> Hour:
    """The hour an instant falls in."""
    day = datetime.fromtimestamp(instant_ms / 1000, UTC).astimezone(zone).date()
    return Hour(day, (instant_ms - midnight_ms(day, zone)) // HOUR_MS)


def late_fallback(start_ms: int, zone: ZoneInfo, oldest_day: date | None = None) -> int:
    """Where a merge whose changes start at ``start_ms`` takes them from when it cannot tell
    which rows arrived late (the raw snapshot of the merge before is unknown or expired): the
    midnight of the oldest day the raw table still holds (``oldest_day``), so rows late for
    any day are in; never later than the midnight of the day before ``start_ms`` (for an hour
    inside a day, that day's midnight; for a day or a day's first hour, the day before's).
    Taking older changes again is harmless: the latest change per key decides, and the MERGE
    applies a change only over an older one (``_binlog_offset``)."""
    before = midnight_ms(hour_of(start_ms - 1, zone).day, zone)
    if oldest_day is None:
        return before
    return min(before, midnight_ms(oldest_day, zone))


def first_from(start_ms: int, zone: ZoneInfo, oldest_day: date | None) -> int | None:
    """Where a table's first snapshot, whose own changes start at ``start_ms`` (a day's or an
    hour's midnight), takes its changes from: the midnight of ``oldest_day``, the oldest day
    the raw table holds, when it lies before ``start_ms`` (None otherwise), so that rows of
    days before the first merged one (a history replayed with its rows' own times, changes
    collected before the first merge) are in it."""
    if oldest_day is None:
        return None
    since = midnight_ms(oldest_day, zone)
    return since if since < start_ms else None


@dataclass(frozen=True, slots=True)
class HourRule:
    """The stream writer's readiness rule (``stream_writer.lateness_budget_s`` and delays)."""

    zone: ZoneInfo
    lateness_budget_ms: int
    pipeline_delay_ms: int

    def is_ready(
        self, hour: Hour, global_watermark_ms: int | None, now_ms: int, ready_days: set[str]
    ) -> bool:
        if hour.day.isoformat() in ready_days:
            return True
        if global_watermark_ms is None:
            return False
        end = hour.end_ms(self.zone)
        return (
            global_watermark_ms >= end + self.lateness_budget_ms
            and now_ms >= end + self.pipeline_delay_ms
        )

    def ready_hours(
        self,
        after: Hour,
        global_watermark_ms: int | None,
        now_ms: int,
        ready_days: set[str],
        limit: int = 24 * 31,
    ) -> list[Hour]:
        """The ready hours after ``after``, in order, stopping at the first that is not ready
        (at most ``limit``: a catch-up is taken in bounded steps)."""
        found: list[Hour] = []
        hour = after.next(self.zone)
        while len(found) < limit and self.is_ready(hour, global_watermark_ms, now_ms, ready_days):
            found.append(hour)
            hour = hour.next(self.zone)
        return found


def expired_hours(hours: list[Hour], today: date, keep_days: int) -> list[Hour]:
    """The hours whose tags retention drops: those of days more than ``keep_days`` before
    ``today`` (as the day tags: a day's hours are kept while the day is at most ``keep_days``
    days old)."""
    cutoff = today - timedelta(days=keep_days)
    return sorted(hour for hour in hours if hour.day < cutoff)
