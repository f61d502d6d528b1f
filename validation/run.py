"""``cdc-mirror validate``: one table mirror against one target, and the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from cdc_platform.config import Settings, TableMirror
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from simple_binlog.naming import mirror_group, topic_name
from simple_binlog.routing import ShardRouter
from simple_binlog.values import Kind
from validation.mysql import MySqlSide
from validation.plan import (
    DescentStats,
    Difference,
    Key,
    Side,
    Watermark,
    descend,
    plan_chunks,
    settle,
)
from validation.table import TableShape

_BINARY_KINDS = (Kind.BINARY, Kind.GEOMETRY)
Target = Literal["warehouse", "redis"]
TARGETS: tuple[Target, ...] = ("warehouse", "redis")


@dataclass(frozen=True, slots=True)
class Options:
    chunk_rows: int = 10_000
    leaf_rows: int = 64
    confirmations: int = 2
    max_rounds: int = 6
    watermark_timeout_s: float = 120.0


@dataclass(frozen=True, slots=True)
class KeyReport:
    """One differing key, with both rows (column → canonical text) for people to read."""

    key: Key
    difference: Difference
    source: dict[str, Any] | None
    target: dict[str, Any] | None

    def differing_columns(self) -> list[str]:
        if self.source is None or self.target is None:
            return list((self.source or self.target or {}).keys())
        return [c for c in self.source if self.source.get(c) != self.target.get(c)]


@dataclass
class TargetReport:
    table: str
    target: str
    rows: int = 0
    chunks: int = 0
    stats: DescentStats = field(default_factory=DescentStats)
    differences: list[KeyReport] = field(default_factory=list)
    unsettled: list[Key] = field(default_factory=list)
    in_flight: int = 0
    position: str = ""
    source_queries: int = 0
    seconds: float = 0.0
    binary_columns: frozenset[str] = frozenset()  # shown in hex

    @property
    def equal(self) -> bool:
        return not self.differences and not self.unsettled

    def keys(self, difference: Difference) -> list[Key]:
        return [r.key for r in self.differences if r.difference is difference]


def validate_sides(
    shape: TableShape,
    source: MySqlSide,
    target: Side,
    watermark: Watermark,
    options: Options = Options(),
    target_rows: Callable[[list[Key]], dict[Key, dict[str, Any]]] | None = None,
) -> TargetReport:
    """Chunks from the source, descent, settling, then the differing keys' rows."""
    started = time.monotonic()
    report = TargetReport(shape.table, target.name)
    report.binary_columns = frozenset(
        n for n in shape.compared_columns if shape.column_type(n).kind in _BINARY_KINDS
    )
    chunks = plan_chunks(source.boundaries(options.chunk_rows))
    report.chunks = len(chunks)
    candidates = descend(chunks, source, target, options.leaf_rows, report.stats)
    report.rows = report.stats.rows
    report.position = source.position
    settled = settle(
        candidates, source, target, watermark, options.confirmations, options.max_rounds
    )
    report.in_flight = len(settled.in_flight)
    report.unsettled = settled.unsettled
    keys = sorted(settled.differences)
    mine = source.rows(keys)
    theirs = target_rows(keys) if target_rows is not None else {}
    report.differences = [
        KeyReport(k, settled.differences[k], mine.get(k), theirs.get(k)) for k in keys
    ]
    report.source_queries = source.queries
    report.seconds = time.monotonic() - started
    return report


def _target_side(settings: Settings, mirror: TableMirror, target: Target, shape: TableShape) -> Any:
    if target == "warehouse":
        from validation.warehouse import WarehouseSide  # noqa: PLC0415

        return WarehouseSide(settings.postgres, settings.mirror.warehouse_schema, shape)
    from validation.redis import RedisSide  # noqa: PLC0415

    return RedisSide(settings.redis, shape.projected(mirror.redis_columns))


def validate(
    settings: Settings,
    table: str,
    target: Target,
    options: Options = Options(),
    watermark: Watermark | None = None,
) -> TargetReport:
    """Validate ``table``'s copy in ``target`` against MySQL (see ``validation``)."""
    mirror = settings.table(table)
    if target not in mirror.targets:
        raise ConfigError(f"table {table!r} is not mirrored to {target}.")
    instance = settings.instance(mirror.instance)
    router = ShardRouter(list(settings.shard_rules))
    source = MySqlSide(instance)
    try:
        shape = source.read_shape(router, mirror)
        if target == "redis":
            shape = source.shape = shape.projected(mirror.redis_columns)
        side = _target_side(settings, mirror, target, shape)
        own_watermark = None
        if watermark is None:
            from validation.watermark import KafkaWatermark  # noqa: PLC0415

            own_watermark = watermark = KafkaWatermark(
                settings.kafka,
                topic_name(settings.kafka, mirror.instance),
                mirror_group(settings.mirror.group_prefix, target),
                options.watermark_timeout_s,
            )
        try:
            return validate_sides(shape, source, side, watermark, options, side.rows)
        finally:
            side.close()
            if own_watermark is not None:
                own_watermark.close()
    finally:
        source.close()


# -- the report -----------------------------------------------------------------------------


def display(value: Any, binary: bool = False) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray):
        if not binary:
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                pass
        return "0x" + bytes(value).hex()
    return str(value)


def describe(report: TargetReport) -> list[str]:
    """Lines for people: a summary, then each differing key with its rows side by side
    (``*`` marks the columns that differ)."""
    binary = report.binary_columns
    verdict = "equal" if report.equal else "DIFFERENT"
    lines = [
        f"{report.table} in {report.target}: {verdict} — {report.rows} rows in {report.chunks} "
        f"chunks, {report.stats.chunks_compared} chunk comparisons, "
        f"{len(report.differences)} differing keys, {report.in_flight} in flight, "
        f"{len(report.unsettled)} still changing; MySQL at {report.position or '?'}; "
        f"{report.source_queries} source queries; {report.seconds:.1f} s"
    ]
    for item in report.differences:
        key = "/".join(display(v) for v in item.key)
        lines.append(f"  key {key}: {item.difference.value}")
        columns = list((item.source or item.target or {}).keys())
        changed = set(item.differing_columns())
        width = max((len(c) for c in columns), default=0)
        lines.append(f"    {'column':<{width}}  {'mysql':<30}  {report.target}")
        for column in columns:
            left = (
                "-" if item.source is None else display(item.source.get(column), column in binary)
            )
            right = (
                "-" if item.target is None else display(item.target.get(column), column in binary)
            )
            mark = " *" if column in changed and item.difference is Difference.DIFFERENT else ""
            lines.append(f"    {column:<{width}}  {left:<30}  {right}{mark}")
    lines += [f"  key {'/'.join(display(v) for v in k)}: still changing" for k in report.unsettled]
    return lines


def unreachable(target: str, exc: ServiceUnavailableError) -> str:
    return f"{target} could not be validated: {exc}"
