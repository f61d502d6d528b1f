"""The Kudu applier: a Kudu table per logical table, written through the Java client in-process.

Layout (Kudu table ``kudu.table_prefix + <logical table>``): the MySQL columns (types by
``mirror.kudu_types``), the key first as Kudu's primary key (``TableMirror.key``, else the
messages' ``primaryKeys``), then ``_binlog_offset INT64`` (the offset of the change the row
holds), ``_shard STRING`` (``schema.table`` it came from) and ``_deleted BOOL``. Partitioning:
``HASH(<all key columns>) PARTITIONS kudu.hash_buckets`` (no range partitions), so a batch's
keys spread over every tablet; ``kudu.replicas`` replicas per tablet. Readers filter
``_deleted = false``.

The version guard. Kudu has no conditional write (no compare-and-set), so the guard is held by
two things together:

1. *One writer per key.* A key is written only by the mirror process that owns the Kafka
   partition of its shard (the consumer group hands each partition to one member, and the
   pending batch is applied and committed before a partition is handed over), as long as a
   logical key does not move between shards (a key-changing UPDATE is a delete of the old key
   and a write of the new one, both from the same shard).
2. *A version column read before the write.* Per batch and table, the stored
   ``_binlog_offset`` of the batch's keys is read (one scan with an IN-list predicate on the
   key), changes with an equal or older offset are dropped as stale, and the rest are upserted
   in one flush. Nothing else writes those keys in between, by 1.

Tombstones: a DELETE upserts the row's last values with ``_deleted = true`` at the delete's
offset, so an older write replayed later is stale. With ``warehouse_delete: hard`` (the
default) a tombstone is removed once it is older than ``mirror.tombstone_ttl_s`` (its age is
the offset's second, see ``simple_binlog.offsets``; ``purge_tombstones`` runs at most every
``_PURGE_EVERY_S``); ``soft`` keeps them. The purge re-reads the candidates just before
deleting them; another mirror process could still write one of those keys in the moment
between (a key deleted longer ago than the TTL and written again exactly then), which is the
documented limit of purging without compare-and-set.

Schema evolution: a column a change carries that the table lacks is added (ALTER TABLE ADD
COLUMN, nullable) before the batch is written; no restart. Kudu cannot change a column's type,
so a MySQL type change that maps to another Kudu type stops the table.

Errors: a master or tablet server that cannot be reached raises ``ServiceUnavailableError``
(the consumer retries the batch). A table Kudu cannot hold — a key column of a type Kudu
refuses in a key, a changed column type, a value out of Kudu's range (a zero date), a row Kudu
refuses — is *stopped*: one sentence is logged, ``stopped`` names it with the reason, its
changes are not applied from then on (counted in the log), and the other tables keep flowing.
After fixing the cause, mirror the table again from a snapshot and restart the mirror.

The bridge: JPype starts the JVM inside this process once (``kudu.client_jars`` on its
classpath). A batch crosses it a few times, not per value: ``mirror.kudu_batch`` turns the
changes into one JSON buffer of their wire values and ``io.cdcmirror.kudu.GuardedBatch``
(stack/jvm/kudu, built into ``cdc-mirror-kudu.jar`` beside the client) decodes them, reads the
stored offsets and upserts in one call (building rows call by call through JPype cost about
130 µs a row).
``writer="python"`` keeps that call-by-call path as the reference the Java one is tested
against (tests/integration/mirror/test_kudu.py); the mirror does not use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cdc_platform import kudu as platform_kudu
from cdc_platform.config import KuduSettings, MirrorSettings, TableMirror
from cdc_platform.kudu import GETTERS, java_reason, start_jvm
from mirror.applier import ApplyResult, ChangeApplier
from mirror.kudu_batch import BatchBuffer, ValueRefusedError, buffers
from mirror.kudu_types import KuduType, key_refusal, kudu_type
from mirror.plan import RowChange, RowKey, latest_per_key
from simple_binlog.errors import (
    CdcMirrorError,
    ConfigError,
    ContractError,
    ServiceUnavailableError,
    UnsupportedTypeError,
)
from simple_binlog.offsets import SEQ_SPAN
from simple_binlog.values import decode, parse_column_type

log = logging.getLogger(__name__)

OFFSET_COLUMN = "_binlog_offset"
SHARD_COLUMN = "_shard"
DELETED_COLUMN = "_deleted"
_BOOKKEEPING = (OFFSET_COLUMN, SHARD_COLUMN, DELETED_COLUMN)
_PURGE_EVERY_S = 600.0
_BATCH_CLASS = "io.cdcmirror.kudu.GuardedBatch"
_BATCH_JAR = "cdc-mirror-kudu*.jar"
_COMMENT = "MySQL type: "  # each mirrored column's comment: how its values are carried
_SETTER = {
    "INT8": "addByte",
    "INT16": "addShort",
    "INT32": "addInt",
    "INT64": "addLong",
    "UNIXTIME_MICROS": "addLong",
    "DECIMAL": "addDecimal",
    "FLOAT": "addFloat",
    "DOUBLE": "addDouble",
    "DATE": "addDate",
    "STRING": "addString",
    "BINARY": "addBinary",
    "BOOL": "addBoolean",
}


class TableStopped(CdcMirrorError):
    """Kudu cannot hold this table (or a value of it); the sentence says why."""


@dataclass(slots=True)
class BatchTimings:
    """Where one ``apply_batch`` spent its time, in seconds: ``java_*`` as the batch writer
    measured it (decoding the buffer, the guard's read of the stored offsets, building and
    flushing the upserts), ``python`` the rest (planning, keys, buffers, the bridge). Logged
    at DEBUG per batch and kept as ``KuduApplier.last_timings``, so a slow batch says which
    step was slow."""

    rows: int = 0
    python: float = 0.0
    java_parse: float = 0.0
    java_read: float = 0.0
    java_write: float = 0.0


class _Java:
    """The JVM and the Kudu client's classes (JPype). The JVM is started once per process."""

    def __init__(self, jars: Path, heap: str) -> None:
        import jpype  # noqa: PLC0415 - only a Kudu mirror loads the JVM

        start_jvm(jars, heap, needs=(_BATCH_JAR,))
        from java.lang import Byte, Integer, Long, Short  # noqa: PLC0415
        from java.math import BigDecimal  # noqa: PLC0415
        from java.sql import Date  # noqa: PLC0415
        from java.util import ArrayList  # noqa: PLC0415
        from org.apache.kudu import ColumnSchema, ColumnTypeAttributes, Schema, Type  # noqa: PLC0415
        from org.apache.kudu.client import (  # noqa: PLC0415
            AlterTableOptions,
            CreateTableOptions,
            KuduPredicate,
            SessionConfiguration,
        )

        self.jpype = jpype
        self.JException: type[BaseException] = jpype.JException
        self.ArrayList, self.BigDecimal, self.Date = ArrayList, BigDecimal, Date
        self.boxes = {"INT8": Byte, "INT16": Short, "INT32": Integer, "INT64": Long}
        self.ColumnSchema, self.ColumnTypeAttributes = ColumnSchema, ColumnTypeAttributes
        self.Schema, self.Type = Schema, Type
        self.AlterTableOptions, self.CreateTableOptions = AlterTableOptions, CreateTableOptions
        self.KuduPredicate = KuduPredicate
        self.SessionConfiguration = SessionConfiguration
        try:
            self.GuardedBatch = jpype.JClass(_BATCH_CLASS)
        except TypeError:  # JPype's "class not found"
            raise ConfigError(
                f"{_BATCH_CLASS} is not on the JVM's classpath; run 'cdc-mirror stack up "
                "kudu-master' once to build cdc-mirror-kudu.jar, or add it to kudu.client_jars."
            ) from None
        self.strings = jpype.JArray(jpype.JString)
        self.ints = jpype.JArray(jpype.JInt)
        self.bytes = jpype.JArray(jpype.JByte)

    def batch(self, handle: Any, buffer: BatchBuffer) -> Any:
        """A ``GuardedBatch`` of the table ``handle`` for ``buffer``'s columns."""
        return self.GuardedBatch(
            handle,
            self.strings(buffer.names),
            self.strings(buffer.forms),
            self.ints(buffer.fixed_lengths),
        )

    def java_value(self, kudu: KuduType, value: Any) -> Any:  # noqa: PLR0911 - one per type
        """A canonical Python value as the Java object the client wants (setters, predicates)."""
        carried = kudu.to_java(value)
        if kudu.name == "DECIMAL":
            return self.BigDecimal(carried)
        if kudu.name == "DATE":
            return self.Date.valueOf(carried)
        if kudu.name == "UNIXTIME_MICROS":
            return self.boxes["INT64"](self.jpype.JLong(carried))
        box = self.boxes.get(kudu.name)
        if box is not None:
            primitive = {
                "INT8": self.jpype.JByte,
                "INT16": self.jpype.JShort,
                "INT32": self.jpype.JInt,
                "INT64": self.jpype.JLong,
            }[kudu.name]
            return box(primitive(carried))
        if kudu.name == "FLOAT":
            return self.jpype.JFloat(carried)
        if kudu.name == "DOUBLE":
            return self.jpype.JDouble(carried)
        if kudu.name == "BINARY":
            return self.jpype.JArray(self.jpype.JByte)(carried)
        return carried

    def python_value(self, kudu: KuduType, result: Any, index: int) -> Any:
        """Column ``index`` of a scanned row, in the canonical Python form."""
        if result.isNull(index):
            return None
        raw = getattr(result, GETTERS[kudu.name])(index)
        if kudu.name in ("DECIMAL",):
            raw = str(raw.toPlainString())
        elif kudu.name in ("STRING", "DATE"):
            raw = str(raw)
        elif kudu.name == "BINARY":
            raw = bytes(raw)
        elif kudu.name in ("FLOAT", "DOUBLE"):
            raw = float(raw)
        elif kudu.name == "BOOL":
            raw = bool(raw)
        else:
            raw = int(raw)
        return kudu.from_java(raw)


class _Table:
    """An open Kudu table: its handle, schema and the Kudu type of each column."""

    def __init__(self, java: _Java, handle: Any) -> None:
        self.handle = handle
        schema = handle.getSchema()
        self.schema = schema
        self.index: dict[str, int] = {}
        self.types: dict[str, KuduType] = {}
        for position in range(schema.getColumnCount()):
            column = schema.getColumnByIndex(position)
            name = str(column.getName())
            self.index[name] = position
            self.types[name] = _stored_type(java, column)
        self.key_columns = tuple(str(c.getName()) for c in schema.getPrimaryKeyColumns())


def _stored_type(java: _Java, column: Any) -> KuduType:
    """The column's type: by the MySQL type its comment records, else by Kudu's schema."""
    comment = str(column.getComment() or "")
    if comment.startswith(_COMMENT):
        return kudu_type(parse_column_type(comment[len(_COMMENT) :]))
    name = str(column.getType().name())
    if name == "DECIMAL":
        attributes = column.getTypeAttributes()
        return KuduType(name, int(attributes.getPrecision()), int(attributes.getScale()), "decimal")
    return KuduType(name)


class KuduApplier(ChangeApplier):
    def __init__(
        self,
        kudu: KuduSettings,
        mirror_settings: MirrorSettings,
        tables: Sequence[TableMirror],
        client_jars: Path,
        writer: Literal["java", "python"] = "java",
    ) -> None:
        """``writer``: "java" (the batch writer, what the mirror runs) or "python" (the
        call-by-call reference path, for tests and the benchmark)."""
        self._settings = kudu
        self._writer = writer
        self._ttl_s = mirror_settings.tombstone_ttl_s
        self._tables = {t.name: t for t in tables}
        self._java = _Java(client_jars, kudu.jvm_heap)
        self._masters = platform_kudu.masters(kudu)
        self._client = platform_kudu.connect(kudu)
        self._open: dict[str, _Table] = {}
        self.stopped: dict[str, str] = {}  # table → the sentence that stopped it
        self._dropped: dict[str, int] = {}
        self._last_purge = time.monotonic()
        self.last_timings = BatchTimings()
        self._call(self._client.getTablesList, "listing tables")

    # -- lifecycle ----------------------------------------------------------------------------
    def apply_batch(self, changes: Iterable[RowChange]) -> ApplyResult:
        started = time.perf_counter()
        timings = self.last_timings = BatchTimings()
        plan = latest_per_key(changes)
        result = ApplyResult(superseded=plan.superseded)
        for table, latest in plan.tables.items():
            if table in self.stopped:
                self._dropped[table] = self._dropped.get(table, 0) + len(latest)
                continue
            try:
                result += self._apply_table(table, latest, plan.column_types(table))
            except TableStopped as exc:
                self._stop(table, str(exc), len(latest))
        if time.monotonic() - self._last_purge >= _PURGE_EVERY_S:
            self.purge_tombstones()
        java = timings.java_parse + timings.java_read + timings.java_write
        timings.python = time.perf_counter() - started - java
        timings.rows = result.applied + result.stale
        log.debug(
            "Kudu batch: %d rows, python %.1f ms, java parse %.1f ms, read %.1f ms, write %.1f ms",
            timings.rows,
            timings.python * 1000,
            timings.java_parse * 1000,
            timings.java_read * 1000,
            timings.java_write * 1000,
        )
        return result

    def close(self) -> None:
        for table, count in self._dropped.items():
            log.error("Kudu table %s stayed stopped; %d changes were not applied", table, count)
        try:
            self._client.close()
        except self._java.JException as exc:  # closing is best effort; nothing is pending
            log.warning("closing the Kudu client failed (%s)", java_reason(exc))

    def _stop(self, table: str, reason: str, count: int) -> None:
        self.stopped[table] = reason
        self._dropped[table] = self._dropped.get(table, 0) + count
        log.error("Kudu mirror of %s stopped: %s", table, reason)

    # -- calls through the client, with error translation ------------------------------------
    def _call(self, work: Any, what: str) -> Any:
        try:
            with platform_kudu.kudu_errors(what, self._masters):
                return work()
        except ServiceUnavailableError:
            self._open.clear()  # reopen after an error: the schema may have moved on
            raise

    # -- reading (the row-for-row check) -----------------------------------------------------
    def scan(self, table: str) -> Iterator[dict[str, Any]]:
        """Every stored row of ``table``, tombstones and bookkeeping columns included, each
        value in the canonical Python form; nothing when the table was never written."""
        opened = self._open_table(table)
        if opened is None:
            return
        names = list(opened.index)
        java = self._java
        try:
            scanner = self._client.newScannerBuilder(opened.handle).build()
            while scanner.hasMoreRows():
                rows = scanner.nextRows()
                while rows.hasNext():
                    row = rows.next()
                    yield {
                        n: java.python_value(opened.types[n], row, i) for i, n in enumerate(names)
                    }
            scanner.close()
        except java.JException as exc:
            raise ServiceUnavailableError(
                f"Kudu at {self._masters} failed scanning {self._table_name(table)} "
                f"({java_reason(exc)})."
            ) from None

    # -- DDL ----------------------------------------------------------------------------------
    def drop_tables(self) -> list[str]:
        """Delete every Kudu table under ``kudu.table_prefix`` (a demo's or a benchmark's own
        tables); returns their names. Refused without a prefix: that would be every table."""
        prefix = self._settings.table_prefix
        if not prefix:
            raise ConfigError("dropping the Kudu tables needs a kudu.table_prefix.")
        listed = self._call(
            lambda: self._client.getTablesList(prefix).getTablesList(), "listing tables"
        )
        names = [str(name) for name in listed if str(name).startswith(prefix)]
        for name in names:
            self._call(lambda n=name: self._client.deleteTable(n), f"deleting table {name}")
        self._open.clear()
        return names

    def _table_name(self, table: str) -> str:
        return self._settings.table_prefix + table

    def _open_table(self, table: str) -> _Table | None:
        name = self._table_name(table)
        if not self._call(lambda: self._client.tableExists(name), f"looking up table {name}"):
            return None
        handle = self._call(lambda: self._client.openTable(name), f"opening table {name}")
        return _Table(self._java, handle)

    def _ensure_table(
        self, table: str, key_columns: tuple[str, ...], types: Mapping[str, str]
    ) -> _Table:
        opened = self._open.get(table) or self._open_table(table)
        if opened is None:
            self._create(table, key_columns, types)
            opened = self._open_table(table)
            assert opened is not None
        wanted = {name: kudu_type(parse_column_type(spec)) for name, spec in types.items()}
        for name, kudu in wanted.items():
            stored = opened.types.get(name)
            if stored is not None and not stored.same_as(kudu):
                raise TableStopped(
                    f"column {name} is now {types[name]} ({kudu.text} in Kudu) but the Kudu "
                    f"table holds {stored.text}, and Kudu cannot change a column's type"
                )
        missing = [name for name in wanted if name not in opened.types]
        if missing:
            self._add_columns(table, {name: types[name] for name in missing})
            opened = self._open_table(table)
            assert opened is not None
        self._open[table] = opened
        return opened

    def _column(self, name: str, spec: str, key: bool = False) -> Any:
        java = self._java
        kudu = kudu_type(parse_column_type(spec))
        builder = java.ColumnSchema.ColumnSchemaBuilder(name, getattr(java.Type, kudu.name))
        builder = builder.comment(_COMMENT + spec)
        if kudu.name == "DECIMAL":
            attributes = (
                java.ColumnTypeAttributes.ColumnTypeAttributesBuilder()
                .precision(kudu.precision)
                .scale(kudu.scale)
                .build()
            )
            builder = builder.typeAttributes(attributes)
        return builder.key(key).nullable(not key).build()

    def _create(self, table: str, key_columns: tuple[str, ...], types: Mapping[str, str]) -> None:
        missing = [k for k in key_columns if k not in types]
        if missing:
            raise ConfigError(f"key column {missing[0]!r} of table {table!r} is not a column.")
        java = self._java
        columns = java.ArrayList()
        for name in key_columns:
            column = parse_column_type(types[name])
            refusal = key_refusal(name, column)
            if refusal:
                raise TableStopped(refusal)
            columns.add(self._column(name, types[name], key=True))
        for name, spec in types.items():
            if name not in key_columns:
                columns.add(self._column(name, spec))
        for name, kind in ((OFFSET_COLUMN, "INT64"), (SHARD_COLUMN, "STRING")):
            columns.add(
                java.ColumnSchema.ColumnSchemaBuilder(name, getattr(java.Type, kind))
                .nullable(False)
                .build()
            )
        columns.add(
            java.ColumnSchema.ColumnSchemaBuilder(DELETED_COLUMN, java.Type.BOOL)
            .nullable(False)
            .build()
        )
        keys = java.ArrayList()
        for name in key_columns:
            keys.add(name)
        options = java.CreateTableOptions()
        options.addHashPartitions(keys, self._settings.hash_buckets)
        options.setNumReplicas(self._settings.replicas)
        name = self._table_name(table)
        try:
            self._client.createTable(name, java.Schema(columns), options)
        except java.JException as exc:
            if "already exists" not in java_reason(exc):  # another mirror process made it
                self._open.clear()
                raise ServiceUnavailableError(
                    f"Kudu at {self._masters} failed creating table {name} ({java_reason(exc)})."
                ) from None
        log.info(
            "Kudu table %s created (key %s, %d hash buckets)",
            name,
            ", ".join(key_columns),
            self._settings.hash_buckets,
        )

    def _add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        name = self._table_name(table)
        options = self._java.AlterTableOptions()
        for column, spec in columns.items():
            log.info("Kudu table %s: adding column %s (%s)", name, column, spec)
            options.addColumn(self._column(column, spec))
        try:
            self._client.alterTable(name, options)
        except self._java.JException as exc:
            if "already exists" not in java_reason(exc):  # else: added by another process
                raise ServiceUnavailableError(
                    f"Kudu at {self._masters} failed adding columns to {name} ({java_reason(exc)})."
                ) from None

    # -- reads --------------------------------------------------------------------------------
    def _canonical_key(self, key_columns: tuple[str, ...], change: RowChange) -> tuple[Any, ...]:
        try:
            return tuple(
                decode(parse_column_type(change.column_types[name]), value, name)
                for name, value in zip(key_columns, change.key, strict=True)
            )
        except (ContractError, KeyError) as exc:
            raise TableStopped(f"a key of the batch cannot be read ({exc})") from None

    def _stored_versions(
        self, opened: _Table, keys: Sequence[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], int]:
        """The stored ``_binlog_offset`` of ``keys`` (tombstones included)."""
        java = self._java
        builder = self._client.newScannerBuilder(opened.handle)
        for position, name in enumerate(opened.key_columns):
            kudu = opened.types[name]
            values = java.ArrayList()
            for value in {key[position] for key in keys}:
                values.add(java.java_value(kudu, value))
            column = opened.schema.getColumn(name)
            builder = builder.addPredicate(java.KuduPredicate.newInListPredicate(column, values))
        projected = java.ArrayList()
        for name in (*opened.key_columns, OFFSET_COLUMN):
            projected.add(name)
        scanner = builder.setProjectedColumnNames(projected).build()
        width = len(opened.key_columns)
        key_types = [opened.types[name] for name in opened.key_columns]
        found: dict[tuple[Any, ...], int] = {}
        while scanner.hasMoreRows():
            rows = scanner.nextRows()
            while rows.hasNext():
                row = rows.next()
                key = tuple(java.python_value(key_types[i], row, i) for i in range(width))
                found[key] = int(row.getLong(width))
        scanner.close()
        return found

    # -- writes -------------------------------------------------------------------------------
    def _apply_table(
        self, table: str, latest: dict[RowKey, RowChange], types: dict[str, str]
    ) -> ApplyResult:
        mirror = self._tables.get(table)
        first = next(iter(latest.values()))
        key_columns = tuple(mirror.key) if mirror and mirror.key else first.key_columns
        opened = self._ensure_table(table, key_columns, types)
        if opened.key_columns != key_columns:
            raise TableStopped(
                f"the Kudu table's key is ({', '.join(opened.key_columns)}), not "
                f"({', '.join(key_columns)})"
            )
        keyed = {self._canonical_key(key_columns, c): c for c in latest.values()}
        if self._writer == "java":
            return self.write_columns(table, opened, list(keyed.values()), guarded=True)
        stored = self._call(
            lambda: self._stored_versions(opened, list(keyed)), f"reading the versions of {table}"
        )
        fresh = [c for k, c in keyed.items() if stored.get(k, -1) < c.offset]
        if fresh:
            self._write(table, opened, fresh)
        return ApplyResult(applied=len(fresh), stale=len(keyed) - len(fresh))

    def write_columns(
        self, table: str, opened: _Table, changes: Sequence[RowChange], guarded: bool
    ) -> ApplyResult:
        """``changes`` (one per key) through ``GuardedBatch``: with ``guarded``, the stored
        offsets are read and only newer changes upserted; without, every change is upserted
        (the benchmark's baseline: the same client and rows without the read — never the
        mirror's path)."""
        try:
            parts = buffers(changes, opened.types)
        except ValueRefusedError as exc:
            raise TableStopped(str(exc)) from None
        result = ApplyResult()
        for part in parts:
            result += self._write_buffer(table, opened, part, guarded)
        return result

    def _write_buffer(
        self, table: str, opened: _Table, buffer: BatchBuffer, guarded: bool
    ) -> ApplyResult:
        java = self._java
        outcome = self._call(
            lambda: java.batch(opened.handle, buffer).apply(
                self._client, java.bytes(buffer.changes), guarded
            ),
            f"writing to {table}",
        )
        if outcome.refused is not None:
            raise TableStopped(str(outcome.refused))
        if outcome.failed is not None:
            self._open.clear()
            raise ServiceUnavailableError(
                f"Kudu at {self._masters} failed writing to {table} ({outcome.failed})."
            )
        timings = self.last_timings
        timings.java_parse += int(outcome.parseNanos) / 1e9
        timings.java_read += int(outcome.readNanos) / 1e9
        timings.java_write += int(outcome.writeNanos) / 1e9
        return ApplyResult(applied=int(outcome.applied), stale=int(outcome.stale))

    def _write(self, table: str, opened: _Table, changes: list[RowChange]) -> None:
        session = self._client.newSession()
        session.setFlushMode(self._java.SessionConfiguration.FlushMode.MANUAL_FLUSH)
        session.setMutationBufferSpace(len(changes) + 1)
        try:
            for change in changes:
                session.apply(self._upsert(table, opened, change))
            responses = self._call(session.flush, f"writing to {table}")
        finally:
            self._call(session.close, f"closing a session of {table}")
        for response in responses:
            if response.hasRowError():
                error = response.getRowError()
                status = error.getErrorStatus()
                reason = str(status.toString())
                if status.isInvalidArgument() or status.isIllegalState():
                    raise TableStopped(f"Kudu refused a row ({reason})")
                self._open.clear()
                raise ServiceUnavailableError(
                    f"Kudu at {self._masters} failed writing to {table} ({reason})."
                )

    def _upsert(self, table: str, opened: _Table, change: RowChange) -> Any:
        java = self._java
        operation = opened.handle.newUpsert()
        row = operation.getRow()
        for name, value in change.row.items():
            index = opened.index[name]
            if value is None:
                row.setNull(index)
                continue
            column = parse_column_type(change.column_types[name])
            kudu = kudu_type(column)
            try:
                python = decode(column, value, name)
                carried = java.java_value(kudu, python)
            except (ContractError, UnsupportedTypeError) as exc:
                raise TableStopped(f"column {name} holds a value Kudu cannot take: {exc}") from None
            getattr(row, _SETTER[kudu.name])(index, carried)
        row.addLong(opened.index[OFFSET_COLUMN], change.offset)
        row.addString(opened.index[SHARD_COLUMN], change.shard)
        row.addBoolean(opened.index[DELETED_COLUMN], change.deleted)
        return operation

    # -- tombstones ---------------------------------------------------------------------------
    def purge_tombstones(self, now_s: float | None = None) -> int:
        """Remove tombstones older than ``mirror.tombstone_ttl_s`` of the tables with hard
        deletes; returns how many. (See the module docstring for the limit of this purge.)"""
        self._last_purge = time.monotonic()
        cutoff = int((now_s if now_s is not None else time.time()) - self._ttl_s) * SEQ_SPAN
        removed = 0
        for table, opened in list(self._open.items()):
            mirror = self._tables.get(table)
            if (mirror is not None and mirror.warehouse_delete == "soft") or table in self.stopped:
                continue
            removed += self._call(
                lambda o=opened, t=table: self._purge_table(t, o, cutoff),
                f"purging the tombstones of {table}",
            )
        return int(removed)

    def _tombstone_keys(self, opened: _Table, cutoff: int) -> list[tuple[Any, ...]]:
        java = self._java
        comparison = java.KuduPredicate.ComparisonOp
        builder = self._client.newScannerBuilder(opened.handle)
        builder.addPredicate(
            java.KuduPredicate.newComparisonPredicate(
                opened.schema.getColumn(DELETED_COLUMN), comparison.EQUAL, True
            )
        )
        builder.addPredicate(
            java.KuduPredicate.newComparisonPredicate(
                opened.schema.getColumn(OFFSET_COLUMN),
                comparison.LESS,
                java.jpype.JLong(cutoff),
            )
        )
        projected = java.ArrayList()
        for name in opened.key_columns:
            projected.add(name)
        scanner = builder.setProjectedColumnNames(projected).build()
        key_types = [opened.types[name] for name in opened.key_columns]
        keys: list[tuple[Any, ...]] = []
        while scanner.hasMoreRows():
            rows = scanner.nextRows()
            while rows.hasNext():
                row = rows.next()
                keys.append(tuple(java.python_value(t, row, i) for i, t in enumerate(key_types)))
        scanner.close()
        return keys

    def _purge_table(self, table: str, opened: _Table, cutoff: int) -> int:
        keys = self._tombstone_keys(opened, cutoff)
        if not keys:
            return 0
        # Again, just before deleting: only keys still tombstoned before the cutoff go.
        still = set(self._tombstone_keys(opened, cutoff))
        keys = [k for k in keys if k in still]
        session = self._client.newSession()
        session.setFlushMode(self._java.SessionConfiguration.FlushMode.MANUAL_FLUSH)
        session.setMutationBufferSpace(len(keys) + 1)
        for key in keys:
            operation = opened.handle.newDeleteIgnore()
            row = operation.getRow()
            for position, name in enumerate(opened.key_columns):
                kudu = opened.types[name]
                carried = self._java.java_value(kudu, key[position])
                getattr(row, _SETTER[kudu.name])(opened.index[name], carried)
            session.apply(operation)
        session.flush()
        session.close()
        log.info("Kudu table %s: %d tombstones older than the TTL removed", table, len(keys))
        return len(keys)
