"""Gathering the per-table status (``webui.status``): the components' metrics endpoints,
Kafka's end offsets and the mirrors' consumer groups, the scheduler's run history and merge's
textfile, each target's freshness. The I/O half; ``webui.status`` derives.

``StatusService.snapshot()`` answers at once from a cache refreshed in the background (one
refresh at a time, at most every ``ttl_s``), so a page never waits for a slow endpoint or
Kafka; the very first request after a start shows the tables as being gathered (or waits
``first_wait_s`` for them). Every source has a short
timeout, and a source that does not answer shows as down in the snapshot, never as an error.

**Where a target's freshness comes from** is a ``FreshnessSource`` per target kind
(``FRESHNESS_SOURCES``; ``register_freshness`` replaces one): by default every mirror target
(Redis, the warehouse, Kudu) reads ``cdc_mirror_last_applied_timestamp_seconds`` from the
mirror's metrics; a target kind that can tell better from its store plugs its own in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import KafkaSettings, ScrapeTarget, Settings
from webui import admin
from webui.models import ReplayJob, SchedulerRun
from webui.monitoring import cdc_samples
from webui.status import (
    DEFAULT_THRESHOLDS,
    Freshness,
    GroupOffsets,
    InitialLoad,
    MergeRun,
    Metrics,
    ReadinessRule,
    Sample,
    Scrape,
    StallTracker,
    TableStatus,
    Thresholds,
    TopicOffsets,
    Trends,
    freshness_from_metrics,
    table_status,
)

log = logging.getLogger(__name__)

MIRROR_TARGETS = ("redis", "warehouse", "kudu")


# --- freshness per target kind ------------------------------------------------------------


class FreshnessSource(Protocol):
    def freshness(
        self, target: str, table: str, metrics: Metrics, source_event_s: float | None, now: float
    ) -> Freshness:
        """The age of the last change of ``table`` applied to ``target``; a source that
        cannot tell answers ``Freshness(..., down=True, detail=<why>)``, never raises."""
        ...


class MirrorMetricsFreshness:
    """From the mirror's own metric (``cdc_mirror_last_applied_timestamp_seconds``)."""

    def freshness(
        self, target: str, table: str, metrics: Metrics, source_event_s: float | None, now: float
    ) -> Freshness:
        return freshness_from_metrics(metrics, target, table, source_event_s, now)


FRESHNESS_SOURCES: dict[str, FreshnessSource] = dict.fromkeys(
    MIRROR_TARGETS, MirrorMetricsFreshness()
)


def register_freshness(kind: str, source: FreshnessSource) -> None:
    """Where the freshness of targets of ``kind`` comes from (e.g. Kudu reading its tables)."""
    FRESHNESS_SOURCES[kind] = source


# --- metrics endpoints --------------------------------------------------------------------


def parse_metrics(text: str) -> tuple[Sample, ...]:
    """cdc-mirror's own samples (``cdc_*``) of a Prometheus text exposition."""
    return tuple(cdc_samples(text))


def scrape_all(targets: Sequence[ScrapeTarget], timeout_s: float) -> list[Scrape]:
    """Every endpoint at once; one that does not answer in ``timeout_s`` is down."""

    def one(target: ScrapeTarget) -> Scrape:
        try:
            response = httpx.get(target.url, timeout=timeout_s)
            response.raise_for_status()
            return Scrape(target.name, target.url, True, parse_metrics(response.text))
        except (httpx.HTTPError, ValueError) as exc:
            return Scrape(target.name, target.url, False, error=_sentence(exc))

    if not targets:
        return []
    with ThreadPoolExecutor(min(16, len(targets))) as pool:
        return list(pool.map(one, targets))


def _sentence(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


# --- Kafka ---------------------------------------------------------------------------------


def read_offsets(
    kafka: KafkaSettings,
    topics: Sequence[str],
    groups: Sequence[tuple[str, str]],
    timeout_s: float,
) -> dict[str, TopicOffsets]:
    """Each topic's end offsets and the committed offsets of ``groups`` ((group, component))
    on it. Reads no record. Kafka not answering: every topic carries the sentence."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: PLC0415

    from cdc_platform.kafka import consumer_config  # noqa: PLC0415

    def config(group: str) -> dict[str, object]:
        return {
            **consumer_config(kafka, group),
            "enable.auto.commit": False,
            "socket.timeout.ms": int(timeout_s * 1000),
        }

    found: dict[str, TopicOffsets] = {}
    probe = Consumer(config("cdc-mirror-webui-status"))
    try:
        metadata = probe.list_topics(timeout=timeout_s)
        partitions: dict[str, list[int]] = {}
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None:
                found[topic] = TopicOffsets(topic, error=f"topic {topic} does not exist yet.")
                continue
            partitions[topic] = sorted(meta.partitions)
        ends: dict[str, dict[int, int]] = {}
        for topic, numbers in partitions.items():
            ends[topic] = {
                p: int(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1])
                for p in numbers
            }
        committed: dict[str, list[GroupOffsets]] = {t: [] for t in partitions}
        for group, component in groups:
            reader = Consumer(config(group))
            try:
                wanted = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
                answer = reader.committed(wanted, timeout=timeout_s) if wanted else []
            finally:
                reader.close()
            by_topic: dict[str, dict[int, int]] = {}
            for tp in answer:
                if tp.offset >= 0:
                    by_topic.setdefault(tp.topic, {})[tp.partition] = int(tp.offset)
            for topic in partitions:
                committed[topic].append(GroupOffsets(group, component, by_topic.get(topic, {})))
        for topic in partitions:
            found[topic] = TopicOffsets(topic, ends[topic], tuple(committed[topic]))
    except KafkaException as exc:
        sentence = f"Kafka did not answer ({_sentence(exc)})."
        return {t: TopicOffsets(t, error=sentence) for t in topics}
    finally:
        probe.close()
    return found


# --- merge ---------------------------------------------------------------------------------


def merge_runs_from_history(db: Session) -> dict[str, MergeRun]:
    """Each table's newest merge run of a whole day in the scheduler's history (the runs of
    single hours of tables with hourly snapshots are on the Runs page)."""
    newest = (
        select(func.max(SchedulerRun.id))
        .where(
            SchedulerRun.kind == "merge",
            SchedulerRun.state != "requested",
            SchedulerRun.hour.is_(None),
        )
        .group_by(SchedulerRun.table_name)
    )
    found: dict[str, MergeRun] = {}
    for row in db.scalars(select(SchedulerRun).where(SchedulerRun.id.in_(newest))):
        seconds = (
            row.ended_at - row.started_at
            if row.ended_at is not None and row.started_at is not None
            else None
        )
        found[row.table_name] = MergeRun(
            dt=date.fromisoformat(row.dt) if row.dt else None,
            state=row.state,
            rows=row.rows,
            files=row.files,
            seconds=seconds,
            check_ok=row.check_ok,
            error=row.error,
            ended_at=row.ended_at,
        )
    return found


def initial_loads(db: Session) -> dict[str, InitialLoad]:
    """Each table mirror's newest initial load (a replay job submitted for it)."""
    found: dict[str, InitialLoad] = {}
    rows = db.execute(
        select(
            ReplayJob.table_mirror,
            ReplayJob.run_id,
            ReplayJob.state,
            ReplayJob.rows_done,
            ReplayJob.rows_total,
        )
        .where(ReplayJob.table_mirror.is_not(None))
        .order_by(ReplayJob.created_at.desc())
    )
    for name, run_id, state, done, total in rows:
        if name is not None and name not in found:
            found[name] = InitialLoad(run_id, state, done, done if state == "succeeded" else total)
    return found


def merge_runs_from_textfile(path: Path) -> dict[str, MergeRun]:
    """Each table's last merge as merge's textfile (``merge.metrics_textfile``) says."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from merge.metrics import MergeMetrics  # noqa: PLC0415

    metrics = MergeMetrics(CollectorRegistry())
    try:
        metrics.load(path)
    except (OSError, ValueError) as exc:
        log.debug("merge textfile %s not read: %s", path, exc)
        return {}
    return {
        table: MergeRun(
            dt=run.dt,
            state="failed"
            if run.failed
            else ("mismatch" if run.check_ok is False else "succeeded"),
            rows=run.rows,
            files=run.files,
            seconds=run.seconds,
            check_ok=run.check_ok,
            ended_at=run.last_run_s,
            source="merge metrics",
        )
        for table, run in metrics.tables.items()
    }


# --- the snapshot --------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusSnapshot:
    at: float
    tables: dict[str, TableStatus]
    scrapes: tuple[Scrape, ...] = ()
    problems: tuple[str, ...] = ()
    gathering: bool = False  # the first snapshot is not there yet
    metrics: Metrics | None = None  # what the endpoints answered (the charts' series)


@dataclass
class _Cache:
    snapshot: StatusSnapshot | None = None
    refreshing: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def readiness_rule(settings: Settings) -> ReadinessRule:
    writer = settings.stream_writer
    return ReadinessRule(
        zone=ZoneInfo(writer.time_zone),
        lateness_budget_s=writer.lateness_budget_s,
        pipeline_delay_s=writer.collector_delay_s + writer.kafka_delay_s + writer.writer_delay_s,
    )


class StatusService:
    """Builds ``StatusSnapshot``s in the background and hands out the latest.

    The metrics come from the admin's scraper when it runs (``on_scrape``, every
    ``webui.scrape_interval_s``: nothing is scraped twice); without one, from scraping the
    targets at each refresh. Each scrape round's snapshot adds a point to ``trends``.
    """

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        *,
        ttl_s: float = 5.0,
        first_wait_s: float = 0.0,
        timeout_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        offsets: Callable[[list[str], list[tuple[str, str]]], dict[str, TopicOffsets]]
        | None = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self._settings = settings
        self._sessions = sessions
        self._ttl_s = ttl_s
        self._first_wait_s = first_wait_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._offsets = offsets or (
            lambda topics, groups: read_offsets(settings.kafka, topics, groups, timeout_s * 3)
        )
        self._thresholds = thresholds
        self._tracker = StallTracker()
        self._rule = readiness_rule(settings)
        self._cache = _Cache()
        self._lock = threading.Lock()
        self._scraped: tuple[float, list[Scrape]] | None = None  # the scraper's last round
        self.trends = Trends()

    def on_scrape(self, scrapes: list[Scrape]) -> None:
        """The scraper's answers of a round: the next snapshot is built from them, now (in
        the background; the scraper goes on)."""
        with self._lock:
            self._scraped = (self._clock(), scrapes)
        self._start_refresh(force=True)

    def _start_refresh(self, force: bool = False) -> None:
        with self._lock:
            cache = self._cache
            current = cache.snapshot
            due = force or current is None or self._clock() - current.at >= self._ttl_s
            if due and not cache.refreshing:
                cache.refreshing = True
                cache.done.clear()
                threading.Thread(target=self._refresh, name="webui-status", daemon=True).start()

    def snapshot(self) -> StatusSnapshot:
        self._start_refresh()
        with self._lock:
            cache = self._cache
            current = cache.snapshot
        if current is None:
            cache.done.wait(self._first_wait_s)
            with self._lock:
                current = cache.snapshot
        return current or StatusSnapshot(at=self._clock(), tables={}, gathering=True)

    def refresh_now(self) -> StatusSnapshot:
        """Build a snapshot in this thread (tests, benchmarks)."""
        snapshot = self.build()
        with self._lock:
            self._cache.snapshot = snapshot
        return snapshot

    def _refresh(self) -> None:
        try:
            snapshot = self.build()
        except Exception:  # the next request tries again; the page shows the last snapshot
            log.exception("the status snapshot could not be built")
            snapshot = None
        with self._lock:
            if snapshot is not None:
                self._cache.snapshot = snapshot
            self._cache.refreshing = False
            self._cache.done.set()

    def build(self) -> StatusSnapshot:
        settings = self._settings
        problems: list[str] = []
        with self._sessions() as db:
            mirrors = [admin.table_mirror(row) for row in admin.list_table_mirrors(db)]
            topics = {
                row.name: row.topic or f"{settings.kafka.topic_prefix}{row.name}"
                for row in admin.list_instances(db)
            }
            loads = initial_loads(db)
            try:
                merges = merge_runs_from_history(db)
            except Exception as exc:  # noqa: BLE001 - an older admin database has no history
                log.debug("no scheduler history: %s", exc)
                merges = {}
        textfile = merge_runs_from_textfile(_merge_textfile(settings))
        with self._lock:
            scraped = self._scraped
        if scraped is not None:
            scraped_at, answers = scraped
        else:
            scraped_at = self._clock()
            answers = scrape_all(settings.webui.scrape_targets, self._timeout_s)
        metrics = Metrics(answers)
        for scrape in metrics.down():
            problems.append(f"{scrape.target} ({scrape.url}) does not answer: {scrape.error}")
        mirror_targets = sorted({t for m in mirrors for t in m.targets if t in MIRROR_TARGETS})
        groups = [(f"{settings.mirror.group_prefix}.{t}", f"mirror {t}") for t in mirror_targets]
        wanted = sorted({topics.get(m.instance or "", "") for m in mirrors} - {""})
        offsets: dict[str, TopicOffsets] = {}
        if wanted:
            try:
                offsets = self._offsets(wanted, groups)
            except Exception as exc:  # noqa: BLE001 - Kafka down is a state, not an error
                problems.append(f"Kafka did not answer: {_sentence(exc)}")
        now = self._clock()
        tables: dict[str, TableStatus] = {}
        for mirror in mirrors:
            instance = mirror.instance or ""
            topic = topics.get(instance, f"{settings.kafka.topic_prefix}{instance}")
            event = metrics.values("cdc_collector_last_event_timestamp_seconds", instance=instance)
            source_event = max(event) if event else None
            freshness = [
                FRESHNESS_SOURCES.get(target, MirrorMetricsFreshness()).freshness(
                    target, mirror.name, metrics, source_event, now
                )
                for target in mirror.targets
                if target != "hive"
            ]
            offsets_of = offsets.get(topic)
            if offsets_of is not None and offsets_of.groups:
                own = {f"mirror {t}" for t in mirror.targets}
                offsets_of = TopicOffsets(
                    offsets_of.topic,
                    offsets_of.ends,
                    tuple(g for g in offsets_of.groups if g.component in own),
                    offsets_of.error,
                )
            tables[mirror.name] = table_status(
                name=mirror.name,
                instance=instance,
                topic=topic,
                targets=list(mirror.targets),
                metrics=metrics,
                offsets=offsets_of,
                merge=merges.get(mirror.name) or textfile.get(mirror.name),
                freshness=freshness,
                rule=self._rule,
                tracker=self._tracker,
                now=now,
                thresholds=self._thresholds,
                initial_load=loads.get(mirror.name),
            )
        self.trends.record(scraped_at, metrics, tables.values())
        return StatusSnapshot(now, tables, metrics.scrapes, tuple(problems), metrics=metrics)


def _merge_textfile(settings: Settings) -> Path:
    from merge.metrics import textfile_path  # noqa: PLC0415

    return textfile_path(settings.lake_dir, settings.merge.metrics_textfile)
