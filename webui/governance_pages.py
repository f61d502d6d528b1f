"""Server-rendered pages of governance (issue 10): the policy set (*Governance*), detections
over time (*Detections*, an SVG chart rendered here) and lineage (*Lineage*, searchable both
ways, with the OpenLineage download). Forms follow ``webui.pages``: CSRF-checked, admins only,
a refused form comes back with one sentence per problem and the values typed, nothing saved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.datastructures import FormData, UploadFile

from governance import (
    BUILTIN_DETECTORS,
    BUILTIN_VALIDATORS,
    ColumnPolicy,
    DetectorRule,
    LookupTable,
    PolicyAction,
    StandardiseRule,
)
from webui import admin, governance
from webui.auth import Principal
from webui.detections import HOUR_S, hour_of, load_series
from webui.governance import GovernanceStateIn
from webui.lineage import all_lineage
from webui.lineage_map import LineageIndex
from webui.monitoring import render_svg
from webui.pages import DB, Ctx, EditForm, PageUser, _optional, _see, _text, render

router = APIRouter(include_in_schema=False)

# An uploaded lookup table larger than this is refused (it is served inline to collectors).
MAX_LOOKUP_UPLOAD_BYTES = 20 * 1024 * 1024


# --- the policy set -----------------------------------------------------------------------


def _governance_page(
    request: Request, db: Session, who: Principal, status_code: int = 200, **values: Any
) -> Response:
    return render(
        request,
        "governance.html",
        who,
        status_code,
        settings=governance.state_out(governance.state(db)),
        detectors=governance.detectors(db),
        policies=governance.policies(db),
        standardise=governance.standardise_rules(db),
        lookups=governance.lookup_summaries(db),
        mirrors=[row.name for row in admin.list_table_mirrors(db)],
        builtin_detectors=BUILTIN_DETECTORS,
        builtin_validators=BUILTIN_VALIDATORS,
        actions=[a.value for a in PolicyAction],
        typed=values.pop("typed", {}),
        **values,
    )


def _refused(
    request: Request, db: Session, who: Principal, errors: list[str], form: str, typed: Any
) -> Response:
    db.rollback()  # nothing of a refused form stays
    return _governance_page(request, db, who, 422, errors=errors, typed={form: typed})


def _submit(
    request: Request,
    db: Session,
    who: Principal,
    form: str,
    typed: Any,
    change: Callable[[], object],
    done: str,
) -> Response:
    """Apply one form's change and go to ``done``; a refused change (invalid values or a
    problem the admin layer names) brings the page back with the messages and what was
    typed in the form ``form``, nothing saved."""
    try:
        change()
    except ValidationError as exc:
        return _refused(request, db, who, admin.validation_messages(exc), form, typed)
    except admin.Problems as exc:
        return _refused(request, db, who, exc.messages, form, typed)
    return _see(done)


@router.get("/governance")
def governance_page(request: Request, db: DB, who: PageUser, detector: str = "") -> Response:
    """``?detector=<name>``: the detector form holds that rule, to change it."""
    typed: dict[str, Any] = {}
    if detector:
        found = [d for d in governance.detectors(db) if d.name == detector]
        if not found:
            raise admin.NotFound(f"no detector rule named {detector!r}.")
        typed["detector"] = {**found[0].model_dump(mode="json"), "existing": detector}
    return _governance_page(request, db, who, typed=typed)


@router.post("/governance/settings")
def save_settings_form(request: Request, db: DB, who: PageUser, form: EditForm) -> Response:
    values = {
        "enabled": _text(form, "enabled") == "on",
        "default_action": _text(form, "default_action") or "pass",
        "builtin_detectors": [v for v in form.getlist("builtin_detectors") if isinstance(v, str)],
    }
    return _submit(
        request,
        db,
        who,
        "settings",
        values,
        lambda: governance.save_state(db, who.name, GovernanceStateIn.model_validate(values)),
        "/governance",
    )


@router.post("/governance/detectors")
def save_detector_form(
    request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    existing = _optional(form, "existing")
    values = {
        "name": _text(form, "name"),
        "pattern": _text(form, "pattern"),
        "validator": _optional(form, "validator"),
        "description": _text(form, "description"),
        "enabled": _text(form, "enabled") == "on",
    }
    typed = {**values, "existing": existing}  # a refused edit stays an edit
    return _submit(
        request,
        db,
        who,
        "detector",
        typed,
        lambda: governance.save_detector(
            db,
            who.name,
            DetectorRule.model_validate(values),
            governance.functions(ctx.settings),
            existing=existing,
        ),
        "/governance#detectors",
    )


@router.post("/governance/detectors/{name}/delete")
def delete_detector_form(
    name: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    return _submit(
        request,
        db,
        who,
        "detector",
        {},
        lambda: governance.delete_detector(db, who.name, name),
        "/governance#detectors",
    )


@router.post("/governance/policies")
def save_policy_form(request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm) -> Response:
    values = {
        "table": _text(form, "table"),
        "column": _text(form, "column"),
        "action": _text(form, "action"),
        "keep_last": _text(form, "keep_last") or "4",
    }
    return _submit(
        request,
        db,
        who,
        "policy",
        values,
        lambda: governance.save_policy(
            db, ctx.keys, ctx.schemas, who.name, ColumnPolicy.model_validate(values)
        ),
        "/governance#policies",
    )


@router.post("/governance/policies/{table}/{column}/delete")
def delete_policy_form(
    table: str, column: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    return _submit(
        request,
        db,
        who,
        "policy",
        {},
        lambda: governance.delete_policy(db, who.name, table, column),
        "/governance#policies",
    )


@router.post("/governance/standardise")
def save_standardise_form(
    request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    kind = _text(form, "kind")
    values = {
        "table": _text(form, "table"),
        "column": _text(form, "column"),
        "kind": kind,
        "lookup": _optional(form, "lookup") if kind == "lookup" else None,
        "function": _optional(form, "function") if kind == "recrypt" else None,
        "on_missing": _text(form, "on_missing") or "keep",
    }
    return _submit(
        request,
        db,
        who,
        "standardise",
        values,
        lambda: governance.save_standardise(
            db,
            ctx.keys,
            ctx.schemas,
            who.name,
            StandardiseRule.model_validate(values),
            governance.functions(ctx.settings),
        ),
        "/governance#standardise",
    )


@router.post("/governance/standardise/{table}/{column}/delete")
def delete_standardise_form(
    table: str, column: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    return _submit(
        request,
        db,
        who,
        "standardise",
        {},
        lambda: governance.delete_standardise(db, who.name, table, column),
        "/governance#standardise",
    )


def _lookup_entries(form: FormData) -> dict[str, str]:
    """The mapping from the uploaded CSV file if one was chosen, else from the text box."""
    upload = form.get("file")
    if isinstance(upload, UploadFile) and upload.filename:
        data = upload.file.read(MAX_LOOKUP_UPLOAD_BYTES + 1)
        if len(data) > MAX_LOOKUP_UPLOAD_BYTES:
            raise admin.Problems(
                [f"file: the upload is larger than {MAX_LOOKUP_UPLOAD_BYTES // 2**20} MiB."]
            )
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise admin.Problems(["file: the upload is not UTF-8 text (CSV: old,new)."]) from None
    else:
        text = _text(form, "entries")
    return governance.parse_lookup_entries(text)


@router.post("/governance/lookup-tables")
def create_lookup_form(request: Request, db: DB, who: PageUser, form: EditForm) -> Response:
    values = {"name": _text(form, "name"), "entries": _text(form, "entries")}
    return _submit(
        request,
        db,
        who,
        "lookup",
        values,
        lambda: governance.save_lookup_table(
            db, who.name, LookupTable(name=values["name"], entries=_lookup_entries(form))
        ),
        f"/governance/lookup-tables/{quote(values['name'])}",
    )


@router.get("/governance/lookup-tables/{name}")
def lookup_page(name: str, request: Request, db: DB, who: PageUser) -> Response:
    table = governance.get_lookup_table(db, name)
    text = "\n".join(f"{_csv_cell(k)},{_csv_cell(v)}" for k, v in table.entries.items())
    return render(
        request, "lookup_table.html", who, lookup_name=name, count=len(table.entries), text=text
    )


def _csv_cell(value: str) -> str:
    if any(ch in value for ch in ',"\n\r') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


@router.post("/governance/lookup-tables/{name}")
def update_lookup_form(
    name: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    try:
        entries = _lookup_entries(form)
        governance.save_lookup_table(db, who.name, LookupTable(name=name, entries=entries), name)
    except admin.Problems as exc:
        db.rollback()
        return render(
            request,
            "lookup_table.html",
            who,
            422,
            lookup_name=name,
            count=len(governance.get_lookup_table(db, name).entries),
            text=_text(form, "entries"),
            errors=exc.messages,
        )
    return _see(f"/governance/lookup-tables/{quote(name)}")


@router.post("/governance/lookup-tables/{name}/delete")
def delete_lookup_form(
    name: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    return _submit(
        request,
        db,
        who,
        "lookup",
        {},
        lambda: governance.delete_lookup_table(db, who.name, name),
        "/governance#lookup-tables",
    )


# --- detections over time -----------------------------------------------------------------


@router.get("/detections")
def detections_page(
    request: Request,
    db: DB,
    ctx: Ctx,
    who: PageUser,
    hours: int = 24,
    table: str = "",
    column: str = "",
    detector: str = "",
) -> Response:
    hours = min(max(hours, 1), 24 * 90)
    now_hour = hour_of(int(time.time() * 1000))
    series, totals = load_series(
        db,
        now_hour - (hours - 1) * HOUR_S,
        now_hour,
        table or None,
        column or None,
        detector or None,
    )
    return render(
        request,
        "detections.html",
        who,
        svg=render_svg(series, width=900, height=260, unit="detections / h"),
        labels=[s.label for s in series],
        totals=totals,
        hours=hours,
        filters={"table": table, "column": column, "detector": detector},
        counting=ctx.settings.webui.count_detections,
    )


# --- lineage ------------------------------------------------------------------------------


@router.get("/lineage")
def lineage_page(request: Request, db: DB, ctx: Ctx, who: PageUser, q: str = "") -> Response:
    tables = all_lineage(db, ctx.settings, ctx.keys, ctx.schemas)
    query = q.strip()[:500]
    hits = LineageIndex(tables).search(query) if query else None
    return render(request, "lineage.html", who, tables=tables, query=query, hits=hits)
