"""Per-table status (issue 22, item 4): what the Overview and a mirror's status page show,
derived from what the components expose. Pure logic: no I/O here (``webui.status_sources``
gathers the inputs), so every rule — lag, readiness, stalled, yesterday's verdict — is
tested with plain values.

For one table mirror the answer is a ``TableStatus``:

- **source**: the instance's active collector's committed binlogOffset and the event time of
  the last MySQL transaction it read, and its delay (``cdc_collector_*``);
- **Kafka**: the instance topic's end offset (all partitions) and, per consuming component,
  its lag: a mirror's consumer group from Kafka (end − committed), the stream writer's from
  its own metric (it keeps its offsets in its checkpoint, not in a group);
- **lake**: the stream writer's watermark for the topic and which of the last days are
  ready (the writer's readiness rule applied to its global watermark);
- **merge**: the table's last merge (day, rows, files, duration, check verdict) from the
  scheduler's run history, else from merge's metrics;
- **targets**: per Redis/warehouse/Kudu target the age of the last applied change
  (``FreshnessSource`` per target kind), and how far it is behind the source;
- **dead letters** of its pipeline, a **stalled** flag with the reasons, and a verdict.

A component that does not answer is *down* in the answer, never an error.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from typing import Literal
from zoneinfo import ZoneInfo

from webui.replay import percent_done

Health = Literal["ok", "warn", "red", "unknown"]


# --- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Scrape:
    """One metrics endpoint, read now: its samples, or why it could not be read."""

    target: str
    url: str
    ok: bool
    samples: tuple[Sample, ...] = ()
    error: str | None = None


class Metrics:
    """Every answering endpoint's samples, looked up by name and labels."""

    def __init__(self, scrapes: Iterable[Scrape]) -> None:
        self.scrapes = tuple(scrapes)
        self._by_name: dict[str, list[tuple[str, Sample]]] = {}
        # (name, label) → label value → samples: a table's lookup among 500 tables' series
        # is a dictionary access, not a scan (built on first use of that label).
        self._by_label: dict[tuple[str, str], dict[str, list[tuple[str, Sample]]]] = {}
        for scrape in self.scrapes:
            for sample in scrape.samples:
                self._by_name.setdefault(sample.name, []).append((scrape.target, sample))

    def find(self, name: str, **labels: str) -> list[tuple[str, Sample]]:
        """(endpoint, sample) of ``name`` whose labels include ``labels``."""
        if not labels:
            return list(self._by_name.get(name, ()))
        # The most selective label's bucket (a table's, not its target's), then the rest.
        bucket = min(
            (self._index(name, key).get(value, []) for key, value in labels.items()), key=len
        )
        return [
            (target, sample)
            for target, sample in bucket
            if all(sample.labels.get(k) == v for k, v in labels.items())
        ]

    def _index(self, name: str, key: str) -> dict[str, list[tuple[str, Sample]]]:
        index = self._by_label.get((name, key))
        if index is None:
            index = {}
            for target, sample in self._by_name.get(name, ()):
                if key in sample.labels:
                    index.setdefault(sample.labels[key], []).append((target, sample))
            self._by_label[(name, key)] = index
        return index

    def values(self, name: str, **labels: str) -> list[float]:
        return [s.value for _, s in self.find(name, **labels) if not math.isnan(s.value)]

    def has(self, name: str) -> bool:
        return name in self._by_name

    def down(self) -> list[Scrape]:
        return [s for s in self.scrapes if not s.ok]


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """A consumer group's committed offsets on a topic, from Kafka."""

    group: str
    component: str  # e.g. "mirror redis"
    committed: Mapping[int, int]  # partition → next offset to read (absent: none committed)


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """A topic's end offsets from Kafka, and its consumer groups' committed offsets; or why
    Kafka could not be asked."""

    topic: str
    ends: Mapping[int, int] = field(default_factory=dict)
    groups: tuple[GroupOffsets, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class MergeRun:
    """The table's last merge, from the scheduler's history or merge's metrics."""

    dt: date | None
    state: str  # succeeded | mismatch | failed | running | requested | waiting
    rows: int | None = None
    files: int | None = None
    seconds: float | None = None
    check_ok: bool | None = None
    error: str | None = None
    ended_at: float | None = None
    source: str = "scheduler"


@dataclass(frozen=True, slots=True)
class ReadinessRule:
    """The stream writer's rule (``stream_writer.readiness``): day ``dt`` is ready when the
    global watermark passed the midnight ending it by the lateness budget, and that midnight
    is at least the pipeline's delay ago."""

    zone: ZoneInfo
    lateness_budget_s: float
    pipeline_delay_s: float

    def midnight_after(self, day: date) -> float:
        next_day = datetime.combine(day + timedelta(days=1), datetime.min.time(), self.zone)
        return next_day.timestamp()

    def is_ready(self, day: date, watermark_s: float | None, now: float) -> bool:
        if watermark_s is None:
            return False
        midnight = self.midnight_after(day)
        return (
            watermark_s >= midnight + self.lateness_budget_s
            and now >= midnight + self.pipeline_delay_s
        )

    def today(self, now: float) -> date:
        return datetime.fromtimestamp(now, self.zone).date()


# --- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ComponentLag:
    component: str
    lag: int | None  # messages; None: unknown (down, or nothing committed yet)
    source: str  # where the figure comes from
    down: bool = False
    stalled_s: float = 0.0  # how long it has lagged without moving


@dataclass(frozen=True, slots=True)
class DayState:
    dt: date
    ready: bool


@dataclass(frozen=True, slots=True)
class Freshness:
    target: str
    age_s: float | None  # now − executeTime of the newest change applied
    behind_s: float | None  # source's last event time − that executeTime (≥ 0)
    down: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True)
class InitialLoad:
    """The newest replay job that loads a table mirror's existing rows (issue 22, item 2)."""

    run_id: str
    state: str  # pending | running | succeeded | failed | cancelled
    rows_done: int
    rows_total: int | None

    @property
    def percent(self) -> float | None:
        return percent_done(self.state, self.rows_done, self.rows_total)


@dataclass(frozen=True, slots=True)
class TableStatus:
    name: str
    instance: str
    topic: str
    targets: tuple[str, ...]
    collector: str  # "active", "standby only", "down", "unknown"
    binlog_offset: int | None
    source_event_s: float | None
    source_delay_s: float | None
    end_offset: int | None
    lags: tuple[ComponentLag, ...]
    watermark_s: float | None
    days: tuple[DayState, ...]
    merge: MergeRun | None
    freshness: tuple[Freshness, ...]
    dead_letters: int | None
    stalled: bool
    reasons: tuple[str, ...]  # why it is not all well, one sentence each
    flowing: Health
    yesterday: Health
    yesterday_text: str
    initial_load: InitialLoad | None = None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a lag or an age turns a table amber or red, and when lagging becomes stalled."""

    stall_after_s: float = 120.0
    source_delay_warn_s: float = 60.0
    freshness_warn_s: float = 60.0  # behind the source by more: amber
    lag_warn: int = 10_000


# --- derivations --------------------------------------------------------------------------


def topic_lag(ends: Mapping[int, int], committed: Mapping[int, int]) -> int | None:
    """Messages between a group's committed offsets and the topic's ends; None when the
    group has committed nothing on the topic. A partition without a commit counts whole."""
    if not committed:
        return None
    return sum(max(0, end - committed.get(partition, 0)) for partition, end in ends.items())


class StallTracker:
    """Remembers, per (component, topic), since when it has lagged at the same position;
    ``observe`` answers how long that is (0 when it moved or caught up)."""

    def __init__(self) -> None:
        self._since: dict[tuple[str, str], tuple[int | None, float]] = {}

    def observe(
        self, key: tuple[str, str], position: int | None, lag: int | None, now: float
    ) -> float:
        if not lag:
            self._since.pop(key, None)
            return 0.0
        previous = self._since.get(key)
        if previous is None or previous[0] != position:
            self._since[key] = (position, now)
            return 0.0
        return now - previous[1]


def _first(values: Sequence[float]) -> float | None:
    return values[0] if values else None


def collector_state(metrics: Metrics, instance: str) -> str:
    active = metrics.values("cdc_collector_active", instance=instance)
    if not active:
        return "unknown" if not metrics.down() else "down"
    return "active" if max(active) >= 1 else "standby only"


def writer_lag(metrics: Metrics, topic: str) -> tuple[int | None, float | None, bool]:
    """The stream writer's lag on ``topic`` (sum over partitions), its watermark (the
    minimum over partitions), and whether any writer reports the topic at all."""
    lags = metrics.values("cdc_stream_writer_lag_messages", topic=topic)
    marks = metrics.values("cdc_stream_writer_watermark_seconds", topic=topic)
    known = bool(lags or marks)
    return (int(sum(lags)) if lags else None, min(marks) if marks else None, known)


def day_states(
    rule: ReadinessRule, watermark_s: float | None, now: float, days: int
) -> tuple[DayState, ...]:
    """The last ``days`` days before today (newest first), ready or not."""
    today = rule.today(now)
    return tuple(
        DayState(day, rule.is_ready(day, watermark_s, now))
        for day in (today - timedelta(days=n) for n in range(1, days + 1))
    )


def yesterday_verdict(  # noqa: PLR0911 - one return per verdict reads best
    day: DayState | None, merge: MergeRun | None, hive: bool
) -> tuple[Health, str]:
    """Is yesterday's snapshot good? Green: merged and checked equal (or merged, unchecked);
    red: its merge failed or its check found a difference; amber: ready but not merged yet;
    unknown: not ready yet, or nothing known."""
    if not hive:
        return "ok", "no lake target"
    if day is None:
        return "unknown", "unknown"
    if merge is not None and merge.dt == day.dt:
        if merge.state == "failed":
            return "red", f"merge of {day.dt} failed"
        if merge.state == "mismatch" or merge.check_ok is False:
            return "red", f"{day.dt} differs from MySQL"
        if merge.state in ("running", "requested"):
            return "warn", f"{day.dt} merging"
        if merge.state == "waiting":  # merge found it not ready yet: the scheduler looks again
            return "unknown", f"{day.dt} waiting for readiness"
        if merge.check_ok:
            return "ok", f"{day.dt} merged, checked equal"
        return "ok", f"{day.dt} merged (not checked)"
    if day.ready:
        return "warn", f"{day.dt} ready, not merged yet"
    return "unknown", f"{day.dt} not ready yet"


def freshness_from_metrics(
    metrics: Metrics, target: str, table: str, source_event_s: float | None, now: float
) -> Freshness:
    """A mirror target's freshness from ``cdc_mirror_last_applied_timestamp_seconds``."""
    applied = metrics.values(
        "cdc_mirror_last_applied_timestamp_seconds", target=target, table=table
    )
    if not applied:
        reports = metrics.find("cdc_mirror_config_version", target=target)
        detail = (
            "no change of this table applied since the mirror started"
            if reports
            else f"no {target} mirror reports metrics"
        )
        return Freshness(target, None, None, down=not reports, detail=detail)
    newest = max(applied)
    behind = None if source_event_s is None else max(0.0, source_event_s - newest)
    return Freshness(target, max(0.0, now - newest), behind)


@dataclass(frozen=True, slots=True)
class _Source:
    collector: str
    binlog_offset: int | None
    event_s: float | None
    delay_s: float | None


def _source(metrics: Metrics, instance: str, thresholds: Thresholds, reasons: list[str]) -> _Source:
    collector = collector_state(metrics, instance)
    offset = _first(metrics.values("cdc_collector_committed_binlog_offset", instance=instance))
    events = metrics.values("cdc_collector_last_event_timestamp_seconds", instance=instance)
    delays = metrics.values("cdc_collector_delay_seconds", instance=instance)
    delay = min(delays) if delays else None
    if collector in ("down", "unknown"):
        reasons.append(f"no collector of instance {instance} reports metrics.")
    elif collector == "standby only":
        reasons.append(f"no collector of instance {instance} is active (all stand by).")
    if delay is not None and delay > thresholds.source_delay_warn_s:
        reasons.append(f"the collector is {delay:.0f} s behind MySQL.")
    return _Source(
        collector, None if offset is None else int(offset), max(events) if events else None, delay
    )


def _group_lags(
    offsets: TopicOffsets | None, topic: str, tracker: StallTracker, now: float, reasons: list[str]
) -> tuple[int | None, list[ComponentLag]]:
    """The topic's end offset and each consumer group's lag on it."""
    if offsets is None:
        return None, []
    if offsets.error is not None:
        reasons.append(f"Kafka: {offsets.error}")
        return None, []
    lags = []
    for group in offsets.groups:
        lag = topic_lag(offsets.ends, group.committed)
        position = sum(group.committed.values()) if group.committed else None
        stalled = tracker.observe((group.component, topic), position, lag, now)
        source = f"consumer group {group.group}"
        lags.append(ComponentLag(group.component, lag, source, stalled_s=stalled))
    return sum(offsets.ends.values()), lags


def _lag_reasons(lags: Sequence[ComponentLag], thresholds: Thresholds, reasons: list[str]) -> None:
    for lag in lags:
        if lag.stalled_s >= thresholds.stall_after_s:
            reasons.append(
                f"{lag.component} has not moved for {lag.stalled_s:.0f} s "
                f"with {lag.lag} messages to read."
            )
        elif lag.lag is not None and lag.lag > thresholds.lag_warn:
            reasons.append(f"{lag.component} is {lag.lag} messages behind.")


def _freshness_reasons(
    freshness: Sequence[Freshness], thresholds: Thresholds, reasons: list[str]
) -> None:
    for fresh in freshness:
        if fresh.down:
            reasons.append(f"{fresh.target}: {fresh.detail}.")
        elif fresh.behind_s is not None and fresh.behind_s > thresholds.freshness_warn_s:
            reasons.append(f"{fresh.target} is {fresh.behind_s:.0f} s behind the source.")


def _dead_letters(metrics: Metrics, instance: str, targets: Sequence[str]) -> int | None:
    """Dead letters of the table's pipeline: its instance's collector, the stream writer
    (when it has a lake target) and its targets' mirrors (each counts for all its tables)."""
    dead = [
        *metrics.values("cdc_collector_dead_letters_total", instance=instance),
        *(metrics.values("cdc_stream_writer_dead_letters_total") if "hive" in targets else []),
        *(v for t in targets for v in metrics.values("cdc_mirror_dead_letters_total", target=t)),
    ]
    return int(sum(dead)) if dead else None


DEFAULT_THRESHOLDS = Thresholds()


def table_status(
    *,
    name: str,
    instance: str,
    topic: str,
    targets: Sequence[str],
    metrics: Metrics,
    offsets: TopicOffsets | None,
    merge: MergeRun | None,
    freshness: Sequence[Freshness],
    rule: ReadinessRule,
    tracker: StallTracker,
    now: float,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    days: int = 7,
    initial_load: InitialLoad | None = None,
) -> TableStatus:
    """One table mirror's status from everything gathered; ``reasons`` say, one sentence
    each, what is not well. Red (``flowing``): a component is down or stalled; amber: a lag,
    delay or age above its threshold."""
    reasons: list[str] = []
    source = _source(metrics, instance, thresholds, reasons)
    end_offset, lags = _group_lags(offsets, topic, tracker, now, reasons)
    w_lag, watermark, writer_known = writer_lag(metrics, topic)
    if "hive" in targets:
        if writer_known:
            mark = None if watermark is None else int(watermark)
            stalled_s = tracker.observe(("stream writer", topic), mark, w_lag, now)
            lags.append(ComponentLag("stream writer", w_lag, "writer metrics", stalled_s=stalled_s))
        else:
            lags.append(ComponentLag("stream writer", None, "writer metrics", down=True))
            reasons.append(f"no stream writer reports topic {topic}.")
    _lag_reasons(lags, thresholds, reasons)
    _freshness_reasons(freshness, thresholds, reasons)
    stalled = any(lag.stalled_s >= thresholds.stall_after_s for lag in lags)
    states = day_states(rule, watermark, now, days)
    verdict, verdict_text = yesterday_verdict(
        states[0] if states else None, merge, "hive" in targets
    )
    down = (
        source.collector in ("down", "unknown")
        or any(lag.down for lag in lags)
        or any(f.down for f in freshness)
    )
    flowing: Health = "red" if stalled or down else ("warn" if reasons else "ok")
    return TableStatus(
        name=name,
        instance=instance,
        topic=topic,
        targets=tuple(targets),
        collector=source.collector,
        binlog_offset=source.binlog_offset,
        source_event_s=source.event_s,
        source_delay_s=source.delay_s,
        end_offset=end_offset,
        lags=tuple(lags),
        watermark_s=watermark,
        days=states,
        merge=merge,
        freshness=tuple(freshness),
        dead_letters=_dead_letters(metrics, instance, targets),
        stalled=stalled,
        reasons=tuple(reasons),
        flowing=flowing,
        yesterday=verdict,
        yesterday_text=verdict_text,
        initial_load=initial_load,
    )


# --- charts: rates and lags, not cumulative counters --------------------------------------


def rate(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Per-second increase between consecutive samples of a counter; a reset (the process
    restarted, the value went down) starts over instead of showing a negative rate."""
    out: list[tuple[float, float]] = []
    for (t0, v0), (t1, v1) in pairwise(points):
        if t1 <= t0 or v1 < v0:
            continue
        out.append((t1, (v1 - v0) / (t1 - t0)))
    return out


def overall(statuses: Iterable[TableStatus]) -> dict[str, int]:
    """How many tables are in each state, for the Overview's headline."""
    counts = {
        "flowing": 0,
        "lagging": 0,
        "stalled or down": 0,
        "yesterday red": 0,
        "yesterday good": 0,
    }
    for status in statuses:
        if status.flowing == "ok":
            counts["flowing"] += 1
        elif status.flowing == "warn":
            counts["lagging"] += 1
        else:
            counts["stalled or down"] += 1
        if status.yesterday == "red":
            counts["yesterday red"] += 1
        elif status.yesterday == "ok":
            counts["yesterday good"] += 1
    return counts


class Trends:
    """The Overview's charts, kept in memory from each scrape round's snapshot (an hour):
    rows per second written to the lake and applied per target (rates of the components'
    counters), messages to read per component (each topic counted once), collector delay per
    instance. A restart of the admin starts them afresh; the Monitoring page has the stored
    history."""

    def __init__(self, window_s: float = 3600.0) -> None:
        self._window_s = window_s
        self._points: deque[tuple[float, dict[str, float], dict[str, float], dict[str, float]]]
        self._points = deque()

    def record(self, at: float, metrics: Metrics, tables: Iterable[TableStatus]) -> None:
        if self._points and self._points[-1][0] >= at:
            return  # the same scrape round again
        totals: dict[str, float] = {}
        written = metrics.values("cdc_stream_writer_rows_total")
        if written:
            totals["written to the lake"] = sum(written)
        for _, sample in metrics.find("cdc_mirror_applied_keys_total"):
            label = f"applied to {sample.labels.get('target', '?')}"
            totals[label] = totals.get(label, 0.0) + sample.value
        per_topic: dict[tuple[str, str], int] = {}
        for status in tables:
            for lag in status.lags:
                if lag.lag is not None:
                    per_topic[(lag.component, status.topic)] = lag.lag
        lags: dict[str, float] = {}
        for (component, _topic), messages in per_topic.items():
            lags[component] = lags.get(component, 0.0) + messages
        delays: dict[str, float] = {}
        for _, sample in metrics.find("cdc_collector_delay_seconds"):
            instance = sample.labels.get("instance", "?")
            delays[instance] = min(delays.get(instance, sample.value), sample.value)
        self._points.append((at, totals, lags, delays))
        while self._points and self._points[0][0] < at - self._window_s:
            self._points.popleft()

    def rows_per_second(self) -> list[tuple[str, list[tuple[float, float]]]]:
        return [(label, rate(points)) for label, points in self._series(1)]

    def lags(self) -> list[tuple[str, list[tuple[float, float]]]]:
        return self._series(2)

    def delays(self) -> list[tuple[str, list[tuple[float, float]]]]:
        return self._series(3)

    def _series(self, column: int) -> list[tuple[str, list[tuple[float, float]]]]:
        series: dict[str, list[tuple[float, float]]] = {}
        for point in self._points:
            values: dict[str, float] = point[column]  # type: ignore[assignment]
            for label, value in values.items():
                series.setdefault(label, []).append((point[0], value))
        return sorted(series.items())


def utc_now() -> float:
    return datetime.now(UTC).timestamp()
