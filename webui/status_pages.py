"""Per-table status pages (issue 22, item 4): the Overview's table of mirrors and a status
page per mirror (``/status/{name}``), with the same as JSON (``/api/status``,
``/api/status/{name}``).

Figures come from ``StatusService`` (``webui.status_sources``): a snapshot refreshed in the
background, so a page never waits for a component, Kafka or a store. Charts show rates and
lags from the scraped samples (``metric_samples``), never cumulative counters; each chart
reads only its own series (the samples' (name, labels, at) index), named exactly from the
labels the components report now.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response
from markupsafe import Markup
from pydantic import BaseModel
from sqlalchemy import func, literal, select, union_all
from sqlalchemy.orm import Session

from webui import admin, control
from webui.api import DB as ApiDB
from webui.api import Reader
from webui.context import context
from webui.models import MetricSample, TableMirrorRow
from webui.monitoring import Series, render_svg
from webui.pages import DB, TEMPLATES, PageUser, render
from webui.status import Metrics, TableStatus, Trends, overall, rate, sum_by_time
from webui.status_sources import StatusService, StatusSnapshot

# Charts cover this much time: enough to see a trend, little enough to stay fast.
CHART_WINDOW_S = 3600.0

pages = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api", tags=["status"])

_lock = threading.Lock()


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
        "status_charts": _overview_charts(service.trends),
    }


_FLOWING = {"ok": "flowing", "warn": "lagging", "unknown": "?"}
_rows_cache: tuple[tuple[float, tuple[str, ...]], Markup] | None = None


def _rows_html(snapshot: StatusSnapshot, rows: list[tuple[str, TableStatus | None]]) -> Markup:
    """The Overview's table rows, rendered once per snapshot and list of mirrors (they hold
    nothing of the user's): 500 rows through Jinja cost more than the rest of the page."""
    global _rows_cache  # noqa: PLW0603 - one cache for the process, guarded by _lock
    key = (snapshot.at, tuple(name for name, _ in rows))
    with _lock:
        if _rows_cache is not None and _rows_cache[0] == key:
            return _rows_cache[1]
    html = Markup(  # noqa: S704 - rendered by the autoescaping environment
        TEMPLATES.env.get_template("_status_rows.html").render(rows=rows, flowing=_FLOWING)
    )
    with _lock:
        _rows_cache = (key, html)
    return html


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
    charts = (
        _table_charts(db, snapshot.metrics, status, time.time() - CHART_WINDOW_S)
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
    db: Session, metrics: Metrics, status: TableStatus, since: float
) -> list[dict[str, Any]]:
    rows = [
        Series(f"lake ({_label(s.labels, 'writer')})", rate(points))
        for s, points in _exact_series(
            db, metrics, "cdc_stream_writer_rows_total", since, table=status.name
        )
    ] + [
        Series(f"{_label(s.labels, 'target')}", rate(points))
        for s, points in _exact_series(
            db, metrics, "cdc_mirror_rows_total", since, table=status.name
        )
    ]
    lag_by_component: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    for s, points in _exact_series(
        db, metrics, "cdc_mirror_consumer_lag", since, topic=status.topic
    ):
        lag_by_component[f"mirror {_label(s.labels, 'target')}"].append(points)
    for _, points in _exact_series(
        db, metrics, "cdc_stream_writer_lag_messages", since, topic=status.topic
    ):
        lag_by_component["stream writer"].append(points)
    lags = [Series(c, sum_by_time(p)) for c, p in sorted(lag_by_component.items())]
    delay = [
        Series(f"collector {status.instance}", points)
        for _, points in _exact_series(
            db, metrics, "cdc_collector_delay_seconds", since, instance=status.instance
        )
    ]
    freshness = [
        Series(
            f"{_label(s.labels, 'target')}",
            [(at, max(0.0, at - value)) for at, value in points],
        )
        for s, points in _exact_series(
            db, metrics, "cdc_mirror_last_applied_timestamp_seconds", since, table=status.name
        )
    ]
    return [
        _chart("Rows per second of this table", rows, "rows/s"),
        _chart(f"Messages to read on {status.topic} (lag)", lags, "messages"),
        _chart("Age of the last applied change", freshness, "s"),
        _chart(f"Collector delay of {status.instance}", delay, "s"),
    ]


# --- JSON ---------------------------------------------------------------------------------


class StatusOut(BaseModel):
    """The snapshot's time, the problems met gathering it, and a status per table mirror."""

    at: float
    gathering: bool
    problems: list[str]
    tables: list[TableStatus]


_json_cache: tuple[tuple[int, float, tuple[str, ...]], bytes] | None = None


@api.get("/status", response_model=StatusOut)
def status_list(db: ApiDB, service: Status, _: Reader) -> Response:
    """Serialised once per snapshot and list of mirrors, like the Overview's rows: 500
    statuses validated and dumped on every request were the answer's time (issue 22, item 8)."""
    global _json_cache  # noqa: PLW0603 - one cache for the process, guarded by _lock
    snapshot = service.snapshot()
    names = tuple(db.scalars(select(TableMirrorRow.name).order_by(TableMirrorRow.name)))
    key = (id(snapshot), snapshot.at, names)
    with _lock:
        if _json_cache is not None and _json_cache[0] == key:
            return Response(_json_cache[1], media_type="application/json")
    body = (
        StatusOut(
            at=snapshot.at,
            gathering=snapshot.gathering,
            problems=list(snapshot.problems),
            tables=[snapshot.tables[n] for n in names if n in snapshot.tables],
        )
        .model_dump_json()
        .encode()
    )
    with _lock:
        _json_cache = (key, body)
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


def _label(labels: str | dict[str, str], key: str) -> str:
    if isinstance(labels, dict):
        return labels.get(key, "?")
    for part in labels.split(","):
        k, _, v = part.partition("=")
        if k == key:
            return v
    return "?"


def _gauge_series(
    db: Session, name: str, since: float
) -> list[tuple[str, list[tuple[float, float]]]]:
    """Every series of ``name`` (few: one per process or target), by labels."""
    grouped: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for labels, at, value in db.execute(
        select(MetricSample.labels, MetricSample.at, MetricSample.value)
        .where(MetricSample.name == name, MetricSample.at >= since)
        .order_by(MetricSample.at)
    ):
        grouped[labels].append((at, value))
    return sorted(grouped.items())


def _summed_by_endpoint(
    db: Session, names: Iterable[str], since: float
) -> list[tuple[str, list[tuple[float, float]]]]:
    """Each metric summed over its series per scraped endpoint and scrape (the database
    adds up; a component's partitions make many series)."""
    grouped: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for target, at, total in db.execute(
        select(MetricSample.target, MetricSample.at, func.sum(MetricSample.value))
        .where(MetricSample.name.in_(list(names)), MetricSample.at >= since)
        .group_by(MetricSample.target, MetricSample.at)
        .order_by(MetricSample.at)
    ):
        grouped[target].append((at, float(total)))
    return sorted(grouped.items())


def _exact_series(
    db: Session, metrics: Metrics, name: str, since: float, **match: str
) -> list[tuple[Any, list[tuple[float, float]]]]:
    """The stored samples of the series of ``name`` whose labels include ``match``, as the
    components report them now; read by exact labels."""
    samples = [s for _, s in metrics.find(name, **match)]
    if not samples:
        return []
    by_labels = {",".join(f"{k}={v}" for k, v in sorted(s.labels.items())): s for s in samples}
    ordered = sorted(by_labels.items())
    # One statement, a branch per series by equality: SQLite reads each series' own range of
    # the (name, labels, at) index (an IN list may make it scan every series of the metric).
    query = union_all(
        *(
            select(literal(n).label("series"), MetricSample.at, MetricSample.value).where(
                MetricSample.name == name,
                MetricSample.labels == labels,
                MetricSample.at >= since,
            )
            for n, (labels, _) in enumerate(ordered)
        )
    )
    points: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for series, at, value in db.execute(query):
        points[int(series)].append((float(at), float(value)))
    return [(sample, sorted(points[n])) for n, (_, sample) in enumerate(ordered) if points.get(n)]
