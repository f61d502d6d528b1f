"""Lineage of every table mirror, column by column, and its search in both directions. Pure.

Computed from the configuration (instances, shard rules, table mirrors, the naming settings
of the stream writer, merge, mirror and Redis) plus the live MySQL schema of each logical
table (its physical shard tables and columns) and the governance column policies:

    MySQL instance / shard database / shard table / column
      → Kafka topic of the instance
      → raw Hive table ``<stream_writer.database>.<logical table>``: the view of the table's
        rows in the lake's one raw table ``_cdc_changes`` (the row is the JSON member
        ``content.<column>`` of each change)
      → snapshot table and column ``<merge.database>.<logical table>.<column>``
      → warehouse table and column ``<warehouse_db>.<mirror.warehouse_schema>.<logical>.<column>``
      → Redis keys ``<redis.key_prefix>:<logical table>:…`` (member ``row.<column>``, only the
        ``redis_columns`` when the mirror projects)

A column the policy drops has no downstream column at all; masked and hashed columns keep
their name downstream with the policy noted (the plaintext never leaves the collector).

``search`` answers a name from either end: a MySQL instance, database, table or column gives
its downstream tables and columns; a raw/snapshot/warehouse table or column, a Redis prefix
(or a whole key) or a Kafka topic gives the MySQL sources, every shard.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from cdc_platform.config import Settings, TableMirror

PolicyName = Literal["pass", "mask", "hash", "drop"]
Direction = Literal["downstream", "upstream", "both"]


@dataclass(frozen=True)
class Naming:
    """Where each component puts a logical table, from the settings."""

    raw_database: str
    snapshot_database: str
    warehouse_db: str
    warehouse_schema: str
    redis_key_prefix: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Naming:
        return cls(
            raw_database=settings.stream_writer.database,
            snapshot_database=settings.merge.database,
            warehouse_db=settings.postgres.warehouse_db,
            warehouse_schema=settings.mirror.warehouse_schema,
            redis_key_prefix=settings.redis.key_prefix,
        )


@dataclass(frozen=True)
class ColumnTreatment:
    """What governance does to one column of a logical table before it leaves the collector."""

    policy: PolicyName = "pass"
    standardise: str | None = None  # a description, e.g. "lookup table 'city_codes'"


PASS = ColumnTreatment()


@dataclass(frozen=True)
class MirrorSource:
    """One table mirror with what is known of its MySQL side (None: could not be read)."""

    mirror: TableMirror
    topic: str
    physical_tables: tuple[str, ...] | None  # "schema.table", every shard
    columns: Mapping[str, str] | None  # column → MySQL type, in table order
    problem: str | None = None


@dataclass(frozen=True)
class ColumnLineage:
    name: str
    mysql_type: str
    policy: PolicyName
    standardise: str | None
    raw_field: str | None  # JSON member of the raw table's ``content``
    snapshot_column: str | None
    warehouse_column: str | None
    redis_field: str | None  # JSON member of the Redis value

    @property
    def note(self) -> str:
        notes = {
            "pass": "",
            "mask": "masked before Kafka",
            "hash": "salted hash before Kafka (joins still work)",
            "drop": "dropped before Kafka: no downstream column",
        }
        text = notes[self.policy]
        if self.standardise:
            standardised = f"standardised: {self.standardise}"
            text = f"{text}; {standardised}" if text else standardised
        return text


@dataclass(frozen=True)
class TableLineage:
    logical_table: str
    instance: str
    kafka_topic: str
    mysql_tables: tuple[str, ...]
    hive_raw: str | None
    hive_snapshot: str | None
    warehouse_table: str | None
    redis_prefix: str | None
    columns: tuple[ColumnLineage, ...]
    problem: str | None = None

    def column(self, name: str) -> ColumnLineage | None:
        for column in self.columns:
            if column.name.lower() == name.lower():
                return column
        return None

    def targets(self) -> list[tuple[str, str]]:
        """(kind, name) of every downstream table, in flow order."""
        found = [("Kafka topic", self.kafka_topic)]
        for kind, name in (
            ("Hive raw table", self.hive_raw),
            ("Hive snapshot table", self.hive_snapshot),
            ("warehouse table", self.warehouse_table),
            ("Redis key prefix", self.redis_prefix),
        ):
            if name is not None:
                found.append((kind, name))
        return found

    def column_targets(self, column: ColumnLineage) -> list[tuple[str, str]]:
        """(kind, qualified name) of every downstream column of ``column``."""
        found: list[tuple[str, str]] = []
        if self.hive_raw and column.raw_field:
            found.append(("Hive raw column", f"{self.hive_raw}.{column.raw_field}"))
        if self.hive_snapshot and column.snapshot_column:
            found.append(("Hive snapshot column", f"{self.hive_snapshot}.{column.snapshot_column}"))
        if self.warehouse_table and column.warehouse_column:
            found.append(("warehouse column", f"{self.warehouse_table}.{column.warehouse_column}"))
        if self.redis_prefix and column.redis_field:
            found.append(("Redis value member", f"{self.redis_prefix}* {column.redis_field}"))
        return found


def table_lineage(
    source: MirrorSource,
    naming: Naming,
    treatments: Mapping[str, ColumnTreatment] | None = None,
) -> TableLineage:
    """The lineage of one table mirror; ``treatments`` by column name (default: pass)."""
    mirror = source.mirror
    name = mirror.name
    by_column = {k.lower(): v for k, v in (treatments or {}).items()}
    hive = "hive" in mirror.targets
    warehouse = "warehouse" in mirror.targets
    redis = "redis" in mirror.targets
    projected = {c.lower() for c in mirror.redis_columns} if mirror.redis_columns else None
    columns = []
    for column, mysql_type in (source.columns or {}).items():
        treatment = by_column.get(column.lower(), PASS)
        kept = treatment.policy != "drop"
        in_redis = redis and kept and (projected is None or column.lower() in projected)
        columns.append(
            ColumnLineage(
                name=column,
                mysql_type=mysql_type,
                policy=treatment.policy,
                standardise=treatment.standardise,
                raw_field=f"content.{column}" if hive and kept else None,
                snapshot_column=column if hive and kept else None,
                warehouse_column=column if warehouse and kept else None,
                redis_field=f"row.{column}" if in_redis else None,
            )
        )
    return TableLineage(
        logical_table=name,
        instance=mirror.instance,
        kafka_topic=source.topic,
        mysql_tables=source.physical_tables or (),
        hive_raw=f"{naming.raw_database}.{name}" if hive else None,
        hive_snapshot=f"{naming.snapshot_database}.{name}" if hive else None,
        warehouse_table=(
            f"{naming.warehouse_db}.{naming.warehouse_schema}.{name}" if warehouse else None
        ),
        redis_prefix=f"{naming.redis_key_prefix}:{name}:" if redis else None,
        columns=tuple(columns),
        problem=source.problem,
    )


def build_lineage(
    sources: Iterable[MirrorSource],
    naming: Naming,
    treatments: Mapping[str, Mapping[str, ColumnTreatment]] | None = None,
) -> list[TableLineage]:
    """Every table mirror's lineage; ``treatments`` by logical table, then column."""
    policies = treatments or {}
    return [
        table_lineage(source, naming, policies.get(source.mirror.name))
        for source in sorted(sources, key=lambda s: s.mirror.name)
    ]


# --- search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One answer to a search: what the query named, and the other end of the flow."""

    kind: str  # e.g. "MySQL column", "warehouse table"
    matched: str
    direction: Direction
    table: TableLineage
    column: ColumnLineage | None = None
    sources: tuple[str, ...] = ()  # MySQL: "instance/schema.table[.column]", every shard
    targets: tuple[tuple[str, str], ...] = field(default=())  # (kind, name) downstream


_UPSTREAM_KINDS = frozenset(
    {
        "Hive raw table",
        "Hive raw column",
        "Hive snapshot table",
        "Hive snapshot column",
        "warehouse table",
        "warehouse column",
        "Redis key prefix",
        "Redis value member",
    }
)
_BOTH_KINDS = frozenset({"logical table", "Kafka topic"})


class LineageIndex:
    """Every name of the lineage (lowercased) → where it sits; built once, searched often."""

    def __init__(self, tables: Iterable[TableLineage]) -> None:
        self.tables = list(tables)
        self._names: dict[str, list[tuple[str, TableLineage, ColumnLineage | None]]] = defaultdict(
            list
        )
        self._redis: list[tuple[str, TableLineage]] = []
        for table in self.tables:
            self._index_table(table)

    def _add(
        self, name: str, kind: str, table: TableLineage, column: ColumnLineage | None = None
    ) -> None:
        entries = self._names[name.lower()]
        if not any(k == kind and t is table and c is column for k, t, c in entries):
            entries.append((kind, table, column))

    def _index_table(self, table: TableLineage) -> None:
        self._add(table.instance, "MySQL instance", table)
        self._add(table.logical_table, "logical table", table)
        self._add(table.kafka_topic, "Kafka topic", table)
        for physical in table.mysql_tables:
            schema, _, _ = physical.partition(".")
            for prefix in ("", f"{table.instance}/"):
                self._add(prefix + schema, "MySQL database", table)
                self._add(prefix + physical, "MySQL table", table)
                for column in table.columns:
                    self._add(f"{prefix}{physical}.{column.name}", "MySQL column", table, column)
        for kind, name in table.targets()[1:]:
            if kind == "Redis key prefix":
                self._redis.append((name.lower(), table))
                self._add(name.rstrip(":"), kind, table)
            self._add(name, kind, table)
        if table.warehouse_table:
            # The schema-qualified name is what a PostgreSQL user types.
            short = table.warehouse_table.split(".", 1)[1]
            self._add(short, "warehouse table", table)
        for column in table.columns:
            for kind, name in table.column_targets(column):
                if kind == "Redis value member":
                    continue
                self._add(name, kind, column=column, table=table)
                if kind == "warehouse column":
                    self._add(name.split(".", 1)[1], kind, table, column)
                if kind == "Hive raw column" and table.hive_raw:
                    # ``ods_binlog_source.t.user_id`` as well as ``….t.content.user_id``.
                    self._add(f"{table.hive_raw}.{column.name}", kind, table, column)

    def search(self, query: str) -> list[Hit]:
        """Exact names (case-insensitive); a Redis key finds its table by its prefix."""
        wanted = query.strip().lower()
        if not wanted:
            return []
        entries = list(self._names.get(wanted, []))
        if not entries:
            entries = [
                ("Redis key prefix", table, None)
                for prefix, table in self._redis
                if wanted.startswith(prefix)
            ]
        return [self._hit(kind, query.strip(), table, column) for kind, table, column in entries]

    @staticmethod
    def _hit(kind: str, matched: str, table: TableLineage, column: ColumnLineage | None) -> Hit:
        direction: Direction = "downstream"
        if kind in _BOTH_KINDS:
            direction = "both"
        elif kind in _UPSTREAM_KINDS:
            direction = "upstream"
        if kind == "MySQL database":
            schema = matched.rsplit("/", 1)[-1].lower()
            physical = [t for t in table.mysql_tables if t.split(".", 1)[0].lower() == schema]
        elif kind in ("MySQL table", "MySQL column"):
            named = matched.rsplit("/", 1)[-1].lower()
            physical = [
                t
                for t in table.mysql_tables
                if named == t.lower() or named.startswith(f"{t.lower()}.")
            ]
        else:
            physical = list(table.mysql_tables)
        if column is not None:
            sources = tuple(f"{table.instance}/{t}.{column.name}" for t in physical)
            targets = tuple(table.column_targets(column))
        else:
            sources = tuple(f"{table.instance}/{t}" for t in physical)
            targets = tuple(table.targets())
        return Hit(kind, matched, direction, table, column, sources, targets)
