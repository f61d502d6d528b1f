"""A compiled policy set applied to SimpleBinlog messages before they leave a process. Pure.

Per column, in this order:

1. **detect** on the value as MySQL holds it (text columns, and any column with a policy of
   its own), so a detection records what the source really contains;
2. **standardise** (lookup table or recrypt plug-in), so the value that is masked or hashed
   is the canonical one: ids of two numbering schemes hash alike after the lookup;
3. the column's **policy**: pass, mask (of what the detectors find in the standardised value),
   hash or drop.

``content`` and ``beforeContent`` get the same treatment: the before-image of an UPDATE or
DELETE holds the same plaintext. A before-image value equal to the after-image's is reused
and not counted twice.

Detections are collected in a ``DetectionBatch`` (counts per schema.table, column and
detector, with the first and last binlogOffset); the caller drains it into
``DetectionRecord`` values inside the same Kafka transaction as the rows, and resets it when
that transaction is aborted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from cdc_platform.governance_model import (
    ColumnPolicy,
    DetectionRecord,
    GovernanceSettings,
    PolicyAction,
)
from governance.detectors import Detection, DetectorSet
from governance.functions import FunctionRegistry
from governance.transforms import (
    HASHED_COLUMN_TYPE,
    MASKED_NON_TEXT_COLUMN_TYPE,
    Hasher,
    Transform,
    lookup_transform,
    mask_text,
    recrypt_transform,
)
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.message import SimpleBinlog
from simple_binlog.routing import ShardRouter
from simple_binlog.values import JsonScalar, Kind, parse_column_type

log = logging.getLogger(__name__)

# Kinds whose values are free text that may hold plaintext. ENUM/SET labels come from the
# table definition and BLOBs travel as base64, so they are not scanned unless a policy asks.
_TEXT_KINDS = frozenset({Kind.TEXT, Kind.INET4, Kind.INET6})


class KeyColumnDroppedError(ConfigError):
    """A drop policy met a primary-key column: publishing rows without identity is refused."""


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    action: PolicyAction
    scan: bool
    keep_last: int
    transform: Transform | None
    is_text: bool


@dataclass(slots=True)
class _TablePlan:
    logical: str | None
    column_types: dict[str, str]  # as the messages carry them (identity checked first)
    out_column_types: dict[str, str]
    scan_only: tuple[str, ...]  # pass, no transform: detections recorded, value untouched
    rewrite: tuple[_Column, ...]  # transformed, masked or hashed
    drop: tuple[str, ...]
    drop_scan: tuple[str, ...]  # dropped text columns: still scanned, so detections count
    actions: dict[str, PolicyAction]


@dataclass(slots=True)
class _Tally:
    logical: str
    action: PolicyAction
    count: int
    first_offset: int
    last_offset: int
    detected_at_ms: int
    source: str
    position: str | None
    gtid: str | None


class DetectionBatch:
    """Detections since the last drain, aggregated per (schema, table, column, detector)."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._tallies: dict[tuple[str, str, str, str], _Tally] = {}

    def add(
        self,
        message: SimpleBinlog,
        logical: str,
        column: str,
        detections: list[Detection],
        action: PolicyAction,
    ) -> None:
        for detection in detections:
            key = (message.schema_name, message.table_name, column, detection.detector)
            tally = self._tallies.get(key)
            if tally is None:
                position = message.position
                self._tallies[key] = _Tally(
                    logical,
                    action,
                    1,
                    message.binlog_offset,
                    message.binlog_offset,
                    message.execute_time,
                    message.source.value,
                    f"{position.file}:{position.pos}" if position else None,
                    position.gtid if position else None,
                )
            else:
                tally.count += 1
                tally.last_offset = message.binlog_offset

    def __len__(self) -> int:
        return len(self._tallies)

    def drain(self) -> list[DetectionRecord]:
        records = [
            DetectionRecord(
                instance=self.instance,
                logical_table=tally.logical,
                schema_name=schema,
                table_name=table,
                column=column,
                detector=detector,
                count=tally.count,
                first_offset=tally.first_offset,
                last_offset=tally.last_offset,
                detected_at_ms=tally.detected_at_ms,
                action=tally.action,
                source="MOCK" if tally.source == "MOCK" else "BINLOG",
                position=tally.position,
                gtid=tally.gtid,
            )
            for (schema, table, column, detector), tally in self._tallies.items()
        ]
        self._tallies = {}
        return records

    def reset(self) -> None:
        self._tallies = {}


class Governance:
    """One compiled policy set (``compile_governance``): ``apply`` each message in order."""

    def __init__(
        self,
        settings: GovernanceSettings,
        router: ShardRouter,
        detectors: DetectorSet,
        standardise: dict[tuple[str, str], Transform],
        hasher: Hasher | None,
        instance: str,
    ) -> None:
        self.settings = settings
        self.version = settings.version
        self.detectors = detectors
        self.batch = DetectionBatch(instance)
        self._router = router
        self._standardise = standardise
        self._hasher = hasher
        self._policies: dict[tuple[str, str], ColumnPolicy] = {
            (p.table, p.column): p for p in settings.policies
        }
        self._plans: dict[tuple[str, str], _TablePlan] = {}
        self._scan = detectors.scan

    # -- the hot path ---------------------------------------------------------------------
    def apply(self, message: SimpleBinlog) -> SimpleBinlog:
        """The message as it may be published; detections go to ``self.batch``.

        Raises KeyColumnDroppedError or TransformFailedError (one sentence) when a row
        cannot be published under the policy set.
        """
        content, before, column_types = self.govern(
            message, message.content, message.before_content
        )
        if (
            content is message.content
            and before is message.before_content
            and column_types is message.column_types
        ):
            return message  # nothing changed (the usual case): no copy
        return replace(message, content=content, before_content=before, column_types=column_types)

    def govern(
        self,
        message: SimpleBinlog,
        content: dict[str, JsonScalar],
        before: dict[str, JsonScalar] | None = None,
    ) -> tuple[dict[str, JsonScalar], dict[str, JsonScalar] | None, dict[str, str]]:
        """``content`` and ``before`` as they may be published, and their column types.

        ``message`` names the table, column types and keys, and is where detections are
        attributed (offset, time, position): rows that share all but their content — a
        replay chunk — are governed against one template message. Unchanged images and
        types are returned as the very objects given.
        """
        plan = self._plans.get((message.schema_name, message.table_name))
        if plan is None or plan.column_types is not message.column_types:
            plan = self._plan(message)
        scan = self._scan
        if plan.scan_only:
            logical = plan.logical or ""
            for name in plan.scan_only:
                value = content.get(name)
                if value.__class__ is str and value:
                    found = scan(value)
                    if found:
                        self.batch.add(message, logical, name, found, PolicyAction.PASS)
                if before is not None:
                    old = before.get(name)
                    if old.__class__ is str and old and old != value:
                        found = scan(old)
                        if found:
                            self.batch.add(message, logical, name, found, PolicyAction.PASS)
        if not plan.rewrite and not plan.drop:
            return content, before, message.column_types
        if plan.drop:
            keys = set(plan.drop) & set(message.primary_keys)
            if keys:
                raise KeyColumnDroppedError(
                    f"the policy drops {plan.logical}.{sorted(keys)[0]}, a primary-key column "
                    f"of {message.schema_name}.{message.table_name}; rows without their key "
                    "cannot be mirrored, so nothing was published: use 'hash' instead."
                )
        done: dict[str, tuple[JsonScalar, JsonScalar]] = {}
        governed = self._rewrite_row(message, plan, content, done, None, content)
        if before is not None:
            before = self._rewrite_row(message, plan, before, {}, done, content)
        retyped = plan.out_column_types != plan.column_types
        return governed, before, plan.out_column_types if retyped else message.column_types

    def _rewrite_row(
        self,
        message: SimpleBinlog,
        plan: _TablePlan,
        row: dict[str, JsonScalar],
        done: dict[str, tuple[JsonScalar, JsonScalar]],
        after: dict[str, tuple[JsonScalar, JsonScalar]] | None,
        content: dict[str, JsonScalar],
    ) -> dict[str, JsonScalar]:
        """One image (``content`` or ``beforeContent``) rewritten; ``done`` collects each
        column's (raw, published) pair; ``after``: the after-image's pairs, for a before-image
        (``content``: the after-image itself).
        """
        # Copied on the first change only: most masked values hold nothing to mask.
        out: dict[str, JsonScalar] | None = dict(row) if plan.drop else None
        logical = plan.logical or ""
        for name in plan.drop_scan:
            dropped = row.get(name)
            if isinstance(dropped, str) and dropped:
                if after is not None and content.get(name) == dropped:
                    continue  # same as the after-image: counted once
                self._detect(message, logical, name, dropped, PolicyAction.DROP)
        if out is not None:
            for name in plan.drop:
                out.pop(name, None)
        for column in plan.rewrite:
            if column.name not in row:
                continue
            raw = row[column.name]
            previous = after.get(column.name) if after is not None else None
            if previous is not None and previous[0] == raw:
                value = previous[1]  # same as the after-image: counted once
            else:
                value = self._column_value(message, logical, column, raw)
                done[column.name] = (raw, value)
            if value is not raw and value != raw:
                if out is None:
                    out = dict(row)
                out[column.name] = value
        return row if out is None else out

    def _detect(
        self, message: SimpleBinlog, logical: str, name: str, text: str, action: PolicyAction
    ) -> list[Detection]:
        found = self._scan(text)
        if found:
            self.batch.add(message, logical, name, found, action)
        return found

    def _column_value(
        self, message: SimpleBinlog, logical: str, column: _Column, raw: JsonScalar
    ) -> JsonScalar:
        found: list[Detection] = []
        if column.scan and raw is not None and raw != "":
            text = raw if isinstance(raw, str) else str(raw)
            found = self._detect(message, logical, column.name, text, column.action)
        value = column.transform(raw) if column.transform is not None else raw
        if column.action is PolicyAction.MASK and value is not None:
            text = value if isinstance(value, str) else str(value)
            if value is not raw:
                found = self._scan(text)  # mask what the standardised value holds
            # A masked non-text column is published as text throughout (its type too).
            return mask_text(text, found, column.keep_last) if found else text
        if column.action is PolicyAction.HASH and self._hasher is not None:
            return self._hasher(value)
        return value

    # -- plans, once per table and schema ---------------------------------------------------
    def _plan(self, message: SimpleBinlog) -> _TablePlan:
        key = (message.schema_name, message.table_name)
        known = self._plans.get(key)
        if known is not None and known.column_types == message.column_types:
            known.column_types = message.column_types  # same schema, another dict
            return known
        try:
            logical: str | None = self._router.route(*key).name
        except ConfigError:
            logical = None  # no routing rule: no table policy can name it; the default applies
        table_default = self._policies.get((logical or "", "*"))
        default_action = table_default.action if table_default else self.settings.default_action
        default_keep = table_default.keep_last if table_default else 4
        scan_only: list[str] = []
        rewrite: list[_Column] = []
        drop: list[str] = []
        drop_scan: list[str] = []
        actions: dict[str, PolicyAction] = {}
        out_types = dict(message.column_types)
        for name, spec in message.column_types.items():
            own = self._policies.get((logical or "", name))
            action = own.action if own else default_action
            keep_last = own.keep_last if own else default_keep
            actions[name] = action
            try:
                is_text = parse_column_type(spec).kind in _TEXT_KINDS
            except CdcMirrorError:
                is_text = False  # a type the contract cannot parse is not scanned as text
            transform = self._standardise.get((logical or "", name))
            scan = is_text or own is not None
            if own is None and action is PolicyAction.MASK and not is_text:
                # A table-wide or default mask leaves numbers and dates as they are: they
                # cannot be masked in part and keep their type. Name the column to mask it.
                action = actions[name] = PolicyAction.PASS
            if action is PolicyAction.DROP:
                drop.append(name)
                out_types.pop(name, None)
                if is_text:
                    drop_scan.append(name)
                continue
            if action is PolicyAction.PASS and transform is None:
                if is_text:
                    scan_only.append(name)
                continue
            rewrite.append(_Column(name, action, scan, keep_last, transform, is_text))
            if action is PolicyAction.HASH:
                out_types[name] = HASHED_COLUMN_TYPE
            elif action is PolicyAction.MASK and not is_text:
                out_types[name] = MASKED_NON_TEXT_COLUMN_TYPE
        plan = _TablePlan(
            logical,
            message.column_types,
            out_types,
            tuple(scan_only),
            tuple(rewrite),
            tuple(drop),
            tuple(drop_scan),
            actions,
        )
        self._plans[key] = plan
        return plan


def compile_governance(
    settings: GovernanceSettings,
    router: ShardRouter,
    instance: str,
) -> Governance | None:
    """The policy set ready to apply, or None when governance is off.

    Imports the recrypt plug-ins and dotted-path validators that ``settings.allowed_functions``
    (this process's own config) lists; raises ConfigError with one sentence when one is not
    listed (nothing is imported then) or cannot be loaded.
    """
    if not settings.enabled:
        return None
    functions = FunctionRegistry(settings.allowed_functions)
    detectors = DetectorSet.build(
        settings.builtin_detectors, settings.detectors, functions, settings.scan_max_chars
    )
    lookups = {table.name: table for table in settings.lookup_tables}
    standardise: dict[tuple[str, str], Transform] = {}
    for rule in settings.standardise:
        if rule.kind == "lookup":
            assert rule.lookup is not None  # the model's validator guarantees it
            standardise[(rule.table, rule.column)] = lookup_transform(rule, lookups[rule.lookup])
        else:
            assert rule.function is not None
            what = f"recrypt function of {rule.table}.{rule.column}"
            function = functions.transform(rule.function, what)
            standardise[(rule.table, rule.column)] = recrypt_transform(rule, function)
    salt = settings.hash_salt
    hashes = settings.default_action is PolicyAction.HASH or any(
        p.action is PolicyAction.HASH for p in settings.policies
    )
    if hashes and salt is None:
        raise ConfigError(
            "a governance policy hashes values but governance.hash_salt is not set in this "
            "process's config; set the same salt on every collector and replay."
        )
    hasher = Hasher(salt.get_secret_value().encode()) if salt is not None else None
    return Governance(settings, router, detectors, standardise, hasher, instance)
