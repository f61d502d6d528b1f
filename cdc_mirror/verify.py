"""Do MySQL, the Hive snapshot, the warehouse and Redis hold the same logical table?

Each store is read into a ``TableDigest``: one digest per row, keyed by the table's key
(``TableMirror.key``, else MySQL's primary key). A row's digest covers its shard
(``schema.table``) and every MySQL column's value in the SimpleBinlog canonical form
(``simple_binlog.values``), so the stores' own spellings meet: PostgreSQL's ``numeric(20)``
and Spark's ``decimal(20,0)`` of a BIGINT UNSIGNED, a TIMESTAMP read back as an aware
``timestamptz`` or as UTC text, DATETIME fractions, fixed BINARY padding, NULL distinct from
``""``. ``compare`` gives per store the row count, an order-independent checksum (the sum of
per-row hashes modulo 2^64) and, on a mismatch, the first few keys that differ. Keys only:
values may be sensitive and never reach a log or a result.

The raw layer (``stream_writer``) is checked apart: every Kafka message of the table's
topic is in the lake exactly once (``check_raw_layer``, from the lake's and Kafka's
``(topic, partition, offset)`` coordinates), and no change appears twice (distinct
binlogOffsets per instance).

Spark parts take a ``SparkSession``; ``python -m cdc_mirror.verify`` runs them in a process
of its own and writes a JSON file (``run_spark_checks`` starts it), so a caller without a
JVM of its own can still check the Hive side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from cdc_platform.config import Settings, TableMirror, load_settings
from cdc_platform.kafka import ReadStalledError, UnknownTopicError, read_to_end
from cdc_platform.mysql_schema import find_shards, read_table_shape
from cdc_platform.retry import RetryPolicy
from simple_binlog.control import is_control
from simple_binlog.errors import (
    CdcMirrorError,
    ConfigError,
    ExitCode,
    RetriableError,
    ServiceUnavailableError,
    exit_code_for,
)
from simple_binlog.naming import topic_name
from simple_binlog.routing import ShardRouter
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode, encode, parse_column_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SAMPLE_KEYS = 5  # differing keys named per store and kind of difference
_MASK = (1 << 64) - 1


class VerifyError(CdcMirrorError):
    """A store cannot be read for the comparison."""


# -- canonical values ------------------------------------------------------------------------


def canonical_text(column: ColumnType, value: Any) -> str:
    """The JSON text of a driver value's canonical wire form.

    The wire form goes through ``decode`` and ``encode`` once more so representations that
    differ only in spelling meet (a fixed BINARY's trailing zero bytes, which the binlog drops
    and a SELECT keeps).
    """
    wire = encode(column, value)
    if wire is not None:
        wire = encode(column, decode(column, wire))
    return orjson.dumps(wire).decode()


def from_wire(column: ColumnType, value: JsonScalar) -> Any:
    """A SimpleBinlog wire value (Redis) as the driver value ``canonical_text`` takes."""
    return decode(column, value)


def from_postgres(column: ColumnType, value: Any) -> Any:
    """A psycopg value of the warehouse (types by ``mirror.pgtypes``) as a driver value."""
    if value is None:
        return None
    kind = column.kind
    if kind in (Kind.UINT64, Kind.BIT) and isinstance(value, Decimal):
        return int(value)  # numeric(20)
    if kind in (Kind.UUID, Kind.INET4, Kind.INET6):
        return str(value.ip if hasattr(value, "ip") else value)  # uuid.UUID, ipaddress
    if isinstance(value, memoryview):
        return value.tobytes()
    if kind is Kind.TEXT and not isinstance(value, str):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()  # jsonb
    return value


def from_spark(column: ColumnType, value: Any) -> Any:  # noqa: PLR0911
    """A Spark value of the snapshot (types by ``merge.types``; timestamps selected as UTC
    text, see ``spark_select_expression``) as a driver value."""
    if value is None:
        return None
    kind = column.kind
    if kind in (Kind.UINT64, Kind.BIT) and isinstance(value, Decimal):
        return int(value)  # decimal(20,0)
    if isinstance(value, bytearray):
        return bytes(value)
    if kind in (Kind.DATETIME, Kind.TIMESTAMP) and isinstance(value, str):
        if value.startswith("0000-00-00"):
            return value
        return dt.datetime.fromisoformat(value)
    if kind is Kind.TIME and isinstance(value, str):
        return decode(column, value)  # Hive has no time of day type: the wire text
    return value


def _is_json(column: ColumnType) -> bool:
    return column.kind is Kind.TEXT and column.spec.strip().lower().startswith("json")


def _json_text(value: Any) -> Any:
    if isinstance(value, str):
        return orjson.dumps(orjson.loads(value), option=orjson.OPT_SORT_KEYS).decode()
    return value


# -- digests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableSchema:
    """MySQL's view of a logical table: its shards, columns (COLUMN_TYPE) and key."""

    table: str
    shards: tuple[tuple[str, str], ...]
    columns: dict[str, str]
    key: tuple[str, ...]

    def parsed(self) -> dict[str, ColumnType]:
        return {name: parse_column_type(spec) for name, spec in self.columns.items()}


def key_text(key_values: Sequence[str]) -> str:
    """A key for people: the key columns' canonical texts, strings unquoted, joined by '/'."""
    return "/".join(v[1:-1] if v.startswith('"') else v for v in key_values)


@dataclass
class TableDigest:
    """One store's rows of a logical table: key → row digest."""

    store: str
    table: str
    rows: dict[str, str] = field(default_factory=dict)
    duplicate_keys: list[str] = field(default_factory=list)

    def add(self, key: str, digest: str) -> None:
        if key in self.rows:
            self.duplicate_keys.append(key)
        self.rows[key] = digest

    @property
    def count(self) -> int:
        return len(self.rows) + len(self.duplicate_keys)

    @property
    def checksum(self) -> str:
        total = 0
        for key, digest in self.rows.items():
            mixed = hashlib.blake2b(f"{key}\0{digest}".encode(), digest_size=8).digest()
            total = (total + int.from_bytes(mixed, "big")) & _MASK
        return f"{total:016x}"

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "table": self.table,
            "rows": self.rows,
            "duplicateKeys": self.duplicate_keys,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TableDigest:
        return cls(
            store=str(document["store"]),
            table=str(document["table"]),
            rows=dict(document["rows"]),
            duplicate_keys=list(document["duplicateKeys"]),
        )


class RowDigester:
    """Turns one store's rows into (key, digest) with the MySQL schema's canonical forms."""

    def __init__(self, schema: TableSchema, columns: Sequence[str] | None = None) -> None:
        self.schema = schema
        self._types = schema.parsed()
        self.columns = list(columns) if columns is not None else list(schema.columns)
        unknown = [c for c in [*self.columns, *schema.key] if c not in self._types]
        if unknown:
            raise ConfigError(f"column {unknown[0]!r} is not a column of {schema.table} in MySQL.")

    def digest(self, shard: str, values: Mapping[str, Any]) -> tuple[str, str]:
        """(key, digest) of a row given as driver values by column name (absent: NULL)."""
        texts: list[str] = []
        for name in self.columns:
            column = self._types[name]
            value = values.get(name)
            if _is_json(column):
                value = _json_text(value)
            texts.append(canonical_text(column, value))
        key = key_text(
            [canonical_text(self._types[name], values.get(name)) for name in self.schema.key]
        )
        payload = orjson.dumps([shard, *texts])
        return key, hashlib.blake2b(payload, digest_size=12).hexdigest()


Converter = Callable[[ColumnType, Any], Any]  # a store's spelling of a value → a driver value
StoreRow = tuple[str, Mapping[str, Any]]  # (shard "schema.table", values by column name)


def as_driver(_column: ColumnType, value: Any) -> Any:
    """MySQL's own values: already driver values."""
    return value


def digest_rows(
    store: str,
    schema: TableSchema,
    rows: Iterable[StoreRow],
    convert: Converter = as_driver,
    columns: Sequence[str] | None = None,
) -> TableDigest:
    """Pure: one store's rows, in its own spelling, as a ``TableDigest`` over ``columns``
    (default all of MySQL's). Columns MySQL does not have are ignored; absent ones are NULL."""
    types = schema.parsed()
    digester = RowDigester(schema, columns)
    digest = TableDigest(store, schema.table)
    for shard, values in rows:
        driver = {name: convert(types[name], v) for name, v in values.items() if name in types}
        digest.add(*digester.digest(shard, driver))
    return digest


class StoreReader(Protocol):
    """One store's copy of a logical table, read as a digest.

    ``columns`` are the columns the store keeps (None: all); the reference store (MySQL) is
    asked for a digest over those, so a projecting store is compared on what it holds."""

    @property
    def store(self) -> str: ...

    @property
    def columns(self) -> Sequence[str] | None: ...

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest: ...


@dataclass(frozen=True)
class MemoryStore:
    """A store held in memory, rows in the store's own spelling (``convert`` reads them):
    the fake of every reader, and the way to check a digest already made elsewhere."""

    store: str
    rows: Sequence[StoreRow] = ()
    convert: Converter = as_driver
    columns: Sequence[str] | None = None

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest:
        wanted = columns if columns is not None else self.columns
        return digest_rows(self.store, schema, self.rows, self.convert, wanted)


@dataclass(frozen=True)
class DigestStore:
    """A digest made elsewhere (the Hive snapshot's, by the Spark process)."""

    made: TableDigest
    columns: Sequence[str] | None = None

    @property
    def store(self) -> str:
        return self.made.store

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest:
        return self.made


@dataclass(frozen=True)
class MySQLStore:
    settings: Settings
    mirror: TableMirror
    store: str = "mysql"
    columns: Sequence[str] | None = None

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest:
        return mysql_digest(self.settings, self.mirror, schema, columns)


@dataclass(frozen=True)
class WarehouseStore:
    settings: Settings
    mirror: TableMirror
    store: str = "warehouse"
    columns: Sequence[str] | None = None

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest:
        return warehouse_digest(self.settings, self.mirror, schema)


@dataclass(frozen=True)
class RedisStore:
    settings: Settings
    mirror: TableMirror
    store: str = "redis"

    @property
    def columns(self) -> Sequence[str] | None:
        return self.mirror.redis_columns

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest:
        return redis_digest(self.settings, self.mirror, schema)


@dataclass(frozen=True)
class KuduStore:
    settings: Settings
    mirror: TableMirror
    store: str = "kudu"
    columns: Sequence[str] | None = None

    def digest(self, schema: TableSchema, columns: Sequence[str] | None = None) -> TableDigest:
        return kudu_digest(self.settings, self.mirror, schema)


def mirror_stores(settings: Settings, mirror: TableMirror) -> list[StoreReader]:
    """The readers of the real-time stores ``mirror`` targets (the Hive snapshot is read by
    Spark, see ``run_spark_checks``): the warehouse, Redis and Kudu, in that order."""
    readers: dict[str, StoreReader] = {
        "warehouse": WarehouseStore(settings, mirror),
        "redis": RedisStore(settings, mirror),
        "kudu": KuduStore(settings, mirror),
    }
    return [reader for target, reader in readers.items() if target in mirror.targets]


# -- comparison ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreComparison:
    """One store against the reference (MySQL): counts, checksums and differing keys."""

    store: str
    rows: int
    checksum: str
    agrees: bool
    missing: int = 0  # keys of the reference the store lacks
    unexpected: int = 0  # keys the store has and the reference does not
    different: int = 0  # keys both have with different values
    duplicated: int = 0  # keys the store holds more than once
    sample_keys: tuple[str, ...] = ()

    def summary(self) -> str:
        if self.agrees:
            return "equal"
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.missing, "missing"),
                (self.unexpected, "unexpected"),
                (self.different, "different"),
                (self.duplicated, "duplicated"),
            )
            if n
        ]
        return ", ".join(parts) + (f"; e.g. keys {', '.join(self.sample_keys)}" if parts else "")

    def sentence(self, table: str, reference: str) -> str:
        """One sentence naming the store and the table: empty when the store agrees."""
        if self.agrees:
            return ""
        if self.store == reference:
            return f"{reference}'s {table} holds keys more than once ({self.summary()})."
        return f"{self.store}'s copy of {table} differs from {reference}: {self.summary()}."


@dataclass(frozen=True, slots=True)
class TableAgreement:
    """A logical table in every store: the reference first."""

    table: str
    reference: StoreComparison
    stores: tuple[StoreComparison, ...]

    @property
    def agrees(self) -> bool:
        return all(store.agrees for store in self.stores)

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(store, rows, checksum, verdict) per store, the reference first: a printable table.
        A reference holding a key twice says so in its verdict (it is not 'reference')."""
        reference = self.reference
        verdict = "reference" if reference.agrees else f"reference: {reference.summary()}"
        return [(reference.store, str(reference.rows), reference.checksum, verdict)] + [
            (s.store, str(s.rows), s.checksum, s.summary())
            for s in self.stores
            if s is not reference
        ]

    def disagreements(self) -> list[str]:
        """One sentence per store that does not agree, naming it and the table."""
        return [s.sentence(self.table, self.reference.store) for s in self.stores if not s.agrees]

    def describe(self) -> str:
        lines = [f"{self.table}: " + ("all stores agree" if self.agrees else "MISMATCH")]
        lines += [
            f"  {store:<10} {rows:>9} rows  {checksum}  {verdict}"
            for store, rows, checksum, verdict in self.rows()
        ]
        return "\n".join(lines)


def _sample(keys: Iterable[str], limit: int) -> list[str]:
    return sorted(keys)[:limit]


def compare_digest(
    reference: TableDigest, other: TableDigest, sample: int = SAMPLE_KEYS
) -> StoreComparison:
    missing = reference.rows.keys() - other.rows.keys()
    unexpected = other.rows.keys() - reference.rows.keys()
    different = {
        key
        for key in reference.rows.keys() & other.rows.keys()
        if reference.rows[key] != other.rows[key]
    }
    duplicated = set(other.duplicate_keys)
    agrees = not (missing or unexpected or different or duplicated)
    keys = (
        _sample(missing, sample)
        + _sample(unexpected, sample)
        + _sample(different, sample)
        + _sample(duplicated, sample)
    )
    return StoreComparison(
        store=other.store,
        rows=other.count,
        checksum=other.checksum,
        agrees=agrees,
        missing=len(missing),
        unexpected=len(unexpected),
        different=len(different),
        duplicated=len(duplicated),
        sample_keys=tuple(keys[:sample]),
    )


def compare(
    reference: TableDigest,
    others: Sequence[TableDigest],
    sample: int = SAMPLE_KEYS,
    projected: Mapping[str, TableDigest] | None = None,
) -> TableAgreement:
    """Every store against the reference. The reference's own duplicates fail it too.
    ``projected`` holds, per store that keeps only some columns, the reference over those."""
    own = StoreComparison(
        store=reference.store,
        rows=reference.count,
        checksum=reference.checksum,
        agrees=not reference.duplicate_keys,
        duplicated=len(set(reference.duplicate_keys)),
        sample_keys=tuple(_sample(set(reference.duplicate_keys), sample)),
    )
    projected = projected or {}
    stores = [
        compare_digest(projected.get(other.store, reference), other, sample) for other in others
    ]
    if reference.duplicate_keys:
        stores.insert(0, own)
    return TableAgreement(reference.table, own, tuple(stores))


def verify_stores(
    schema: TableSchema,
    reference: StoreReader,
    others: Sequence[StoreReader],
    sample: int = SAMPLE_KEYS,
) -> TableAgreement:
    """Read every store and compare it with the reference, a projecting store (Redis with
    ``redis_columns``) on the columns it keeps."""
    full = reference.digest(schema)
    projected = {
        other.store: reference.digest(schema, other.columns)
        for other in others
        if other.columns is not None
    }
    digests = [other.digest(schema) for other in others]
    return compare(full, digests, sample, projected)


# -- MySQL -----------------------------------------------------------------------------------


def _mysql_connect(settings: Settings, mirror: TableMirror) -> Any:
    import pymysql  # noqa: PLC0415

    from cdc_platform import mysql_source  # noqa: PLC0415

    instance = settings.instance(mirror.instance)
    try:
        return mysql_source.connect(
            instance,
            read_timeout=600,
            # TIMESTAMPs as UTC, the wire form's zone.
            init_command="SET time_zone = '+00:00'",
        )
    except pymysql.MySQLError as exc:
        raise ServiceUnavailableError(
            f"MySQL instance {instance.name!r} at {instance.host}:{instance.port} cannot be "
            f"reached ({exc.args[-1] if exc.args else exc})."
        ) from None


def mysql_schema(settings: Settings, mirror: TableMirror) -> TableSchema:
    """The shards of ``mirror`` (by the shard rules), the first shard's columns and the key
    (``tables[].key``, else MySQL's by ``cdc_platform.mysql_schema``'s rule)."""
    router = ShardRouter(list(settings.shard_rules))
    conn = _mysql_connect(settings, mirror)
    try:
        with conn.cursor() as cursor:
            shards = tuple(find_shards(cursor, router, mirror.name, mirror.db_prefix))
            if not shards:
                raise VerifyError(f"MySQL has no shard of table {mirror.name!r}.")
            shape = read_table_shape(cursor, *shards[0])
    finally:
        conn.close()
    columns, primary = shape.columns, shape.key
    key = tuple(mirror.key) if mirror.key else primary
    if not key:
        raise VerifyError(f"table {mirror.name!r} has no key: set tables[].key in the config.")
    return TableSchema(mirror.name, shards, columns, key)


def _routes_to(router: ShardRouter, schema: str, table: str, logical: str) -> bool:
    try:
        return router.route(schema, table).name == logical
    except ConfigError:
        return False


def mysql_digest(
    settings: Settings,
    mirror: TableMirror,
    schema: TableSchema,
    columns: Sequence[str] | None = None,
) -> TableDigest:
    """Every shard's rows, read with an unbuffered cursor (a large table streams); the digest
    covers ``columns`` (default all)."""
    import pymysql  # noqa: PLC0415
    import pymysql.cursors  # noqa: PLC0415

    select = ", ".join(f"`{name}`" for name in schema.columns)
    names = list(schema.columns)
    conn = _mysql_connect(settings, mirror)

    def rows() -> Iterable[StoreRow]:
        for db, table in schema.shards:
            with conn.cursor(pymysql.cursors.SSCursor) as cursor:
                cursor.execute(f"SELECT {select} FROM `{db}`.`{table}`")  # noqa: S608 - names from information_schema
                for values in cursor:
                    yield f"{db}.{table}", dict(zip(names, values, strict=True))

    try:
        digest = digest_rows("mysql", schema, rows(), as_driver, columns)
    except pymysql.MySQLError as exc:
        raise ServiceUnavailableError(
            f"reading {mirror.name} from MySQL failed ({exc.args[-1] if exc.args else exc})."
        ) from None
    finally:
        conn.close()
    return digest


# -- warehouse (PostgreSQL) ------------------------------------------------------------------


def warehouse_digest(settings: Settings, mirror: TableMirror, schema: TableSchema) -> TableDigest:
    """The warehouse table (``mirror.warehouse``): soft-deleted rows are not rows."""
    from cdc_platform.warehouse import sql, warehouse_errors  # noqa: PLC0415
    from mirror.warehouse import DELETED_COLUMN, SHARD_COLUMN, connect_warehouse  # noqa: PLC0415

    digest = TableDigest("warehouse", schema.table)
    target_schema = settings.mirror.warehouse_schema
    conn = connect_warehouse(settings.postgres)
    try:
        with warehouse_errors(f"the read of {mirror.name}"):
            present = {
                str(row[0])
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = %s",
                    (target_schema, schema.table),
                ).fetchall()
            }
            if not present:
                return digest  # never written: no rows
            columns = [name for name in schema.columns if name in present]
            soft = DELETED_COLUMN in present
            select = sql.SQL(", ").join(
                [sql.Identifier(name) for name in [SHARD_COLUMN, *columns]]
                + ([sql.Identifier(DELETED_COLUMN)] if soft else [])
            )
            query = sql.SQL("SELECT {} FROM {}").format(
                select, sql.Identifier(target_schema, schema.table)
            )
            with conn.cursor(name=f"verify_{uuid.uuid4().hex[:8]}") as cursor:
                cursor.itersize = 5000
                cursor.execute(query)
                live = (
                    (str(record[0]), dict(zip(columns, record[1:], strict=False)))
                    for record in cursor
                    if not (soft and record[-1])
                )
                digest = digest_rows("warehouse", schema, live, from_postgres)
            conn.commit()
    finally:
        conn.close()
    return digest


# -- Redis -----------------------------------------------------------------------------------


def redis_digest(
    settings: Settings, mirror: TableMirror, schema: TableSchema, batch: int = 2000
) -> TableDigest:
    """Every live value under ``<prefix>:<table>:`` (``mirror.redis_applier``); tombstones are
    deleted rows. Only ``redis_columns`` are compared when the mirror stores a projection."""
    from cdc_platform import redis_store  # noqa: PLC0415
    from mirror.redis_applier import decode_value  # noqa: PLC0415

    client = redis_store.connect(settings.redis, socket_timeout_s=60)
    pattern = f"{settings.redis.key_prefix}:{schema.table}:*"
    where = redis_store.address(settings.redis)
    try:
        with redis_store.redis_errors(f"the read of {mirror.name}", where):

            def values() -> Iterable[Any]:
                pending: list[bytes] = []
                for key in client.scan_iter(match=pattern, count=batch):
                    pending.append(key)
                    if len(pending) >= batch:
                        yield from client.mget(pending)
                        pending = []
                if pending:
                    yield from client.mget(pending)

            rows = redis_rows(values(), decode_value)
            digest = digest_rows("redis", schema, rows, from_wire, mirror.redis_columns)
    finally:
        client.close()
    return digest


def redis_rows(raws: Iterable[Any], decode_value: Callable[[Any], Any]) -> Iterable[StoreRow]:
    """The live rows among Redis values (``decode_value`` gives (offset, shard, row))."""
    for raw in raws:
        if raw is None:
            continue  # expired between SCAN and MGET
        _, shard, row = decode_value(raw)
        if row is None:
            continue  # a tombstone
        yield shard, row


# -- Kudu ------------------------------------------------------------------------------------


def kudu_rows(stored: Iterable[Mapping[str, Any]]) -> Iterable[StoreRow]:
    """Pure: the live rows among a Kudu table's stored rows (``mirror.kudu``: tombstones have
    ``_deleted``; ``_shard`` names the row's shard), values in the canonical Python form."""
    from mirror.kudu import DELETED_COLUMN, SHARD_COLUMN  # noqa: PLC0415

    for row in stored:
        if not row.get(DELETED_COLUMN):
            yield str(row[SHARD_COLUMN]), row


def kudu_digest(settings: Settings, mirror: TableMirror, schema: TableSchema) -> TableDigest:
    """The Kudu table (``kudu.table_prefix`` + table), read through the mirror's Java client
    bridge (a JVM in this process)."""
    from cdc_platform.kudu import client_jars  # noqa: PLC0415
    from mirror.kudu import KuduApplier  # noqa: PLC0415 - starts a JVM

    reader = KuduApplier(settings.kudu, settings.mirror, [mirror], client_jars(settings))
    try:
        return digest_rows("kudu", schema, kudu_rows(reader.scan(schema.table)))
    finally:
        reader.close()


# -- Hive snapshot (Spark) -------------------------------------------------------------------


def spark_select_expression(name: str, column: ColumnType, present: bool) -> str:
    """The Spark SQL expression reading a snapshot column: timestamps as UTC text (the session
    zone is UTC), so no Python-side time zone conversion can shift them; absent: NULL."""
    if not present:
        return f"NULL AS `{name}`"
    if column.kind in (Kind.DATETIME, Kind.TIMESTAMP):
        return f"CAST(`{name}` AS STRING) AS `{name}`"
    return f"`{name}`"


def hive_snapshot_digest(
    spark: SparkSession, settings: Settings, schema: TableSchema, day: str
) -> TableDigest:
    """The snapshot of ``day`` (its Iceberg tag, ``cdc_platform.lake_snapshots``)."""
    from cdc_platform.lake_snapshots import snapshot_as_of  # noqa: PLC0415
    from merge.schema import SHARD_COLUMN  # noqa: PLC0415

    snapshot = snapshot_as_of(spark, settings, schema.table, dt.date.fromisoformat(day))
    present = set(snapshot.columns)
    types = schema.parsed()
    digester = RowDigester(schema)
    digest = TableDigest("hive", schema.table)
    select = [f"`{SHARD_COLUMN}`"] + [
        spark_select_expression(name, types[name], name in present) for name in schema.columns
    ]
    frame = snapshot.selectExpr(*select)
    for row in frame.toLocalIterator():
        record = row.asDict()
        values = {name: from_spark(types[name], record[name]) for name in schema.columns}
        digest.add(*digester.digest(str(record[SHARD_COLUMN]), values))
    return digest


# -- the raw layer ---------------------------------------------------------------------------

Coordinate = tuple[str, int, int]  # Kafka topic, partition, offset


@dataclass(frozen=True, slots=True)
class RawLayerCheck:
    """The lake's rows of a table against the table's messages in Kafka."""

    table: str
    kafka_messages: int
    lake_rows: int
    missing: int  # in Kafka, not in the lake
    duplicated: int  # coordinates the lake holds more than once
    unexpected: int  # in the lake, not in Kafka
    repeated_changes: int  # binlogOffsets seen more than once in Kafka (per topic)
    sample: tuple[str, ...] = ()

    @property
    def exactly_once(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected or self.repeated_changes)

    def describe(self) -> str:
        verdict = (
            "exactly once"
            if self.exactly_once
            else (
                f"{self.missing} missing, {self.duplicated} duplicated, "
                f"{self.unexpected} unexpected, "
                f"{self.repeated_changes} changes repeated in Kafka; e.g. {', '.join(self.sample)}"
            )
        )
        return (
            f"{self.table} raw layer: {self.lake_rows} lake rows for {self.kafka_messages} "
            f"Kafka messages: {verdict}"
        )


def check_raw_layer(
    table: str,
    kafka: Sequence[tuple[str, int, int, int | None]],
    lake: Sequence[tuple[str, int, int, int]],
    sample: int = SAMPLE_KEYS,
) -> RawLayerCheck:
    """Pure: (topic, partition, offset, binlogOffset) rows of Kafka and of the lake."""
    from collections import Counter  # noqa: PLC0415

    wanted = Counter((t, p, o) for t, p, o, _ in kafka)
    got = Counter((t, p, o) for t, p, o, _ in lake)
    # None: a replayed (MOCK) row. Those share their binlogOffset by design (query time − 5
    # minutes, sequence 000000), so only collected changes must carry unique offsets.
    changes = Counter((t, b) for t, _, _, b in kafka if b is not None)
    missing = wanted.keys() - got.keys()
    unexpected = got.keys() - wanted.keys()
    duplicated = {c for c, n in got.items() if n > 1}
    repeated = {c for c, n in changes.items() if n > 1}
    shown = [
        f"{t}/{p}@{o}"
        for t, p, o in sorted(missing)[:sample]
        + sorted(duplicated)[:sample]
        + sorted(unexpected)[:sample]
    ] + [f"{t} binlogOffset {b}" for t, b in sorted(repeated)[:sample]]
    return RawLayerCheck(
        table=table,
        kafka_messages=len(kafka),
        lake_rows=len(lake),
        missing=len(missing),
        duplicated=len(duplicated),
        unexpected=len(unexpected),
        repeated_changes=len(repeated),
        sample=tuple(shown[:sample]),
    )


def lake_coordinates(
    spark: SparkSession, settings: Settings, table: str
) -> list[tuple[str, int, int, int]]:
    """(topic, partition, offset, binlogOffset) of every row of the table in the raw layer,
    all days."""
    frame = _raw_rows(spark, settings, table).select(
        "kafkaTopic", "kafkaPartition", "kafkaOffset", "binlogOffset"
    )
    return [(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in frame.toLocalIterator()]


def lake_days(spark: SparkSession, settings: Settings, table: str) -> list[str]:
    from cdc_platform.lake import DAY_COLUMN  # noqa: PLC0415

    found = _raw_rows(spark, settings, table).select(DAY_COLUMN).distinct().collect()
    return sorted(str(r[0]) for r in found)


def _raw_rows(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    """The table's rows of the raw layer (the lake's one raw table, ``cdc_platform.lake``),
    none before the writer made it or its database (read through the session catalog, an
    Iceberg table is a Hive table Spark cannot scan: the lake's catalog reads it)."""
    from cdc_platform.iceberg import LakeCatalog  # noqa: PLC0415
    from cdc_platform.lake import raw_rows, table_columns  # noqa: PLC0415

    lake = LakeCatalog.open(spark, settings, check=False)
    database = settings.stream_writer.database
    if not spark.catalog.databaseExists(f"{lake.catalog}.{database}"):
        ddl = ", ".join(f"`{name}` {kind}" for name, kind in table_columns(table))
        return spark.createDataFrame([], schema=ddl)
    return raw_rows(lake, database, table, "TRUE")


def kafka_coordinates(
    settings: Settings, mirror: TableMirror, idle_timeout_s: float = 60.0, attempts: int = 5
) -> list[tuple[str, int, int, int | None]]:
    """(topic, partition, offset, binlogOffset) of every committed message of ``mirror``'s
    shards in its instance's topic, read from the beginning to the end (read_committed).

    A broker that does not answer (e.g. restarting) is waited for: the read starts over,
    up to ``attempts`` times, before it fails with one sentence."""
    policy = RetryPolicy(first_delay_s=5.0, max_delay_s=30.0, max_attempts=attempts)

    def reading_again(exc: RetriableError, delay_s: float) -> None:
        log.warning("%s Reading again in %.0f s.", exc, delay_s)

    try:
        return policy.call(
            lambda: _read_coordinates(settings, mirror, idle_timeout_s), on_retry=reading_again
        )
    except ServiceUnavailableError as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.kafka.bootstrap_servers} did not answer while the "
            f"topic of {mirror.name} was read ({exc})."
        ) from exc


def _read_coordinates(
    settings: Settings, mirror: TableMirror, idle_timeout_s: float
) -> list[tuple[str, int, int, int | None]]:
    router = ShardRouter(list(settings.shard_rules))
    topic = topic_name(settings.kafka, mirror.instance)
    found: list[tuple[str, int, int, int | None]] = []
    records = read_to_end(
        settings.kafka,
        topic,
        group_id=f"cdc-verify-{uuid.uuid4().hex[:8]}",
        idle_timeout_s=idle_timeout_s,
    )
    try:
        for record in records:
            if is_control(record.key):
                continue  # a watermark heartbeat: not a row, never in the lake
            schema, _, table = (record.key or b"").decode().partition(".")
            if not _routes_to(router, schema, table, mirror.name):
                continue
            document = orjson.loads(record.value or b"null")
            change = None if document.get("source") == "MOCK" else int(document["binlogOffset"])
            found.append((topic, record.partition, record.offset, change))
    except (UnknownTopicError, ReadStalledError) as exc:
        raise VerifyError(f"Kafka topic {topic} cannot be read to its end ({exc}).") from exc
    return found


# -- the Spark side in a process of its own --------------------------------------------------


@dataclass(frozen=True, slots=True)
class SparkChecks:
    """What ``python -m cdc_mirror.verify`` found: snapshot digests per day, lake coordinates."""

    snapshots: dict[str, TableDigest]
    lake: list[tuple[str, int, int, int]]
    lake_days: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshots": {day: digest.to_json() for day, digest in self.snapshots.items()},
            "lake": self.lake,
            "lakeDays": self.lake_days,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> SparkChecks:
        return cls(
            snapshots={day: TableDigest.from_json(d) for day, d in document["snapshots"].items()},
            lake=[(str(t), int(p), int(o), int(b)) for t, p, o, b in document["lake"]],
            lake_days=list(document["lakeDays"]),
        )


# The checks stream every row to the driver (``toLocalIterator``), one Spark partition at a
# time: small partitions keep each task's result well inside the driver's heap, which a
# 128 MB Parquet split of a million-row table decoded into JVM rows does not.
CHECK_SPARK_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.files.maxPartitionBytes": str(8 * 1024 * 1024),
    "spark.driver.memory": "2g",
}


def spark_checks(
    spark: SparkSession,
    settings: Settings,
    table: str,
    days: Sequence[str],
    raw: bool,
    schema: TableSchema | None = None,
) -> SparkChecks:
    """``schema``: MySQL's view of the table, read when not given."""
    schema = schema or mysql_schema(settings, settings.table(table))
    snapshots = {day: hive_snapshot_digest(spark, settings, schema, day) for day in days}
    if not raw:
        return SparkChecks(snapshots, [], [])
    return SparkChecks(
        snapshots, lake_coordinates(spark, settings, table), lake_days(spark, settings, table)
    )


def run_spark_checks(
    table: str,
    days: Sequence[str],
    output: Path,
    env: Mapping[str, str] | None = None,
    raw: bool = True,
    timeout_s: float = 900.0,
    log_path: Path | None = None,
) -> SparkChecks:
    """Run ``spark_checks`` in a Spark process of its own (configured by ``env``)."""
    command = [sys.executable, "-m", "cdc_mirror.verify", "--table", table, "--output", str(output)]
    for day in days:
        command += ["--dt", day]
    if not raw:
        command.append("--no-raw")
    sink = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
    try:
        finished = subprocess.run(
            command,
            env={**os.environ, **(env or {})},
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise VerifyError(
            f"the Spark check of {table} took longer than {timeout_s:.0f} s."
        ) from None
    finally:
        if log_path is not None and not isinstance(sink, int):
            sink.close()
    if finished.returncode != 0:
        hint = f"; see {log_path}" if log_path is not None else ""
        raise VerifyError(f"the Spark check of {table} failed (exit {finished.returncode}){hint}.")
    return SparkChecks.from_json(json.loads(output.read_text()))


def main(argv: Sequence[str] | None = None) -> int:
    """Returns the command line's exit codes (``simple_binlog.errors.EXIT_CODES``): 2 for a
    configuration error, 3 when MySQL (or another service) cannot be read, 4 when ``--compare``
    finds a snapshot that differs from MySQL."""
    parser = argparse.ArgumentParser(
        prog="python -m cdc_mirror.verify",
        description="Digest a table's Hive snapshot (per --dt) and its raw lake coordinates.",
    )
    parser.add_argument("--table", required=True)
    parser.add_argument("--dt", action="append", default=[])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--no-raw", action="store_true")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="Also compare each --dt snapshot with MySQL now (exit code 4 when one differs).",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return _check(args, load_settings())
    except CdcMirrorError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exit_code_for(exc)


def _check(args: argparse.Namespace, settings: Settings) -> int:
    mirror = settings.table(args.table)
    schema = mysql_schema(settings, mirror)  # before Spark starts: MySQL away fails at once
    found = _spark_checks(settings, args.table, args.dt, not args.no_raw, schema)
    temporary = args.output.with_name(f".{args.output.name}.tmp")
    temporary.write_bytes(orjson.dumps(found.to_json()))
    temporary.replace(args.output)
    if not args.compare:
        return ExitCode.OK
    reference = MySQLStore(settings, mirror)
    agreements = [
        verify_stores(schema, reference, [DigestStore(found.snapshots[day])]) for day in args.dt
    ]
    for agreement in agreements:
        for sentence in agreement.disagreements():
            sys.stderr.write(f"{sentence}\n")
    return ExitCode.OK if all(a.agrees for a in agreements) else ExitCode.CHECK_FAILED


def _spark_checks(
    settings: Settings, table: str, days: Sequence[str], raw: bool, schema: TableSchema
) -> SparkChecks:
    """``spark_checks`` in a Spark session of this process."""
    from cdc_platform.iceberg import lake_session  # noqa: PLC0415

    spark = lake_session(settings, f"cdc-verify-{table}", CHECK_SPARK_CONF)
    try:
        return spark_checks(spark, settings, table, days, raw, schema)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
