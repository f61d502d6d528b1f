"""The governance policy set in the admin database: detector rules, column policies,
standardisation rules, lookup tables and the set-wide settings (issue 10).

Every change is validated twice, in the caller's transaction: the item by its
``governance`` model (the one the collectors load), then the whole set as the
collectors will receive it (two policies for one column, a rule naming a missing lookup
table, ``drop`` on a key column, …), each problem as one sentence. A change bumps the set's
``version`` and every instance's ``version``, so each collector's config etag changes and the
collectors apply the new set without a restart. The hash salt is not part of the set: each
collector or replay has its own in its config file, and the admin never sees it. Nor can an
admin make a host run code: a validator or recrypt function must be built in or listed in
``governance.allowed_functions`` of the web admin's own config file (and, when loaded, of the
collector's).
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cdc_platform.config import Settings, TableMirror
from governance import (
    BUILTIN_DETECTORS,
    ColumnPolicy,
    DetectorRule,
    GovernanceSettings,
    LookupTable,
    PolicyAction,
    StandardiseRule,
    describe_governance_error,
)
from governance.functions import FunctionNotAllowedError, FunctionRegistry
from simple_binlog.errors import CdcMirrorError
from webui import admin
from webui.lineage_map import ColumnTreatment
from webui.models import (
    ColumnPolicyRow,
    DetectorRuleRow,
    GovernanceState,
    Instance,
    LookupTableRow,
    StandardiseRuleRow,
    TableMirrorRow,
)
from webui.schema_source import SchemaSource
from webui.security import Keys

log = logging.getLogger(__name__)

# An audit entry lists at most this many changed keys of a lookup table.
_AUDIT_KEYS = 50


class GovernanceStateIn(BaseModel):
    """The set-wide settings."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="scan and apply policies at all")
    default_action: PolicyAction = Field(
        PolicyAction.PASS, description="for columns without a policy of their own or '*'"
    )
    builtin_detectors: list[str] = Field(
        default_factory=lambda: list(BUILTIN_DETECTORS),
        description=f"which built-in detectors run (of {', '.join(BUILTIN_DETECTORS)})",
    )


class GovernanceStateOut(GovernanceStateIn):
    version: int


class LookupTableSummary(BaseModel):
    name: str
    entries: int


# --- reading ------------------------------------------------------------------------------


def state(db: Session) -> GovernanceState:
    """The settings row; a fresh install has none yet and gets the defaults (not stored)."""
    row = db.get(GovernanceState, 1)
    if row is None:
        return GovernanceState(
            id=1,
            enabled=False,
            default_action=PolicyAction.PASS.value,
            builtin_detectors=list(BUILTIN_DETECTORS),
            version=0,
            updated_at=admin.now(),
        )
    return row


def state_out(row: GovernanceState) -> GovernanceStateOut:
    return GovernanceStateOut(
        enabled=row.enabled,
        default_action=PolicyAction(row.default_action),
        builtin_detectors=list(row.builtin_detectors),
        version=row.version,
    )


def detectors(db: Session) -> list[DetectorRule]:
    rows = db.scalars(select(DetectorRuleRow).order_by(DetectorRuleRow.position))
    return [DetectorRule.model_validate(row.spec) for row in rows]


def policies(db: Session) -> list[ColumnPolicy]:
    rows = db.scalars(
        select(ColumnPolicyRow).order_by(ColumnPolicyRow.table_name, ColumnPolicyRow.column_name)
    )
    return [ColumnPolicy.model_validate(row.spec) for row in rows]


def standardise_rules(db: Session) -> list[StandardiseRule]:
    rows = db.scalars(
        select(StandardiseRuleRow).order_by(
            StandardiseRuleRow.table_name, StandardiseRuleRow.column_name
        )
    )
    return [StandardiseRule.model_validate(row.spec) for row in rows]


def lookup_tables(db: Session) -> list[LookupTable]:
    rows = db.scalars(select(LookupTableRow).order_by(LookupTableRow.name))
    return [LookupTable(name=row.name, entries=dict(row.entries)) for row in rows]


def lookup_summaries(db: Session) -> list[LookupTableSummary]:
    rows = db.scalars(select(LookupTableRow).order_by(LookupTableRow.name))
    return [LookupTableSummary(name=row.name, entries=len(row.entries)) for row in rows]


def get_lookup_table(db: Session, name: str) -> LookupTable:
    row = db.scalar(select(LookupTableRow).where(LookupTableRow.name == name))
    if row is None:
        raise admin.NotFound(f"no lookup table named {name!r}.")
    return LookupTable(name=row.name, entries=dict(row.entries))


def policy_set(db: Session) -> GovernanceSettings:
    """The set as stored, validated exactly as a collector validates what it receives
    (``GovernanceSettings.from_published``: no salt, which is each collector's own).

    Raises ValidationError when it does not validate (``_check_set`` turns that into a
    sentence before anything is saved).
    """
    settings = state(db)
    return GovernanceSettings.from_published(
        {
            "enabled": settings.enabled,
            "version": settings.version,
            "builtin_detectors": list(settings.builtin_detectors),
            "detectors": [d.model_dump(mode="json") for d in detectors(db)],
            "default_action": settings.default_action,
            "policies": [p.model_dump(mode="json") for p in policies(db)],
            "lookup_tables": [t.model_dump(mode="json") for t in lookup_tables(db)],
            "standardise": [r.model_dump(mode="json") for r in standardise_rules(db)],
        }
    )


def published(db: Session) -> dict[str, Any]:
    """What ``CollectorConfig.governance`` carries: the set without source, webui and salt."""
    return policy_set(db).published_policy_set()


def resolve_treatments(
    column_policies: list[ColumnPolicy],
    rules: list[StandardiseRule],
    default_action: PolicyAction,
    table: str,
    columns: list[str],
) -> dict[str, ColumnTreatment]:
    """Each column's treatment, as the collector resolves it: the column's own policy, else
    the table's ``"*"`` policy, else the set's default; plus its standardisation. Pure."""
    own = {p.column: p.action for p in column_policies if p.table == table}
    fallback = own.get("*", default_action)
    standardised = {
        r.column: f"lookup table {r.lookup!r}" if r.kind == "lookup" else f"recrypt {r.function}"
        for r in rules
        if r.table == table
    }
    return {
        column: ColumnTreatment(
            policy=own.get(column, fallback).value,
            standardise=standardised.get(column),
        )
        for column in columns
    }


def treatments_for(db: Session, table: str, columns: list[str]) -> dict[str, ColumnTreatment]:
    settings = state(db)
    return resolve_treatments(
        policies(db),
        standardise_rules(db),
        PolicyAction(settings.default_action),
        table,
        columns,
    )


# --- changing -----------------------------------------------------------------------------


def _check_set(db: Session) -> None:
    """Validate the whole set as it stands in this transaction; Problems if it is refused."""
    db.flush()
    try:
        checked = policy_set(db)
    except ValidationError as exc:
        raise admin.Problems([_set_problem(exc)]) from None
    mirrors = [admin.table_mirror(row) for row in admin.list_table_mirrors(db)]
    try:
        checked.check_keys({m.name: m.key for m in mirrors if m.key})
    except ValueError as exc:
        raise admin.Problems([f"{exc}."]) from None


def _set_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    if first["loc"]:
        return describe_governance_error(error)
    # A rule about the set as a whole (two policies for a column, a missing lookup table).
    return f"the policy set is refused: {str(first['msg']).removeprefix('Value error, ')}."


def _changed(db: Session) -> GovernanceState:
    """Bump the set's version and every instance's, so every collector's etag changes."""
    row = db.get(GovernanceState, 1)
    if row is None:
        row = state(db)
        db.add(row)
    row.version += 1
    row.updated_at = admin.now()
    db.execute(update(Instance).values(version=Instance.version + 1))
    return row


def _live_columns(
    db: Session, keys: Keys, schemas: SchemaSource, table: str
) -> tuple[TableMirror, list[str], tuple[str, ...], str] | None:
    """The live columns of a mirrored logical table (None: not a table mirror)."""
    row = db.scalar(select(TableMirrorRow).where(TableMirrorRow.name == table))
    if row is None:
        return None
    mirror = admin.table_mirror(row)
    try:
        live = schemas.live_schema(
            admin.instance_access(row.instance, keys), mirror.db_prefix, mirror.table_prefix
        )
    except CdcMirrorError as exc:
        raise admin.Problems([str(exc)]) from exc
    if live is None:
        return None
    return mirror, list(live.columns), live.primary_key, live.physical_tables[0]


def _column_problems(
    db: Session, keys: Keys, schemas: SchemaSource, table: str, column: str, dropping: bool
) -> list[str]:
    found = _live_columns(db, keys, schemas, table)
    if found is None:
        # Not mirrored (or no shard yet): the collector applies the policy to whatever table
        # routes to this name, so there is nothing to check it against here.
        return []
    mirror, columns, primary_key, first = found
    if column != "*" and column not in columns:
        return [f"column {column} does not exist in {first} (columns: {', '.join(columns)})."]
    key = mirror.key or list(primary_key)
    if dropping and column in key:
        return [
            f"the policy drops {table}.{column}, a key column of the table; a row without "
            "its key cannot be mirrored (use 'hash' instead)."
        ]
    return []


def save_state(db: Session, actor: str, data: GovernanceStateIn) -> GovernanceState:
    unknown = [n for n in data.builtin_detectors if n not in BUILTIN_DETECTORS]
    if unknown:
        raise admin.Problems(
            [
                f"builtin_detectors: {unknown[0]!r} is not a built-in detector "
                f"(known: {', '.join(BUILTIN_DETECTORS)})."
            ]
        )
    before = state_out(state(db)).model_dump(mode="json")
    row = _changed(db)
    row.enabled = data.enabled
    row.default_action = data.default_action.value
    row.builtin_detectors = list(data.builtin_detectors)
    _check_set(db)
    after = state_out(row).model_dump(mode="json")
    admin.audit(db, actor, "update", "governance", "settings", before, after)
    return row


def functions(settings: Settings) -> FunctionRegistry:
    """The code rules may name: the built-ins and the web admin's own config's allow-list."""
    return FunctionRegistry(settings.governance.allowed_functions)


def _allowed(check: Callable[[str], None], field: str, name: str | None) -> None:
    """Refuse code the web admin's own config does not allow (the collectors refuse it too)."""
    if name is None:
        return
    try:
        check(name)
    except FunctionNotAllowedError as exc:
        raise admin.Problems([f"{field}: {exc}."]) from None


def save_detector(
    db: Session,
    actor: str,
    rule: DetectorRule,
    functions: FunctionRegistry,
    existing: str | None = None,
) -> DetectorRuleRow:
    _allowed(functions.check_validator, "validator", rule.validator)
    row = db.scalar(select(DetectorRuleRow).where(DetectorRuleRow.name == (existing or rule.name)))
    if existing is None and row is not None:
        raise admin.Problems([f"a detector rule named {rule.name!r} exists already."])
    if existing is not None:
        if row is None:
            raise admin.NotFound(f"no detector rule named {existing!r}.")
        if rule.name != existing:
            raise admin.Problems([f"name: a detector rule cannot be renamed ({existing!r})."])
    before = dict(row.spec) if row is not None else None
    spec = rule.model_dump(mode="json")
    if row is None:
        last = db.scalar(select(DetectorRuleRow.position).order_by(DetectorRuleRow.position.desc()))
        row = DetectorRuleRow(
            name=rule.name, spec=spec, position=(last or 0) + 1, updated_at=admin.now()
        )
        db.add(row)
    else:
        row.spec = spec
        row.updated_at = admin.now()
    _changed(db)
    _check_set(db)
    admin.audit(
        db,
        actor,
        "create" if before is None else "update",
        "detector_rule",
        rule.name,
        before,
        spec,
    )
    return row


def delete_detector(db: Session, actor: str, name: str) -> None:
    row = db.scalar(select(DetectorRuleRow).where(DetectorRuleRow.name == name))
    if row is None:
        raise admin.NotFound(f"no detector rule named {name!r}.")
    before = dict(row.spec)
    db.delete(row)
    _changed(db)
    _check_set(db)
    admin.audit(db, actor, "delete", "detector_rule", name, before, None)


def save_policy(
    db: Session, keys: Keys, schemas: SchemaSource, actor: str, policy: ColumnPolicy
) -> ColumnPolicyRow:
    """Create or replace the policy of ``policy.table``/``policy.column``."""
    problems = _column_problems(
        db, keys, schemas, policy.table, policy.column, policy.action is PolicyAction.DROP
    )
    if problems:
        raise admin.Problems(problems)
    return _save_column_spec(
        db,
        actor,
        ColumnPolicyRow,
        "column_policy",
        policy.table,
        policy.column,
        policy.model_dump(mode="json"),
    )


def delete_policy(db: Session, actor: str, table: str, column: str) -> None:
    _delete_column_spec(db, actor, ColumnPolicyRow, "column_policy", "policy", table, column)


def save_standardise(
    db: Session,
    keys: Keys,
    schemas: SchemaSource,
    actor: str,
    rule: StandardiseRule,
    functions: FunctionRegistry,
) -> StandardiseRuleRow:
    """Create or replace the standardisation rule of ``rule.table``/``rule.column``."""
    _allowed(functions.check_transform, "function", rule.function)
    problems = _column_problems(db, keys, schemas, rule.table, rule.column, dropping=False)
    if problems:
        raise admin.Problems(problems)
    return _save_column_spec(
        db,
        actor,
        StandardiseRuleRow,
        "standardise_rule",
        rule.table,
        rule.column,
        rule.model_dump(mode="json"),
    )


def delete_standardise(db: Session, actor: str, table: str, column: str) -> None:
    _delete_column_spec(
        db, actor, StandardiseRuleRow, "standardise_rule", "standardise rule", table, column
    )


_ColumnRow = TypeVar("_ColumnRow", ColumnPolicyRow, StandardiseRuleRow)


def _save_column_spec(
    db: Session,
    actor: str,
    model: type[_ColumnRow],
    kind: str,
    table: str,
    column: str,
    spec: dict[str, Any],
) -> _ColumnRow:
    """Create or replace the per-column row of ``model``; audited, the set re-checked."""
    row = db.scalar(select(model).where(model.table_name == table, model.column_name == column))
    before = dict(row.spec) if row is not None else None
    if row is None:
        row = model(table_name=table, column_name=column, spec=spec, updated_at=admin.now())
        db.add(row)
    else:
        row.spec = spec
        row.updated_at = admin.now()
    _changed(db)
    _check_set(db)
    action = "create" if before is None else "update"
    admin.audit(db, actor, action, kind, f"{table}.{column}", before, spec)
    return row


def _delete_column_spec(
    db: Session,
    actor: str,
    model: type[_ColumnRow],
    kind: str,
    label: str,
    table: str,
    column: str,
) -> None:
    row = db.scalar(select(model).where(model.table_name == table, model.column_name == column))
    if row is None:
        raise admin.NotFound(f"no {label} for column {table}.{column}.")
    before = dict(row.spec)
    db.delete(row)
    _changed(db)
    _check_set(db)
    admin.audit(db, actor, "delete", kind, f"{table}.{column}", before, None)


def _entries_change(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
    """An audit view of a lookup table's change: counts, and the first changed keys."""
    added = sorted(k for k in after if k not in before)
    removed = sorted(k for k in before if k not in after)
    changed = sorted(k for k in after if k in before and before[k] != after[k])
    view: dict[str, Any] = {"entries": len(after)}
    for label, keys_ in (("added", added), ("removed", removed), ("changed", changed)):
        if keys_:
            view[label] = {k: after.get(k, before.get(k)) for k in keys_[:_AUDIT_KEYS]}
            if len(keys_) > _AUDIT_KEYS:
                view[f"{label}_not_listed"] = len(keys_) - _AUDIT_KEYS
    return view


def save_lookup_table(
    db: Session, actor: str, table: LookupTable, existing: str | None = None
) -> LookupTableRow:
    row = db.scalar(select(LookupTableRow).where(LookupTableRow.name == (existing or table.name)))
    if existing is None and row is not None:
        raise admin.Problems([f"a lookup table named {table.name!r} exists already."])
    if existing is not None:
        if row is None:
            raise admin.NotFound(f"no lookup table named {existing!r}.")
        if table.name != existing:
            raise admin.Problems([f"name: a lookup table cannot be renamed ({existing!r})."])
    old: dict[str, str] = dict(row.entries) if row is not None else {}
    if row is None:
        row = LookupTableRow(name=table.name, entries=dict(table.entries), updated_at=admin.now())
        db.add(row)
    else:
        row.entries = dict(table.entries)
        row.updated_at = admin.now()
    _changed(db)
    _check_set(db)
    admin.audit(
        db,
        actor,
        "create" if existing is None else "update",
        "lookup_table",
        table.name,
        {"entries": len(old)} if existing is not None else None,
        _entries_change(old, dict(table.entries)),
    )
    return row


def delete_lookup_table(db: Session, actor: str, name: str) -> None:
    row = db.scalar(select(LookupTableRow).where(LookupTableRow.name == name))
    if row is None:
        raise admin.NotFound(f"no lookup table named {name!r}.")
    users = [r for r in standardise_rules(db) if r.lookup == name]
    if users:
        raise admin.Problems(
            [
                f"lookup table {name!r} is used by the standardise rule for "
                f"{users[0].table}.{users[0].column}; delete that rule first."
            ]
        )
    before = {"entries": len(row.entries)}
    db.delete(row)
    _changed(db)
    _check_set(db)
    admin.audit(db, actor, "delete", "lookup_table", name, before, None)


def parse_lookup_entries(text: str) -> dict[str, str]:
    """CSV ``old,new`` per line (an uploaded file or the form's text) → the mapping.

    A header line ``old,new`` (or ``source,target``) is skipped; blank lines are ignored. A
    line that is not two values, or a value mapped twice, is refused naming its line (at most
    ten problems are listed). Raises Problems.
    """
    entries: dict[str, str] = {}
    problems: list[str] = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [cell.strip() for cell in row]
        if not any(cells):
            continue
        if number == 1 and [c.lower() for c in cells] in (["old", "new"], ["source", "target"]):
            continue
        if len(cells) != 2 or not cells[0]:
            problems.append(f"line {number}: expected two values, 'old value,new value'.")
        elif cells[0] in entries:
            problems.append(f"line {number}: the value {cells[0]!r} is mapped twice.")
        else:
            entries[cells[0]] = cells[1]
        if len(problems) >= 10:
            break
    if problems:
        raise admin.Problems(problems)
    return entries
