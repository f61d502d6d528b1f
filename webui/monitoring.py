"""Monitoring: scrape the components' Prometheus endpoints into ``metric_samples`` and draw
charts from there as inline SVG (rendered here, no JavaScript, nothing from a CDN).

The scraper keeps only cdc-mirror's own metrics (names starting ``cdc_``). A target that
does not answer is logged once per failure streak and charted as a gap, never as zero.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape
from itertools import pairwise

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import ScrapeTarget
from webui.models import MetricSample
from webui.status import Sample, Scrape

log = logging.getLogger(__name__)

METRIC_PREFIX = "cdc_"
# Samples older than the retention are deleted at most this often.
PRUNE_EVERY_S = 300.0


@dataclass(frozen=True)
class Panel:
    """One chart: every series whose metric name matches one of ``patterns``.

    ``mean_of`` names a histogram instead: the chart shows, per label set (e.g. each mirror
    target), its mean observation between two scrapes, Δ``_sum`` / Δ``_count`` (what
    ``rate(x_sum) / rate(x_count)`` gives in PromQL); a scrape with no new observation is a gap.
    """

    title: str
    patterns: tuple[str, ...] = ()
    unit: str = ""
    mean_of: str | None = None


PANELS: tuple[Panel, ...] = (
    Panel("Collection delay per instance", ("cdc_collector_delay_seconds",), "s"),
    Panel("Active collectors (1 active, 0 standby)", ("cdc_collector_active",)),
    Panel("Kafka consumer lag", ("cdc_*lag*",), "messages"),
    Panel(
        "Mirror freshness per target: MySQL commit → visible (mean per scrape)",
        unit="s",
        mean_of="cdc_mirror_freshness_seconds",
    ),
    Panel("Writer watermark", ("cdc_*watermark*",), "unix s"),
    Panel("Ready days", ("cdc_*ready*",)),
    Panel("Merge runs and check results", ("cdc_merge_*", "cdc_*check*")),
    Panel("Dead letters", ("cdc_*dead_letter*",), "total"),
    Panel(
        "Rows published, written, applied",
        ("cdc_collector_rows_total", "cdc_stream_writer_rows_total", "cdc_mirror_rows_total"),
        "total",
    ),
)


def cdc_samples(text: str) -> list[Sample]:
    """Prometheus text exposition → cdc-mirror's own samples (parsed by prometheus_client's
    parser). Pure."""
    return [
        Sample(sample.name, sample.labels, float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        # Histogram buckets would multiply the samples stored; _sum and _count remain.
        if sample.name.startswith(METRIC_PREFIX)
        and not sample.name.endswith(("_created", "_bucket"))
    ]


def sample_rows(samples: Iterable[Sample], target: str, at: float) -> list[MetricSample]:
    return [
        MetricSample(
            at=at,
            target=target,
            name=sample.name,
            labels=",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())),
            value=sample.value,
        )
        for sample in samples
    ]


def parse_samples(text: str, target: str, at: float) -> list[MetricSample]:
    """Prometheus text exposition → sample rows of cdc-mirror's own metrics. Pure."""
    return sample_rows(cdc_samples(text), target, at)


class Scraper:
    """Scrapes every target each ``interval_s`` in a daemon thread until ``stop()``."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        targets: list[ScrapeTarget],
        interval_s: float,
        retention_days: int,
        on_round: Callable[[list[Scrape]], None] | None = None,
    ) -> None:
        """``on_round``: handed every round's answers (the status pages build on them, so
        nothing is scraped twice)."""
        self._on_round = on_round
        self._sessions = sessions
        self._targets = targets
        self._interval = interval_s
        self._retention_s = retention_days * 86400.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()
        self._pruned_at = 0.0

    def start(self) -> None:
        if not self._targets:
            return
        self._thread = threading.Thread(target=self._loop, name="webui-scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.is_set():
                self.scrape_once(client)
                self._stop.wait(self._interval)

    def scrape_once(self, client: httpx.Client) -> int:
        """One round over all targets; returns the number of samples stored."""
        at = time.time()
        stored = 0
        answers: list[Scrape] = []
        for target in self._targets:
            try:
                response = client.get(target.url)
                response.raise_for_status()
                samples = cdc_samples(response.text)
            except (httpx.HTTPError, ValueError) as exc:
                answers.append(Scrape(target.name, target.url, False, error=str(exc)[:200]))
                if target.name not in self._failing:
                    log.warning("metrics of %s (%s) unavailable: %s", target.name, target.url, exc)
                    self._failing.add(target.name)
                continue
            answers.append(Scrape(target.name, target.url, True, tuple(samples)))
            if target.name in self._failing:
                log.info("metrics of %s answer again", target.name)
                self._failing.discard(target.name)
            rows = [
                {
                    "at": at,
                    "target": target.name,
                    "name": sample.name,
                    "labels": ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())),
                    "value": sample.value,
                }
                for sample in samples
            ]
            if rows:
                # A bulk insert: thousands of ORM objects a round held the web server's
                # threads (the GIL) for longer than a page takes.
                with self._sessions.begin() as db:
                    db.execute(insert(MetricSample), rows)
            stored += len(rows)
        if at - self._pruned_at >= PRUNE_EVERY_S:
            # No index serves "at <" alone: prune every few minutes, not every round.
            with self._sessions.begin() as db:
                db.execute(delete(MetricSample).where(MetricSample.at < at - self._retention_s))
            self._pruned_at = at
        if self._on_round is not None:
            try:
                self._on_round(answers)
            except Exception:  # the scraping goes on; the status pages say what they have
                log.exception("the scrape's answers could not be handed on")
        return stored


@dataclass(frozen=True)
class Series:
    label: str
    points: list[tuple[float, float]]  # (unix seconds, value), time ascending


# What a chart reads of each stored sample.
_SAMPLE_COLUMNS = (
    MetricSample.target,
    MetricSample.name,
    MetricSample.labels,
    MetricSample.at,
    MetricSample.value,
)


def _series_label(target: str, metric: str, labels: str) -> str:
    """A chart line's name: the target, the metric without the product's prefix, its labels."""
    short = metric.removeprefix(METRIC_PREFIX)
    return f"{target} {short}{{{labels}}}" if labels else f"{target} {short}"


def load_series(db: Session, panel: Panel, since: float) -> list[Series]:
    if panel.mean_of is not None:
        return _histogram_means(db, panel.mean_of, since)
    names = list(db.scalars(select(MetricSample.name).where(MetricSample.at >= since).distinct()))
    wanted = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in panel.patterns)]
    if not wanted:
        return []
    grouped: dict[str, list[tuple[float, float]]] = defaultdict(list)
    rows = db.execute(
        select(*_SAMPLE_COLUMNS)
        .where(MetricSample.name.in_(wanted), MetricSample.at >= since)
        .order_by(MetricSample.at)
    )
    for target, name, labels, at, value in rows:
        grouped[_series_label(target, name, labels)].append((at, value))
    return [Series(label, points) for label, points in sorted(grouped.items())]


def _histogram_means(db: Session, histogram: str, since: float) -> list[Series]:
    """Per (target, labels), the mean of the observations made between consecutive scrapes."""
    totals: dict[tuple[str, str], dict[float, dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    rows = db.execute(
        select(*_SAMPLE_COLUMNS).where(
            MetricSample.name.in_([f"{histogram}_sum", f"{histogram}_count"]),
            MetricSample.at >= since,
        )
    )
    for target, name, labels, at, value in rows:
        totals[(target, labels)][at][name.rsplit("_", 1)[-1]] = value
    found: list[Series] = []
    for (target, labels), by_time in sorted(totals.items()):
        points = _means(sorted((at, v) for at, v in by_time.items() if len(v) == 2))
        found.append(Series(_series_label(target, histogram, labels), points))
    return found


def _means(scrapes: list[tuple[float, dict[str, float]]]) -> list[tuple[float, float]]:
    """Pure: (at, Δsum/Δcount) between consecutive scrapes that saw new observations (a
    restarted process, whose count went down, starts over)."""
    points: list[tuple[float, float]] = []
    for (_, before), (at, now) in pairwise(scrapes):
        observed = now["count"] - before["count"]
        if observed > 0:
            points.append((at, (now["sum"] - before["sum"]) / observed))
    return points


_COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")


def render_svg(
    series: Iterable[Series], width: int = 640, height: int = 220, unit: str = ""
) -> str:
    """A line chart as an SVG string (values escaped). Pure."""
    all_series = [s for s in series if s.points]
    if not all_series:
        return (
            f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="no samples yet"><text x="{width // 2}" y="{height // 2}" '
            f'text-anchor="middle" class="empty">no samples yet</text></svg>'
        )
    left, right, top, bottom = 60, 10, 10, 30
    xs = [t for s in all_series for t, _ in s.points]
    ys = [v for s in all_series for _, v in s.points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, *ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    plot_w, plot_h = width - left - right, height - top - bottom
    # Spans of a day or more (e.g. hourly detections) need the date to be read right.
    stamp = "%m-%d %H:%M" if x1 - x0 >= 86400 - 3600 else "%H:%M:%S"

    def sx(t: float) -> float:
        return left + (t - x0) / (x1 - x0) * plot_w

    def sy(v: float) -> float:
        return top + plot_h - (v - y0) / (y1 - y0) * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="chart of {len(all_series)} series">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" '
        'class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>',
        f'<text x="{left - 4}" y="{top + 10}" text-anchor="end" class="tick">'
        f"{escape(_fmt(y1))}</text>",
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" class="tick">'
        f"{escape(_fmt(y0))}</text>",
        f'<text x="{left}" y="{height - 8}" class="tick">'
        f"{escape(time.strftime(stamp, time.gmtime(x0)))} UTC</text>",
        f'<text x="{width - right}" y="{height - 8}" text-anchor="end" class="tick">'
        f"{escape(time.strftime(stamp, time.gmtime(x1)))}</text>",
    ]
    if unit:
        # Inside the plot, right of the axis: left of it sits the largest value's tick.
        parts.append(f'<text x="{left + 6}" y="{top + 10}" class="tick">{escape(unit)}</text>')
    for index, s in enumerate(all_series):
        colour = _COLOURS[index % len(_COLOURS)]
        points = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in s.points)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}">'
            f"<title>{escape(s.label)}</title></polyline>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _fmt(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:g}"
