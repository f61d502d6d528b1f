"""The JSON API of governance (issue 10): the policy set, detections over time, lineage and its
OpenLineage export. Same authentication and roles as ``webui.api``: viewers read, admins
change (with the session's CSRF token when riding on the cookie), collector tokens read
nothing here (they get the policy set inside ``/api/collector-config/{instance}``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from governance import ColumnPolicy, DetectorRule, LookupTable, StandardiseRule
from webui import governance
from webui.api import _ERRORS, DB, Ctx, Editor, Reader
from webui.detections import HOUR_S, hour_of, load_series
from webui.governance import GovernanceStateIn, GovernanceStateOut, LookupTableSummary
from webui.lineage import all_lineage, dataset_namespaces
from webui.lineage_map import ColumnLineage, Hit, LineageIndex, TableLineage
from webui.openlineage import openlineage_events

router = APIRouter(prefix="/api", responses=_ERRORS)


class PolicySetOut(BaseModel):
    settings: GovernanceStateOut
    detectors: list[DetectorRule]
    policies: list[ColumnPolicy]
    standardise: list[StandardiseRule]
    lookup_tables: list[LookupTableSummary]


def _policy_set(db: DB) -> PolicySetOut:
    return PolicySetOut(
        settings=governance.state_out(governance.state(db)),
        detectors=governance.detectors(db),
        policies=governance.policies(db),
        standardise=governance.standardise_rules(db),
        lookup_tables=governance.lookup_summaries(db),
    )


@router.get("/governance", response_model=PolicySetOut, tags=["governance"])
def get_policy_set(db: DB, _: Reader) -> PolicySetOut:
    """The whole policy set (lookup tables by name and size; read one for its entries)."""
    return _policy_set(db)


@router.put("/governance/settings", response_model=GovernanceStateOut, tags=["governance"])
def put_settings(data: GovernanceStateIn, db: DB, who: Editor) -> GovernanceStateOut:
    return governance.state_out(governance.save_state(db, who.name, data))


@router.get("/governance/detectors", response_model=list[DetectorRule], tags=["governance"])
def list_detectors(db: DB, _: Reader) -> list[DetectorRule]:
    return governance.detectors(db)


@router.post(
    "/governance/detectors", response_model=DetectorRule, status_code=201, tags=["governance"]
)
def create_detector(data: DetectorRule, db: DB, ctx: Ctx, who: Editor) -> DetectorRule:
    governance.save_detector(db, who.name, data, governance.functions(ctx.settings))
    return data


@router.put("/governance/detectors/{name}", response_model=DetectorRule, tags=["governance"])
def update_detector(name: str, data: DetectorRule, db: DB, ctx: Ctx, who: Editor) -> DetectorRule:
    governance.save_detector(db, who.name, data, governance.functions(ctx.settings), existing=name)
    return data


@router.delete("/governance/detectors/{name}", status_code=204, tags=["governance"])
def delete_detector(name: str, db: DB, who: Editor) -> Response:
    governance.delete_detector(db, who.name, name)
    return Response(status_code=204)


@router.get("/governance/policies", response_model=list[ColumnPolicy], tags=["governance"])
def list_policies(db: DB, _: Reader) -> list[ColumnPolicy]:
    return governance.policies(db)


@router.put("/governance/policies", response_model=ColumnPolicy, tags=["governance"])
def put_policy(data: ColumnPolicy, db: DB, ctx: Ctx, who: Editor) -> ColumnPolicy:
    """Create or replace the policy of ``table``/``column`` (``column: "*"``: the table's
    default). A mirrored table's column is checked against the live MySQL schema."""
    governance.save_policy(db, ctx.keys, ctx.schemas, who.name, data)
    return data


@router.delete("/governance/policies/{table}/{column}", status_code=204, tags=["governance"])
def delete_policy(table: str, column: str, db: DB, who: Editor) -> Response:
    governance.delete_policy(db, who.name, table, column)
    return Response(status_code=204)


@router.get("/governance/standardise", response_model=list[StandardiseRule], tags=["governance"])
def list_standardise(db: DB, _: Reader) -> list[StandardiseRule]:
    return governance.standardise_rules(db)


@router.put("/governance/standardise", response_model=StandardiseRule, tags=["governance"])
def put_standardise(data: StandardiseRule, db: DB, ctx: Ctx, who: Editor) -> StandardiseRule:
    """Create or replace the standardisation of ``table``/``column``."""
    governance.save_standardise(
        db, ctx.keys, ctx.schemas, who.name, data, governance.functions(ctx.settings)
    )
    return data


@router.delete("/governance/standardise/{table}/{column}", status_code=204, tags=["governance"])
def delete_standardise(table: str, column: str, db: DB, who: Editor) -> Response:
    governance.delete_standardise(db, who.name, table, column)
    return Response(status_code=204)


@router.get(
    "/governance/lookup-tables", response_model=list[LookupTableSummary], tags=["governance"]
)
def list_lookup_tables(db: DB, _: Reader) -> list[LookupTableSummary]:
    return governance.lookup_summaries(db)


@router.post(
    "/governance/lookup-tables",
    response_model=LookupTableSummary,
    status_code=201,
    tags=["governance"],
)
def create_lookup_table(data: LookupTable, db: DB, who: Editor) -> LookupTableSummary:
    governance.save_lookup_table(db, who.name, data)
    return LookupTableSummary(name=data.name, entries=len(data.entries))


@router.get("/governance/lookup-tables/{name}", response_model=LookupTable, tags=["governance"])
def get_lookup_table(name: str, db: DB, _: Reader) -> LookupTable:
    return governance.get_lookup_table(db, name)


@router.put(
    "/governance/lookup-tables/{name}", response_model=LookupTableSummary, tags=["governance"]
)
def update_lookup_table(name: str, data: LookupTable, db: DB, who: Editor) -> LookupTableSummary:
    """Replace the table's entries."""
    governance.save_lookup_table(db, who.name, data, existing=name)
    return LookupTableSummary(name=data.name, entries=len(data.entries))


@router.delete("/governance/lookup-tables/{name}", status_code=204, tags=["governance"])
def delete_lookup_table(name: str, db: DB, who: Editor) -> Response:
    governance.delete_lookup_table(db, who.name, name)
    return Response(status_code=204)


# --- detections ---------------------------------------------------------------------------


class DetectionSeriesOut(BaseModel):
    label: str
    points: list[tuple[float, float]]


class DetectionTotalOut(BaseModel):
    instance: str
    logical_table: str
    column: str
    detector: str
    action: str
    count: int


class DetectionsOut(BaseModel):
    hours: int
    series: list[DetectionSeriesOut]
    totals: list[DetectionTotalOut]


@router.get("/detections", response_model=DetectionsOut, tags=["governance"])
def detections(
    db: DB,
    _: Reader,
    hours: Annotated[int, Query(ge=1, le=24 * 90)] = 24,
    table: str | None = None,
    column: str | None = None,
    detector: str | None = None,
) -> DetectionsOut:
    """Detections per hour by logical table, column and detector (counts, never values)."""
    now_hour = hour_of(int(time.time() * 1000))
    series, totals = load_series(
        db, now_hour - (hours - 1) * HOUR_S, now_hour, table, column, detector
    )
    return DetectionsOut(
        hours=hours,
        series=[DetectionSeriesOut(label=s.label, points=s.points) for s in series],
        totals=[DetectionTotalOut(**t.__dict__) for t in totals],
    )


# --- lineage ------------------------------------------------------------------------------


class ColumnLineageOut(BaseModel):
    name: str
    mysql_type: str
    policy: str
    standardise: str | None
    note: str
    hive_raw_field: str | None
    hive_snapshot_column: str | None
    warehouse_column: str | None
    redis_field: str | None


class TableLineageOut(BaseModel):
    logical_table: str
    instance: str
    kafka_topic: str
    mysql_tables: list[str]
    hive_raw: str | None
    hive_snapshot: str | None
    warehouse_table: str | None
    redis_prefix: str | None
    columns: list[ColumnLineageOut]
    problem: str | None


class NamedOut(BaseModel):
    kind: str
    name: str


class LineageHitOut(BaseModel):
    kind: str
    matched: str
    direction: str
    logical_table: str
    column: str | None
    note: str | None
    sources: list[str]
    targets: list[NamedOut]


def column_out(column: ColumnLineage) -> ColumnLineageOut:
    return ColumnLineageOut(
        name=column.name,
        mysql_type=column.mysql_type,
        policy=column.policy,
        standardise=column.standardise,
        note=column.note,
        hive_raw_field=column.raw_field,
        hive_snapshot_column=column.snapshot_column,
        warehouse_column=column.warehouse_column,
        redis_field=column.redis_field,
    )


def table_out(table: TableLineage) -> TableLineageOut:
    return TableLineageOut(
        logical_table=table.logical_table,
        instance=table.instance,
        kafka_topic=table.kafka_topic,
        mysql_tables=list(table.mysql_tables),
        hive_raw=table.hive_raw,
        hive_snapshot=table.hive_snapshot,
        warehouse_table=table.warehouse_table,
        redis_prefix=table.redis_prefix,
        columns=[column_out(c) for c in table.columns],
        problem=table.problem,
    )


def hit_out(hit: Hit) -> LineageHitOut:
    return LineageHitOut(
        kind=hit.kind,
        matched=hit.matched,
        direction=hit.direction,
        logical_table=hit.table.logical_table,
        column=hit.column.name if hit.column else None,
        note=hit.column.note if hit.column else None,
        sources=list(hit.sources),
        targets=[NamedOut(kind=k, name=n) for k, n in hit.targets],
    )


@router.get("/lineage", response_model=list[TableLineageOut], tags=["lineage"])
def lineage(db: DB, ctx: Ctx, _: Reader) -> list[TableLineageOut]:
    """Every table mirror, column by column: MySQL shards → Kafka → Hive raw and snapshot →
    warehouse → Redis, with each column's policy (a dropped column has no downstream)."""
    return [table_out(t) for t in all_lineage(db, ctx.settings, ctx.keys, ctx.schemas)]


@router.get("/lineage/search", response_model=list[LineageHitOut], tags=["lineage"])
def lineage_search(
    db: DB, ctx: Ctx, _: Reader, q: Annotated[str, Query(min_length=1, max_length=500)]
) -> list[LineageHitOut]:
    """Search by any name, either end: a MySQL instance, database (``db`` or
    ``instance/db``), table or column gives what it feeds; a Hive raw/snapshot table or
    column, a warehouse table or column, a Redis prefix or key, or a Kafka topic gives its
    MySQL sources (every shard)."""
    index = LineageIndex(all_lineage(db, ctx.settings, ctx.keys, ctx.schemas))
    return [hit_out(hit) for hit in index.search(q)]


@router.get("/lineage/openlineage", tags=["lineage"])
def lineage_openlineage(db: DB, ctx: Ctx, _: Reader, download: bool = False) -> JSONResponse:
    """The lineage as a JSON list of OpenLineage RunEvents (one per table mirror) with the
    ``schema`` and ``columnLineage`` dataset facets, for a data catalog."""
    events: list[dict[str, Any]] = openlineage_events(
        all_lineage(db, ctx.settings, ctx.keys, ctx.schemas),
        dataset_namespaces(db, ctx.settings),
        datetime.now(UTC),
    )
    headers = (
        {"Content-Disposition": 'attachment; filename="cdc-mirror-openlineage.json"'}
        if download
        else {}
    )
    return JSONResponse(events, headers=headers)
