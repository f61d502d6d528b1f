"""The lake's sides: the snapshot of a day, the lake's current state, and MySQL as of a
day's cut — hashed in Spark where the rows are in the lake, corrected per key from the raw
change layer where they are not.

* ``SparkTableSide``: an Iceberg table (a day's tag of the snapshot table, read through
  ``cdc_platform.lake_snapshots.snapshot_as_of``, or its main branch) hashed in Spark with the
  canonical encoding (``validation.spark_canonical``): the rows' key, md5 and
  ``_binlog_offset`` are computed once and cached in the session; each chunk is then one
  aggregate over them (three numbers leave Spark); a differing chunk's keys and hashes are
  read for the descent.
* ``OverlaySide``: another side with some keys' rows replaced by rows from the raw change
  layer (``RawChanges``, the SimpleBinlog rows the stream writer committed; their ``content``
  is the wire row, hashed by ``canonical.RowHasher``). A chunk's digest is the base's,
  corrected by the replaced keys' hashes (digests are sums); nothing else is read.

  - the **lake's current state** is the newest merged day (the snapshot table's main) with
    each key changed in the raw layer since that day replaced by its latest change, when that
    change is newer than the snapshot's row (``_binlog_offset``), as the next merge would
    apply it;
  - **MySQL as of a day's cut** (the end of day D, the cut the snapshot of D reflects) is
    MySQL now with each key changed after the cut (raw days after D, BINLOG changes only)
    replaced by its state before its first change after the cut: the before-image of an
    UPDATE or DELETE, absent for an INSERT (and for the new key of a key-changing UPDATE).
    MOCK events (replays and repairs) change nothing in MySQL and are passed over.

* ``LakeWatermark``: the lake has applied a Kafka position when the stream writer's committed
  progress (its row's offsets in ``_cdc_writer_progress``, ``cdc_platform.lake``) reaches it; used
  under ``PositionWatermark`` like a mirror's consumer group. After each wait the overlays
  re-read the raw layer (``refresh``), so a change MySQL's read reflects is in them.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from cdc_platform.config import KafkaSettings, Settings
from cdc_platform.iceberg import LakeCatalog
from cdc_platform.lake import default_writer_name, raw_rows, read_writer_progress
from cdc_platform.lake_snapshots import day_tag, snapshot_as_of, snapshot_table, tag_day
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.naming import topic_name
from simple_binlog.values import ColumnType, JsonScalar, Kind
from validation.canonical import ChunkDigest, RowHasher, python_canonical
from validation.plan import Chunk, Key, Side
from validation.spark_canonical import SPARK, register_functions, spark_chunk_sums
from validation.table import TableShape
from validation.watermark import KafkaWatermark, Marks, PositionWatermark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SHARD_COLUMN = "_shard"  # merge.schema: the snapshot's bookkeeping columns
OFFSET_COLUMN = "_binlog_offset"
_MASK = (1 << 64) - 1


# -- keys as Spark SQL literals and conditions ----------------------------------------------


def spark_literal(column: ColumnType, value: Any) -> str:  # noqa: PLR0911 - one per type
    """A key value as a Spark SQL literal of the snapshot column's type."""
    kind = column.kind
    if kind is Kind.UINT64 or (kind is Kind.BIT and (column.length or 1) >= 64):
        return f"CAST('{int(value)}' AS DECIMAL(20,0))"
    if isinstance(value, bool) or kind in (Kind.INT, Kind.YEAR, Kind.BIT):
        return str(int(value))
    if isinstance(value, Decimal):
        return f"{value}BD"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    return SPARK.visitor.literal(str(value))


def _compare(columns: Sequence[str], literals: Sequence[str], strict: str) -> str:
    """The lexicographic ``(columns) <strict> (literals)`` (``>`` or ``<``), or ``<=``/``>=``
    with ``strict`` ``<=``: spelled out (Spark has no row-value comparison)."""
    inclusive = strict.endswith("=")
    op = strict[0]
    terms = []
    for i, (column, literal) in enumerate(zip(columns, literals, strict=True)):
        equal = [f"{c} = {v}" for c, v in zip(columns[:i], literals[:i], strict=True)]
        last = i == len(columns) - 1
        terms.append(
            " AND ".join([*equal, f"{column} {op}{'=' if inclusive and last else ''} {literal}"])
        )
    return "(" + " OR ".join(f"({t})" for t in terms) + ")"


def chunk_condition(shape: TableShape, chunk: Chunk) -> str:
    columns = [SPARK.quote(n) for n in shape.key]
    types = shape.key_types
    parts = []
    if chunk.lo is not None:
        parts.append(
            _compare(
                columns, [spark_literal(t, v) for t, v in zip(types, chunk.lo, strict=True)], ">"
            )
        )
    if chunk.hi is not None:
        parts.append(
            _compare(
                columns, [spark_literal(t, v) for t, v in zip(types, chunk.hi, strict=True)], "<="
            )
        )
    return " AND ".join(parts) or "TRUE"


def keys_condition(shape: TableShape, keys: Sequence[Key]) -> str:
    types = shape.key_types
    columns = [SPARK.quote(n) for n in shape.key]
    if len(columns) == 1:
        values = ", ".join(spark_literal(types[0], k[0]) for k in keys)
        return f"{columns[0]} IN ({values})"
    return " OR ".join(
        "("
        + " AND ".join(
            f"{c} = {spark_literal(t, v)}" for c, t, v in zip(columns, types, key, strict=True)
        )
        + ")"
        for key in keys
    )


def _key_select(shape: TableShape) -> list[str]:
    """The key columns as Spark returns them to Python without a time zone: timestamps as
    their UTC text (parsed back in ``_key``)."""
    selected = []
    for name, column in zip(shape.key, shape.key_types, strict=True):
        quoted = SPARK.quote(name)
        if column.kind in (Kind.DATETIME, Kind.TIMESTAMP):
            selected.append(f"date_format({quoted}, 'yyyy-MM-dd HH:mm:ss.SSSSSS') AS {quoted}")
        else:
            selected.append(quoted)
    return selected


def _key(shape: TableShape, values: Sequence[Any]) -> Key:
    typed: list[Any] = []
    for column, value in zip(shape.key_types, values, strict=True):
        if value is None:
            typed.append(None)
        elif column.kind in (Kind.DATETIME, Kind.TIMESTAMP):
            typed.append(dt.datetime.fromisoformat(str(value)))
        elif column.kind in (Kind.UINT64, Kind.INT, Kind.YEAR, Kind.BIT):
            typed.append(int(value))
        elif isinstance(value, bytearray):
            typed.append(bytes(value))
        else:
            typed.append(value)
    return tuple(typed)


# -- a lake table hashed in Spark ------------------------------------------------------------


class SparkTableSide:
    """An Iceberg table's rows (``frame``: the data columns, ``_shard``, ``_binlog_offset``;
    a column it lacks is NULL) hashed in Spark."""

    def __init__(
        self, spark: SparkSession, frame: DataFrame | None, shape: TableShape, name: str
    ) -> None:
        self.name = name
        self.shape = shape
        self.queries = 0
        self._spark = spark
        self._view = f"cdc_validate_{uuid.uuid4().hex[:12]}"
        self._rows_view = f"{self._view}_rows"
        self._empty = frame is None
        if frame is None:
            return
        present = set(frame.columns)
        names = shape.compared_columns
        if any(is_json_column(shape.column_type(n)) for n in names if n in present):
            register_functions(spark)
        frame.createOrReplaceTempView(self._rows_view)
        pieces = [SPARK.piece(n if n in present else None, shape.column_type(n)) for n in names]
        shard = SPARK.visitor.prefixed(SPARK.quote(SHARD_COLUMN))
        offset = SPARK.quote(OFFSET_COLUMN) if OFFSET_COLUMN in present else "CAST(NULL AS BIGINT)"
        keys = ", ".join(SPARK.quote(n) for n in shape.key)
        hashed = spark.sql(
            f"SELECT {keys}, {SPARK.row_hash(shard, pieces)} AS h, {offset} AS o "  # noqa: S608
            f"FROM {self._rows_view}"
        )
        hashed.persist()
        hashed.createOrReplaceTempView(self._view)
        self._hashed = hashed
        self._texts = ", ".join(
            (SPARK.shown(n, shape.column_type(n)) if n in present else "NULL")
            + f" AS {SPARK.quote(n)}"
            for n in names
        )

    def close(self) -> None:
        if not self._empty:
            self._hashed.unpersist()
            self._spark.catalog.dropTempView(self._view)
            self._spark.catalog.dropTempView(self._rows_view)

    def _sql(self, sql: str) -> list[Any]:
        self.queries += 1
        try:
            return list(self._spark.sql(sql).collect())
        except Exception as exc:  # noqa: BLE001 - py4j/pyspark errors: one sentence
            reason = " ".join(str(exc).split())[:300]
            raise ServiceUnavailableError(
                f"reading {self.shape.table} from the lake failed ({reason})."
            ) from None

    def digest(self, chunk: Chunk) -> ChunkDigest:
        if self._empty:
            return ChunkDigest(0)
        where = chunk_condition(self.shape, chunk)
        row = self._sql(f"SELECT {spark_chunk_sums('h')} FROM {self._view} WHERE {where}")[0]  # noqa: S608
        return ChunkDigest.of(row[0], row[1])

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        wanted = count // 2
        if self._empty or wanted < 1:
            return None
        order = ", ".join(SPARK.quote(n) for n in self.shape.key)
        rows = self._sql(
            f"SELECT {', '.join(_key_select(self.shape))} FROM {self._view} "  # noqa: S608
            f"WHERE {chunk_condition(self.shape, chunk)} ORDER BY {order} "
            f"LIMIT 1 OFFSET {wanted - 1}"
        )
        return _key(self.shape, list(rows[0])) if rows else None

    def versions(self, where: str) -> dict[Key, tuple[str, int | None]]:
        """key → (row hash, ``_binlog_offset``) of the rows matching ``where``."""
        if self._empty:
            return {}
        width = len(self.shape.key)
        rows = self._sql(
            f"SELECT {', '.join(_key_select(self.shape))}, h, o FROM {self._view} WHERE {where}"  # noqa: S608
        )
        return {
            _key(self.shape, list(row[:width])): (
                str(row[width]),
                None if row[width + 1] is None else int(row[width + 1]),
            )
            for row in rows
        }

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        return {k: h for k, (h, _) in self.versions(chunk_condition(self.shape, chunk)).items()}

    def key_versions(self, keys: Sequence[Key]) -> dict[Key, tuple[str, int | None]]:
        return self.versions(keys_condition(self.shape, keys)) if keys else {}

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        return {k: h for k, (h, _) in self.key_versions(keys).items()}

    def rows(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        if self._empty or not keys:
            return {}
        width = len(self.shape.key)
        rows = self._sql(
            f"SELECT {', '.join(_key_select(self.shape))}, {SPARK.quote(SHARD_COLUMN)}, "  # noqa: S608
            f"{self._texts} FROM {self._rows_view} WHERE {keys_condition(self.shape, keys)}"
        )
        names = self.shape.compared_columns
        return {
            _key(self.shape, list(row[:width])): {
                "_shard": row[width],
                **{
                    n: bytes(v) if isinstance(v, bytearray) else v
                    for n, v in zip(names, row[width + 1 :], strict=True)
                },
            }
            for row in rows
        }


def is_json_column(column: ColumnType) -> bool:
    return column.kind is Kind.TEXT and column.spec.strip().lower().startswith("json")


# -- the raw change layer ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Override:
    """A key's row from the raw layer: ``row`` None when the key is absent; ``offset`` the
    change's binlogOffset (None: replaces the base's row whatever its offset)."""

    shard: str
    row: Mapping[str, JsonScalar] | None
    offset: int | None


@dataclass(frozen=True, slots=True)
class RawChange:
    offset: int
    event: str
    source: str
    shard: str
    content: dict[str, JsonScalar]
    before: dict[str, JsonScalar] | None


def raw_changes(lake: LakeCatalog, database: str, table: str, where: str) -> list[RawChange]:
    """The raw layer's rows of ``table`` matching ``where`` (on ``dt``), in binlogOffset order
    (none before the writer created the raw table)."""
    rows = (
        raw_rows(lake, database, table, where)
        .select(
            "binlogOffset",
            "eventType",
            "source",
            "schemaName",
            "tableName",
            "content",
            "beforeContent",
        )
        .collect()
    )
    changes = [
        RawChange(
            int(r[0]),
            str(r[1]),
            str(r[2]),
            f"{r[3]}.{r[4]}",
            orjson.loads(r[5]) if r[5] else {},
            orjson.loads(r[6]) if r[6] else None,
        )
        for r in rows
    ]
    changes.sort(key=lambda c: c.offset)
    return changes


def _wire_key(shape: TableShape, row: Mapping[str, JsonScalar]) -> Key | None:
    try:
        return shape.key_from_wire([row[n] for n in shape.key])
    except KeyError:
        return None


def latest_state(shape: TableShape, changes: Iterable[RawChange]) -> dict[Key, Override]:
    """Each key's latest change (in offset order), as the mirrors apply them: the row of an
    INSERT/UPDATE, absent after a DELETE or as the old key of a key-changing UPDATE."""
    found: dict[Key, Override] = {}
    for change in changes:
        key = _wire_key(shape, change.content)
        if key is None:
            continue
        if change.event == "UPDATE" and change.before is not None:
            old = _wire_key(shape, change.before)
            if old is not None and old != key:
                found[old] = Override(change.shard, None, change.offset)
        row = None if change.event == "DELETE" else change.content
        found[key] = Override(change.shard, row, change.offset)
    return found


def state_at_cut(shape: TableShape, changes: Iterable[RawChange]) -> dict[Key, Override]:
    """Each key's state before its first BINLOG change in ``changes`` (in offset order): the
    before-image of an UPDATE or DELETE, absent for an INSERT and for the new key of a
    key-changing UPDATE (MOCK events change nothing in MySQL: passed over)."""
    found: dict[Key, Override] = {}
    for change in changes:
        if change.source == "MOCK":
            continue
        key = _wire_key(shape, change.content)
        if key is None:
            continue
        if change.event == "UPDATE" and change.before is not None:
            old = _wire_key(shape, change.before)
            if old is not None and old not in found:
                found[old] = Override(change.shard, change.before, None)
            if old is not None and old != key and key not in found:
                found[key] = Override(change.shard, None, None)
            continue
        if key not in found:
            row = change.content if change.event == "DELETE" else None
            found[key] = Override(change.shard, row, None)
    return found


def _add(digest: ChunkDigest, row_hash: str, sign: int) -> ChunkDigest:
    return ChunkDigest(
        digest.count + sign,
        (digest.total + sign * int(row_hash[:16], 16)) & _MASK,
    )


class OverlaySide:
    """``base`` with the rows of ``load()``'s keys replaced (see the module). ``versions``:
    the base's (hash, offset) of keys, needed when an override carries an offset. Any other
    attribute is the base's (so MySQL as of a cut is still the source MySQL side)."""

    def __init__(
        self,
        base: Any,
        shape: TableShape,
        load: Callable[[], dict[Key, Override]],
        name: str | None = None,
    ) -> None:
        self.base = base
        self.shape = shape
        self.name = name or base.name
        self._load = load
        self._hasher = RowHasher(
            shape.compared_columns, [shape.column_type(n) for n in shape.compared_columns]
        )
        self._types = {n: shape.column_type(n) for n in shape.compared_columns}
        self.overrides = load()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.base, attribute)

    def refresh(self) -> None:
        self.overrides = self._load()

    def _hash(self, override: Override) -> str | None:
        if override.row is None:
            return None
        return self._hasher.hexdigest(override.shard, override.row)

    def _applied(self, keys: Sequence[Key], base: Mapping[Key, str]) -> dict[Key, str | None]:
        """The overridden keys among ``keys``, each with its row hash (None: absent)."""
        overrides = self.overrides
        chosen = [k for k in keys if k in overrides]
        offsets: dict[Key, int | None] = {}
        if any(overrides[k].offset is not None for k in chosen):
            offsets = {k: o for k, (_, o) in self.base.key_versions(chosen).items()}
        applied: dict[Key, str | None] = {}
        for key in chosen:
            override = overrides[key]
            stored = offsets.get(key)
            if (
                override.offset is not None
                and key in base
                and stored is not None
                and stored >= override.offset
            ):
                continue  # the base's row is as new as the change, or newer
            applied[key] = self._hash(override)
        return applied

    def digest(self, chunk: Chunk) -> ChunkDigest:
        digest: ChunkDigest = self.base.digest(chunk)
        keys = [k for k in self.overrides if chunk.holds(k)]
        if not keys:
            return digest
        base = self.base.key_hashes(keys)
        for key, row_hash in self._applied(keys, base).items():
            if key in base:
                digest = _add(digest, base[key], -1)
            if row_hash is not None:
                digest = _add(digest, row_hash, 1)
        return digest

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        middle: Key | None = self.base.middle_key(chunk, count)
        return middle  # any key inside the chunk splits it

    def _adjusted(self, base: dict[Key, str], keys: Sequence[Key]) -> dict[Key, str]:
        for key, row_hash in self._applied(keys, base).items():
            if row_hash is None:
                base.pop(key, None)
            else:
                base[key] = row_hash
        return base

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        base = self.base.row_hashes(chunk)
        return self._adjusted(base, [k for k in self.overrides if chunk.holds(k)])

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        self.refresh()  # settling: the raw layer as of this read
        return self._adjusted(self.base.key_hashes(keys), keys)

    def rows(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        found: dict[Key, dict[str, Any]] = self.base.rows(keys)
        base = {k: "" for k in found}
        for key in self._applied(list(keys), base):
            override = self.overrides[key]
            if override.row is None:
                found.pop(key, None)
                continue
            texts: dict[str, Any] = {"_shard": override.shard}
            for name, column in self._types.items():
                raw = python_canonical(column, override.row.get(name))
                binary = column.kind in (Kind.BINARY, Kind.GEOMETRY)
                texts[name] = raw if raw is None or binary else raw.decode()
            found[key] = texts
        return found


# -- the lake's applied position ----------------------------------------------------------------


class LakeWatermark(KafkaWatermark):
    """``KafkaWatermark`` whose "committed" offsets are the stream writer's: the offsets of
    its last committed progress (``_cdc_writer_progress``, written after the batch's tables),
    so the raw layer holds every message before them. ``on_reached``: called after each
    wait (the overlays re-read the raw layer)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        lake: LakeCatalog,
        database: str,
        writer: str,
        timeout_s: float = 120.0,
    ) -> None:
        super().__init__(settings, topic, f"cdc-validate-lake-{writer}", timeout_s)
        self.group = f"the stream writer {writer!r}"
        self._lake, self._database, self._writer = lake, database, writer
        self.on_reached: list[Callable[[], None]] = []

    def committed(self, partitions: list[int]) -> Marks:
        # The writer's row, not its commit's snapshot summary: maintenance expires the
        # progress table's snapshots, a quiet writer's last commit among them.
        progress = read_writer_progress(self._lake, self._database, self._writer)
        if progress is None:
            return {}
        return {
            p: o
            for (t, p), o in progress.next_offsets.items()
            if t == self.topic and p in partitions
        }

    def wait(self, mark: object) -> None:
        super().wait(mark)
        for hook in self.on_reached:
            hook()


# -- building the sides ------------------------------------------------------------------------


def merged_days(spark: SparkSession, settings: Settings, table: str) -> list[dt.date]:
    """The days of the table's snapshot (its day tags), oldest first; [] without a snapshot."""
    name = snapshot_table(settings, table)
    try:
        rows = spark.sql(f"SELECT name FROM {name}.refs WHERE type = 'TAG'").collect()  # noqa: S608
    except Exception as exc:  # noqa: BLE001 - AnalysisException: no such table
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            return []
        raise ServiceUnavailableError(
            f"listing the days of {name} failed ({' '.join(str(exc).split())[:300]})."
        ) from None
    return sorted(d for d in (tag_day(str(r[0])) for r in rows) if d is not None)


def snapshot_side(
    spark: SparkSession, settings: Settings, shape: TableShape, day: dt.date
) -> SparkTableSide:
    """The snapshot of ``day`` (its tag) hashed in Spark; it must have been merged."""
    if day not in merged_days(spark, settings, shape.table):
        raise ServiceUnavailableError(
            f"the lake has no snapshot of {shape.table} for {day.isoformat()} "
            f"(tag {day_tag(day)}); merge that day first or pick a merged one."
        )
    return SparkTableSide(
        spark,
        snapshot_as_of(spark, settings, shape.table, day),
        shape,
        f"snapshot {day.isoformat()}",
    )


def current_side(
    spark: SparkSession, settings: Settings, shape: TableShape, lake: LakeCatalog
) -> OverlaySide:
    """The lake's current state: the newest merged day overlaid with the raw layer since."""
    days = merged_days(spark, settings, shape.table)
    base = SparkTableSide(
        spark, spark.table(snapshot_table(settings, shape.table)) if days else None, shape, "lake"
    )
    where = f"dt >= '{days[-1].isoformat()}'" if days else "TRUE"
    database = settings.stream_writer.database

    def load() -> dict[Key, Override]:
        return latest_state(shape, raw_changes(lake, database, shape.table, where))

    return OverlaySide(base, shape, load, "lake")


def source_at_cut(
    source: Side, shape: TableShape, lake: LakeCatalog, settings: Settings, day: dt.date
) -> OverlaySide:
    """MySQL as of the end of ``day``: ``source`` (MySQL now) with the keys changed after it
    replaced by their state before the change."""
    where = f"dt > '{day.isoformat()}'"
    database = settings.stream_writer.database

    def load() -> dict[Key, Override]:
        return state_at_cut(shape, raw_changes(lake, database, shape.table, where))

    return OverlaySide(source, shape, load)


@dataclass
class LakeSides:
    """What ``validation.run`` validates a lake target with: the source (MySQL, or MySQL as
    of the day's cut), the target side, and the watermark (``own_watermark``: to close)."""

    source: Any
    side: Any
    watermark: Any
    own_watermark: Any


def writer_name(settings: Settings) -> str:
    """The stream writer whose progress says what the lake has applied (merge's choice)."""
    return (
        settings.merge.writer
        or settings.stream_writer.name
        or default_writer_name(i.name for i in settings.instances)
    )


def lake_sides(
    settings: Settings,
    shape: TableShape,
    source: Any,
    target: str,
    day: dt.date | None,
    watermark: Any,
    timeout_s: float,
) -> LakeSides:
    """The sides of target ``lake`` (the current state) or ``snapshot`` (of ``day``), in the
    session of ``cdc_platform.iceberg.lake_session`` (an existing one is reused)."""
    from cdc_platform.iceberg import lake_session  # noqa: PLC0415 - imports pyspark

    # The JSON normaliser is a Python UDF: its workers run this interpreter (its packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = lake_session(settings, "cdc-mirror-validate")
    lake = LakeCatalog.open(spark, settings, check=False)
    overlays: list[OverlaySide] = []
    if target == "snapshot":
        assert day is not None
        side: Any = snapshot_side(spark, settings, shape, day)
        source = source_at_cut(source, shape, lake, settings, day)
        overlays.append(source)
    else:
        side = current_side(spark, settings, shape, lake)
        overlays.append(side)
    own = None
    if watermark is None:
        instance = settings.table(shape.table).instance
        applied = LakeWatermark(
            settings.kafka,
            topic_name(settings.kafka, instance),
            lake,
            settings.stream_writer.database,
            writer_name(settings),
            timeout_s,
        )
        applied.on_reached += [overlay.refresh for overlay in overlays]
        own = watermark = PositionWatermark(
            applied, settings.kafka, instance, source.current_position, timeout_s
        )
    return LakeSides(source, side, watermark, own)
