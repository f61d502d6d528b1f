"""Per-table status pages (issue 22, item 4): the Overview's table of mirrors and a status
page per mirror (``/status/{name}``), with the same as JSON (``/api/status``,
``/api/status/{name}``).

Figures come from ``StatusService`` (``webui.status_sources``): a snapshot refreshed in the
background, so a page never waits for a component, Kafka or a store. Charts show rates and
lags from the scraped samples (``metric_samples``), never cumulative counters; a mirror's
charts read only its own series (the samples' (name, labels, at, value) index), named
exactly from the labels the components report now, added up and thinned to the chart's
points by the database (``_chart_points``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response
from markupsafe import Markup
from pydantic import BaseModel
from sqlalchemy import Float, Integer, Select, String, bindparam, cast, func, select, union_all
from sqlalchemy.orm import Session

from webui import admin, control
from webui.api import DB as ApiDB
from webui.api import Reader
from webui.context import context
from webui.models import MetricSample, TableMirrorRow
from webui.monitoring import Series, render_svg
from webui.pages import DB, TEMPLATES, PageUser, render
from webui.status import Metrics, Sample, TableStatus, Trends, overall, rate
from webui.status_sources import StatusService, StatusSnapshot

# Charts cover this much time: enough to see a trend, little enough to stay fast.
CHART_WINDOW_S = 3600.0
# Points per line of a mirror's chart at most: one per 30 s of the hour, a point every ~4 px
# of a chart at its narrowest (520-px panels), closer than its 1.5-px lines show apart; the
# database thins the samples (a scrape every 15 s by default) to them.
CHART_POINTS = 120

pages = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api", tags=["status"])


K = TypeVar("K")
V = TypeVar("V")


class _PerSnapshot(Generic[K, V]):
    """A value made from the status snapshot and the list of mirrors, kept for one key (the
    snapshot and the list) and made once per key: a request that finds it being made waits
    for it instead of making the same again alongside (two renders of 500 rows at once each
    took twice as long on the shared cores)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the kept key and value
        self._making = threading.Lock()  # one maker at a time
        self._kept: tuple[K, V] | None = None

    def get(self, key: K, make: Callable[[], V]) -> V:
        kept = self._kept_for(key)
        if kept is not None:
            return kept[1]
        with self._making:
            kept = self._kept_for(key)  # made by the request waited for
            if kept is not None:
                return kept[1]
            value = make()
            with self._lock:
                self._kept = (key, value)
            return value

    def _kept_for(self, key: K) -> tuple[K, V] | None:
        with self._lock:
            kept = self._kept
        return kept if kept is not None and kept[0] == key else None


def status_service(request: Request) -> StatusService:
    """The app's one ``StatusService`` (``create_app`` makes it; a test may put its own)."""
    service = request.app.state.status
    assert isinstance(service, StatusService)
    return service


Status = Annotated[StatusService, Depends(status_service)]


# --- the Overview's part ------------------------------------------------------------------


def overview_values(request: Request, db: Session) -> dict[str, Any]:
    """What the Overview shows of the tables: a row per mirror (a mirror added since the
    last snapshot shows as being gathered), the headline counts, the problems, and charts of
    rates and lags."""
    service = status_service(request)
    snapshot = service.snapshot()
    names = list(db.scalars(select(TableMirrorRow.name).order_by(TableMirrorRow.name)))
    rows = [(name, snapshot.tables.get(name)) for name in names]
    return {
        "status_rows_html": _rows_html(snapshot, rows),
        "status_counts": overall(s for _, s in rows if s is not None),
        "status_snapshot": snapshot,
        # The trends gain a point only when a snapshot is built: drawn once per snapshot (an
        # hour of 20 instances' delays is thousands of points).
        "status_charts": _charts_made.get(
            (id(snapshot), snapshot.at), lambda: _overview_charts(service.trends)
        ),
    }


_FLOWING = {"ok": "flowing", "warn": "lagging", "unknown": "?"}
_rows_made: _PerSnapshot[tuple[float, tuple[str, ...]], Markup] = _PerSnapshot()
_charts_made: _PerSnapshot[tuple[int, float], list[dict[str, Any]]] = _PerSnapshot()


def _rows_html(snapshot: StatusSnapshot, rows: list[tuple[str, TableStatus | None]]) -> Markup:
    """The Overview's table rows, rendered once per snapshot and list of mirrors (they hold
    nothing of the user's): 500 rows through Jinja cost more than the rest of the page."""

    def render_rows() -> Markup:
        return Markup(  # noqa: S704 - rendered by the autoescaping environment
            TEMPLATES.env.get_template("_status_rows.html").render(rows=rows, flowing=_FLOWING)
        )

    return _rows_made.get((snapshot.at, tuple(name for name, _ in rows)), render_rows)


def _overview_charts(trends: Trends) -> list[dict[str, Any]]:
    return [
        _chart(
            "Rows per second: written to the lake, applied to the targets",
            [Series(label, points) for label, points in trends.rows_per_second()],
            "rows/s",
        ),
        _chart(
            "Messages to read per component (lag)",
            [Series(label, points) for label, points in trends.lags()],
            "messages",
        ),
        _chart(
            "Collector delay behind MySQL",
            [Series(f"collector {label}", points) for label, points in trends.delays()],
            "s",
        ),
    ]


# --- a mirror's page ----------------------------------------------------------------------


@pages.get("/status/{name}")
def table_status_page(
    name: str, request: Request, db: DB, service: Status, who: PageUser
) -> Response:
    mirror = admin.table_mirror(admin.get_table_mirror(db, name))  # 404 for an unknown one
    snapshot = service.snapshot()
    status = snapshot.tables.get(name)
    now = time.time()
    charts = (
        _table_charts(db, snapshot.metrics, status, now - CHART_WINDOW_S, now)
        if status is not None and snapshot.metrics is not None
        else []
    )
    validations = control.validation_history(db, name)
    return render(
        request,
        "table_status.html",
        who,
        mirror_name=name,
        status=status,
        snapshot=snapshot,
        charts=charts,
        initial_load=_initial_loads(request, name),
        validations=validations,
        last_validations=control.last_validations(validations),
        cadence=mirror.validation_every_h,
        policy=mirror,
    )


def _initial_loads(request: Request, name: str) -> list[Any]:
    """The replays that loaded (or load) this mirror's existing rows (issue 22, item 2)."""
    replays = context(request).replays
    runs = getattr(replays, "for_table_mirror", None)
    return list(runs(name)) if callable(runs) else []


def _table_charts(
    db: Session, metrics: Metrics, status: TableStatus, since: float, until: float
) -> list[dict[str, Any]]:
    """The mirror's four charts from its stored samples, in one statement (``_chart_points``):
    rows per second (rates of the writer's and mirrors' counters), messages to read per
    consumer (its partitions' lags added up), the age of the last applied change per target
    and the collector's delay."""
    lines: list[_Line] = []
    for sample in _reported(metrics, "cdc_stream_writer_rows_total", table=status.name):
        lines.append(_Line(0, f"lake ({sample.labels.get('writer', '?')})", sample))
    for sample in _reported(metrics, "cdc_mirror_rows_total", table=status.name):
        lines.append(_Line(0, sample.labels.get("target", "?"), sample))
    for sample in _reported(metrics, "cdc_mirror_consumer_lag", topic=status.topic):
        lines.append(_Line(1, f"mirror {sample.labels.get('target', '?')}", sample))
    for sample in _reported(metrics, "cdc_stream_writer_lag_messages", topic=status.topic):
        lines.append(_Line(1, "stream writer", sample))
    for sample in _reported(
        metrics, "cdc_mirror_last_applied_timestamp_seconds", table=status.name
    ):
        lines.append(_Line(2, sample.labels.get("target", "?"), sample, age=True))
    for sample in _reported(metrics, "cdc_collector_delay_seconds", instance=status.instance):
        lines.append(_Line(3, f"collector {status.instance}", sample))
    points = _chart_points(db, lines, since, until)
    charts: list[list[Series]] = [[], [], [], []]
    for (chart, label), found in sorted(points.items()):
        if chart == 0:  # counters: drawn as their increase per second
            shown = rate(found)
        elif chart == 2:
            shown = [(at, max(0.0, age)) for at, age in found]
        else:
            shown = found
        charts[chart].append(Series(label, shown))
    return [
        _chart("Rows per second of this table", charts[0], "rows/s"),
        _chart(f"Messages to read on {status.topic} (lag)", charts[1], "messages"),
        _chart("Age of the last applied change", charts[2], "s"),
        _chart(f"Collector delay of {status.instance}", charts[3], "s"),
    ]


# --- JSON ---------------------------------------------------------------------------------


class StatusOut(BaseModel):
    """The snapshot's time, the problems met gathering it, and a status per table mirror."""

    at: float
    gathering: bool
    problems: list[str]
    tables: list[TableStatus]


_json_made: _PerSnapshot[tuple[int, float, tuple[str, ...]], bytes] = _PerSnapshot()


@api.get("/status", response_model=StatusOut)
def status_list(db: ApiDB, service: Status, _: Reader) -> Response:
    """Serialised once per snapshot and list of mirrors, like the Overview's rows: 500
    statuses validated and dumped on every request were the answer's time (issue 22, item 8)."""
    snapshot = service.snapshot()
    names = tuple(db.scalars(select(TableMirrorRow.name).order_by(TableMirrorRow.name)))

    def serialise() -> bytes:
        return (
            StatusOut(
                at=snapshot.at,
                gathering=snapshot.gathering,
                problems=list(snapshot.problems),
                tables=[snapshot.tables[n] for n in names if n in snapshot.tables],
            )
            .model_dump_json()
            .encode()
        )

    body = _json_made.get((id(snapshot), snapshot.at, names), serialise)
    return Response(body, media_type="application/json")


@api.get("/status/{name}", response_model=TableStatus)
def status_one(name: str, db: ApiDB, service: Status, _: Reader) -> TableStatus:
    admin.get_table_mirror(db, name)  # 404 for an unknown mirror
    status = service.snapshot().tables.get(name)
    if status is None:
        raise HTTPException(503, f"the status of {name!r} is being gathered; ask again shortly.")
    return status


# --- samples ------------------------------------------------------------------------------


def _chart(title: str, series: Sequence[Series], unit: str) -> dict[str, Any]:
    shown = [s for s in series if s.points]
    return {"title": title, "svg": render_svg(shown, unit=unit), "labels": [s.label for s in shown]}


@dataclass(frozen=True)
class _Line:
    """One stored series drawn on a chart's line; the series of one line (a topic's
    partitions) are added up per scrape.

    ``age``: the series is a unix time (a last applied change): drawn as its age at each
    scrape, ``at − value``.
    """

    chart: int
    label: str
    sample: Sample
    age: bool = False


def _reported(metrics: Metrics, name: str, **match: str) -> list[Sample]:
    """The series of ``name`` whose labels include ``match``, as the components report them
    now (one per label set)."""
    by_labels = {_stored_labels(s.labels): s for _, s in metrics.find(name, **match)}
    return [sample for _, sample in sorted(by_labels.items())]


@functools.lru_cache(maxsize=64)
def _chart_statement(ages: tuple[bool, ...]) -> Select[int, float, float]:
    """``_chart_points``' statement for series of these kinds (``_Line.age``), its values
    bound at execution: built once per shape, not per request (building 15 branches'
    expressions cost more than running them)."""
    branches = []
    for n, age in enumerate(ages):
        value = MetricSample.at - MetricSample.value if age else MetricSample.value
        branches.append(
            select(
                bindparam(f"line{n}", type_=Integer).label("line"),
                MetricSample.at,
                value.label("value"),
            ).where(
                MetricSample.name == bindparam(f"name{n}", type_=String),
                MetricSample.labels == bindparam(f"labels{n}", type_=String),
                MetricSample.at >= bindparam("since", type_=Float),
                MetricSample.at <= bindparam("until", type_=Float),
            )
        )
    samples = union_all(*branches).subquery()
    per_scrape = (
        select(samples.c.line, samples.c.at, func.sum(samples.c.value).label("value"))
        .group_by(samples.c.line, samples.c.at)
        .subquery()
    )
    # A point's index in the window; the cast truncates (SQLite) or rounds (PostgreSQL,
    # MariaDB): either way points a step apart.
    since, step = bindparam("since", type_=Float), bindparam("step", type_=Float)
    bucket = cast((per_scrape.c.at - since) / step, Integer)
    # A point: its last scrape's time and the largest value of its span: a gauge's spike
    # stays visible, and a counter's largest is its last (it only grows; a restart inside a
    # span skips that span's rate, as ``rate`` skips a reset).
    return select(
        per_scrape.c.line, func.max(per_scrape.c.at), func.max(per_scrape.c.value)
    ).group_by(per_scrape.c.line, bucket)


def _stored_labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))  # as the scraper stores them


def _chart_points(
    db: Session, lines: Sequence[_Line], since: float, until: float
) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """Each (chart, label)'s points between ``since`` and ``until``, aggregated by the
    database: its series added up per scrape, then one point per ``CHART_POINTS``-th of the
    window (its last scrape's time, the largest value of its span), time ascending.

    One statement for the whole page: a branch per series by equality, so SQLite reads each
    series' own range of the (name, labels, at, value) index (an IN list may make it scan every
    series of the metric), and the page receives ~``CHART_POINTS`` rows per line instead of
    every sample (3,500 rows a page were its time with 240 scrapes an hour; issue 22, item 8).
    """
    if not lines:
        return {}
    ids: dict[tuple[int, str], int] = {}
    params: dict[str, Any] = {"since": since, "until": until}
    params["step"] = max((until - since) / CHART_POINTS, 1e-9)
    for n, line in enumerate(lines):
        params[f"line{n}"] = ids.setdefault((line.chart, line.label), len(ids))
        params[f"name{n}"] = line.sample.name
        params[f"labels{n}"] = _stored_labels(line.sample.labels)
    query = _chart_statement(tuple(line.age for line in lines))
    labels = {line_id: key for key, line_id in ids.items()}
    points: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for line_id, at, value in db.execute(query, params).all():
        points[labels[int(line_id)]].append((float(at), float(value)))
    return {key: sorted(found) for key, found in points.items()}
