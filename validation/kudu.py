"""The Kudu side: the mirror's Kudu table (``kudu.table_prefix`` + the logical table), hashed
here, since Kudu has no SQL to hash in.

The table's layout is the Kudu mirror's (docs/warehouse-adapters.md): the MySQL columns, the
key first, then ``_binlog_offset``, ``_shard`` and ``_deleted`` (a tombstone, not a row). Its
live keys are listed once (a scan projecting the key and ``_deleted`` only) and sorted by the
typed key, which places each in its chunk, as for Redis. A chunk is one scan projecting the
compared columns, with a range predicate on the first key column pushed to the tablet
servers (exact for a one-column key; the rest of a composite key is checked here); each value
is turned into its wire value and the row hashed by ``canonical.RowHasher``, as Redis's rows
are. The Java client runs in this process (JPype), as the mirror's does.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from cdc_platform.config import KuduSettings
from cdc_platform.kudu import GETTERS, connect, start_jvm
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.values import JsonScalar, Kind, encode
from validation.canonical import ChunkDigest, RowHasher, python_canonical
from validation.plan import Chunk, Key
from validation.table import TableShape

SHARD_COLUMN = "_shard"  # mirror.kudu's bookkeeping columns
DELETED_COLUMN = "_deleted"
_EPOCH = dt.datetime(1970, 1, 1)


def python_value(kind: Kind, kudu: str, raw: Any) -> Any:  # noqa: PLR0911 - one per form
    """A scanned Kudu value (already a Python scalar) as the canonical Python value of a
    MySQL column of ``kind`` (the Kudu mirror's types, ``mirror.kudu_types``)."""
    if kudu == "UNIXTIME_MICROS":
        return _EPOCH + dt.timedelta(microseconds=int(raw))
    if kind is Kind.TIME:
        return dt.timedelta(microseconds=int(raw))
    if kudu == "DECIMAL":
        return int(Decimal(raw)) if kind in (Kind.UINT64, Kind.BIT) else Decimal(raw)
    if kudu == "DATE":
        return dt.date.fromisoformat(raw)
    if kind is Kind.DECIMAL:
        return Decimal(raw)  # wider than Kudu's DECIMAL: a STRING of its digits
    if kudu in ("FLOAT", "DOUBLE"):
        return float(raw)
    return raw


def start_client(settings: KuduSettings, jars: Path) -> Any:
    """A Kudu client of the Java library (the JVM started once per process, as every Kudu
    user starts it: ``cdc_platform.kudu``)."""
    start_jvm(jars, settings.jvm_heap)
    return connect(settings)


class KuduSide:
    name = "kudu"

    def __init__(self, settings: KuduSettings, jars: Path, shape: TableShape) -> None:
        import jpype  # noqa: PLC0415

        self.shape = shape
        self.queries = 0
        self._jpype = jpype
        self._masters = ",".join(settings.masters)
        self._table_name = settings.table_prefix + shape.table
        self._types = [shape.column_type(n) for n in shape.compared_columns]
        self._hasher = RowHasher(shape.compared_columns, self._types)
        self._client = self._call(lambda: start_client(settings, jars), "connecting")
        self._handle: Any = None
        self._kudu_types: dict[str, str] = {}
        self._listed: list[Key] | None = None

    def close(self) -> None:
        with contextlib.suppress(self._jpype.JException):  # nothing is pending on a reader
            self._client.close()

    def _call(self, work: Any, what: str) -> Any:
        try:
            return work()
        except self._jpype.JException as exc:
            reason = " ".join(str(exc).split())[:300]
            raise ServiceUnavailableError(
                f"reading {self.shape.table} from Kudu at {self._masters} failed {what} ({reason})."
            ) from None

    def _open(self) -> bool:
        """Whether the table exists (asked again until it does: the mirror creates it with
        its first change)."""
        if self._handle is not None:
            return True
        name = self._table_name
        if not self._call(lambda: self._client.tableExists(name), f"looking up {name}"):
            return False
        self._handle = self._call(lambda: self._client.openTable(name), f"opening {name}")
        schema = self._handle.getSchema()
        for position in range(schema.getColumnCount()):
            column = schema.getColumnByIndex(position)
            self._kudu_types[str(column.getName())] = str(column.getType().name())
        return True

    def _scan(self, columns: Sequence[str], chunk: Chunk | None) -> Iterator[list[Any]]:
        """Rows of ``columns`` (those the table has; the others None), the key first, of the
        live rows (``_deleted`` false) in ``chunk``."""
        from java.util import ArrayList  # noqa: PLC0415
        from org.apache.kudu.client import KuduPredicate  # noqa: PLC0415

        if not self._open():
            return
        names = [*self.shape.key, DELETED_COLUMN, *columns]
        present = [n for n in names if n in self._kudu_types]
        projected = ArrayList()
        for name in dict.fromkeys(present):
            projected.add(name)
        builder = self._client.newScannerBuilder(self._handle).setProjectedColumnNames(projected)
        first = self.shape.key[0]
        schema = self._handle.getSchema()
        if chunk is not None:
            for bound, op in ((chunk.lo, "GREATER_EQUAL"), (chunk.hi, "LESS_EQUAL")):
                value = None if bound is None else self._java_key(first, bound[0])
                if value is not None:
                    comparison = getattr(KuduPredicate.ComparisonOp, op)
                    builder = builder.addPredicate(
                        KuduPredicate.newComparisonPredicate(
                            schema.getColumn(first), comparison, value
                        )
                    )
        index = {n: i for i, n in enumerate(dict.fromkeys(present))}
        self.queries += 1
        scanner = self._call(builder.build, "starting a scan")

        def read(row: Any, name: str) -> Any:  # noqa: PLR0911 - one per Kudu type
            if name not in index:
                return None
            i = index[name]
            if row.isNull(i):
                return None
            kudu = self._kudu_types[name]
            raw = getattr(row, GETTERS[kudu])(i)
            if kudu == "DECIMAL":
                return str(raw.toPlainString())
            if kudu in ("STRING", "DATE"):
                return str(raw)
            if kudu == "BINARY":
                return bytes(raw)
            if kudu in ("FLOAT", "DOUBLE"):
                return float(raw)
            if kudu == "BOOL":
                return bool(raw)
            return int(raw)

        key_types = self.shape.key_types
        try:
            while scanner.hasMoreRows():
                rows = scanner.nextRows()
                while rows.hasNext():
                    row = rows.next()
                    if read(row, DELETED_COLUMN):
                        continue
                    key = tuple(
                        python_value(t.kind, self._kudu_types[n], read(row, n))
                        for n, t in zip(self.shape.key, key_types, strict=True)
                    )
                    if chunk is not None and not chunk.holds(key):
                        continue
                    yield [*key, *(read(row, n) for n in columns)]
            scanner.close()
        except self._jpype.JException as exc:
            reason = " ".join(str(exc).split())[:300]
            raise ServiceUnavailableError(
                f"reading {self.shape.table} from Kudu at {self._masters} failed ({reason})."
            ) from None

    def _java_key(self, name: str, value: Any) -> Any:
        """A key value as the Java object a comparison predicate takes, None when the
        column's type is not pushed down (then the whole table is read and filtered here)."""
        jpype = self._jpype
        kudu = self._kudu_types.get(name)
        if kudu in ("INT8", "INT16", "INT32", "INT64"):
            return jpype.JLong(int(value))
        if kudu == "DECIMAL":
            from java.math import BigDecimal  # noqa: PLC0415

            return BigDecimal(str(value))
        if kudu == "STRING":
            return jpype.JString(str(value))
        return None

    def _wire_row(self, values: Sequence[Any]) -> tuple[str, dict[str, JsonScalar]]:
        width = len(self.shape.key)
        names = self.shape.compared_columns
        shard = str(values[width])
        row: dict[str, JsonScalar] = {}
        for name, column, raw in zip(names, self._types, values[width + 1 :], strict=True):
            kudu = self._kudu_types.get(name)
            if raw is None or kudu is None:
                row[name] = None
                continue
            row[name] = encode(column, python_value(column.kind, kudu, raw), name)
        return shard, row

    def _rows(self, chunk: Chunk | None) -> Iterator[tuple[Key, str, dict[str, JsonScalar]]]:
        width = len(self.shape.key)
        for values in self._scan([SHARD_COLUMN, *self.shape.compared_columns], chunk):
            shard, row = self._wire_row(values)
            yield tuple(values[:width]), shard, row

    def _keys(self) -> list[Key]:
        if self._listed is None:
            self._listed = sorted(tuple(v) for v in self._scan([], None))
            if not self._handle:
                self._listed = None  # not created yet: list again next time
                return []
        return self._listed

    def digest(self, chunk: Chunk) -> ChunkDigest:
        return ChunkDigest.of_digests(
            [self._hasher.digest(shard, row) for _, shard, row in self._rows(chunk)]
        )

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        keys = self._keys()
        start = 0 if chunk.lo is None else bisect.bisect_right(keys, chunk.lo)
        stop = len(keys) if chunk.hi is None else bisect.bisect_right(keys, chunk.hi)
        inside = keys[start:stop]
        return inside[len(inside) // 2 - 1] if len(inside) >= 2 else None

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        return {key: self._hasher.hexdigest(shard, row) for key, shard, row in self._rows(chunk)}

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        wanted = set(keys)
        found: dict[Key, str] = {}
        for key in sorted(wanted):
            # One scan per key, bounded by it: settling and repairs read few keys.
            for stored, shard, row in self._rows(Chunk(_before(key), key)):
                if stored in wanted:
                    found[stored] = self._hasher.hexdigest(shard, row)
        return found

    def rows(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        wanted = set(keys)
        found: dict[Key, dict[str, Any]] = {}
        for key in sorted(wanted):
            for stored, shard, row in self._rows(Chunk(_before(key), key)):
                if stored not in wanted:
                    continue
                texts: dict[str, Any] = {"_shard": shard}
                for name, column in zip(self.shape.compared_columns, self._types, strict=True):
                    raw = python_canonical(column, row.get(name))
                    binary = column.kind in (Kind.BINARY, Kind.GEOMETRY)
                    texts[name] = raw if raw is None or binary else raw.decode()
                found[stored] = texts
        return found


def _before(key: Key) -> Key | None:
    """A lower bound (exclusive) that only ``key`` and smaller keys pass: the key with its last
    value lowered, where that is easy; else None (the chunk then reads to ``key``)."""
    last = key[-1]
    if isinstance(last, int) and not isinstance(last, bool):
        return (*key[:-1], last - 1)
    return None
