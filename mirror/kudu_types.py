"""Kudu column types for MySQL columns, and how a value crosses into Kudu and back. Pure logic.

``KuduTypeVisitor`` is the type table's visitor for Kudu (``simple_binlog.type_table``); every
Kind maps to a Kudu type that holds all its values exactly:

=================  ===========================  ============================================
MySQL              Kudu                         note
=================  ===========================  ============================================
TINYINT..BIGINT    INT8..INT64                  the next wider type when UNSIGNED
BIGINT UNSIGNED    DECIMAL(20,0)
DECIMAL(p,s)       DECIMAL(p,s) when p <= 38    wider: STRING, the exact text (s decimals)
FLOAT, DOUBLE      FLOAT, DOUBLE
DATE               DATE
DATETIME(fsp)      UNIXTIME_MICROS              the wall time read as UTC
TIMESTAMP(fsp)     UNIXTIME_MICROS              UTC
TIME(fsp)          INT64                        signed microseconds (±838:59:59.999999)
YEAR               INT16
BIT(n)             INT64; DECIMAL(20,0) if n=64
ENUM, SET          STRING                       the label(s), as on the wire
CHAR..TEXT, JSON   STRING
BINARY..BLOB       BINARY                       BINARY(n) padded to n bytes, as MySQL holds it
GEOMETRY           BINARY                       the WKB
UUID, INET4/6      STRING                       MariaDB's text form
=================  ===========================  ============================================

Kudu cannot hold MySQL's zero date (``0000-00-00``, permissive sql_modes only) in DATE or
UNIXTIME_MICROS: such a value stops its table with one sentence (``UnsupportedTypeError``).
FLOAT, DOUBLE and BOOL cannot be primary-key columns in Kudu (``key_refusal``).

Values are handled in their canonical Python form (``simple_binlog.values.decode``): int,
Decimal, float, str, bytes, date, datetime, timedelta. ``KuduType.to_java`` gives what the Java
client's typed setters take; ``from_java`` turns what a scan returns back into that form, so a
stored row compares equal to the decoded wire row.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from simple_binlog.errors import UnsupportedTypeError
from simple_binlog.type_table import KindVisitor, visit
from simple_binlog.values import ColumnType

MAX_DECIMAL_PRECISION = 38
_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_INT_BY_BASE = {"tinyint": 8, "bool": 8, "boolean": 8, "smallint": 16, "mediumint": 32}
_WIDER = {8: 16, 16: 32, 32: 64, 64: 64}


@dataclass(frozen=True, slots=True)
class KuduType:
    """A Kudu column type: ``name`` is ``org.apache.kudu.Type``'s constant."""

    name: str
    precision: int | None = None
    scale: int | None = None
    # How the value is carried: int, whole (an int in a DECIMAL(20,0)), decimal, float, date,
    # micros (datetime), time_micros (timedelta), text, decimal_text (a DECIMAL wider than
    # Kudu's), binary.
    form: str = "int"

    @property
    def text(self) -> str:
        if self.name == "DECIMAL":
            return f"DECIMAL({self.precision},{self.scale})"
        return self.name

    def same_as(self, other: KuduType) -> bool:
        """The same Kudu column type (the carrying form aside)."""
        return (self.name, self.precision, self.scale) == (other.name, other.precision, other.scale)

    def to_java(self, value: Any) -> Any:
        """The canonical Python value as the Java client's setter for this type takes it."""
        form = self.form
        if isinstance(value, str) and form in ("date", "micros"):
            raise UnsupportedTypeError(
                f"Kudu's {self.name} cannot hold MySQL's zero date {value!r}."
            )
        if form == "micros":
            return (value - _EPOCH) // _MICRO
        if form == "time_micros":
            return value // _MICRO
        if form in ("decimal", "whole"):
            return str(value)  # to java.math.BigDecimal by the bridge
        if form == "decimal_text":
            return format(value, "f")
        if form == "date":
            return value.isoformat()  # to java.sql.Date by the bridge
        return value

    def from_java(self, value: Any) -> Any:  # noqa: PLR0911 - one return per form
        """What a scan returned (already a Python scalar) back to the canonical form."""
        if value is None:
            return None
        form = self.form
        if form == "micros":
            return _EPOCH + value * _MICRO
        if form == "time_micros":
            return value * _MICRO
        if form == "decimal":
            return Decimal(value)
        if form == "whole":
            return int(value)
        if form == "decimal_text":
            return Decimal(value)
        if form == "date":
            return dt.date.fromisoformat(value)
        return value


def _int_bits(column: ColumnType) -> int:
    match = re.match(r"\s*([a-z]+)", column.spec.lower())
    base = match.group(1) if match else "int"
    bits = _INT_BY_BASE.get(base, 64 if base == "bigint" else 32)
    return _WIDER[bits] if column.unsigned else bits


class KuduTypeVisitor(KindVisitor[KuduType]):
    """The Kudu type of each Kind (the table in the module docstring); a visitor of the
    contract's type table, so a Kind added there without a Kudu type fails its tests."""

    def visit_int(self, column: ColumnType) -> KuduType:
        return KuduType(f"INT{_int_bits(column)}")

    def visit_uint64(self, column: ColumnType) -> KuduType:
        return _WHOLE_20

    def visit_decimal(self, column: ColumnType) -> KuduType:
        precision, scale = column.precision or 10, column.scale or 0
        if precision <= MAX_DECIMAL_PRECISION:
            return KuduType("DECIMAL", precision, scale, "decimal")
        return KuduType("STRING", form="decimal_text")

    def visit_float(self, column: ColumnType) -> KuduType:
        return KuduType("FLOAT", form="float")

    def visit_double(self, column: ColumnType) -> KuduType:
        return KuduType("DOUBLE", form="float")

    def visit_date(self, column: ColumnType) -> KuduType:
        return KuduType("DATE", form="date")

    def visit_datetime(self, column: ColumnType) -> KuduType:
        return _MICROS

    def visit_timestamp(self, column: ColumnType) -> KuduType:
        return _MICROS

    def visit_time(self, column: ColumnType) -> KuduType:
        return KuduType("INT64", form="time_micros")

    def visit_year(self, column: ColumnType) -> KuduType:
        return KuduType("INT16")

    def visit_bit(self, column: ColumnType) -> KuduType:
        # BIT(64) exceeds INT64.
        return _WHOLE_20 if (column.length or 1) >= 64 else KuduType("INT64")

    def visit_enum(self, column: ColumnType) -> KuduType:
        return _TEXT

    def visit_set(self, column: ColumnType) -> KuduType:
        return _TEXT

    def visit_text(self, column: ColumnType) -> KuduType:
        return _TEXT

    def visit_binary(self, column: ColumnType) -> KuduType:
        return _BINARY

    def visit_geometry(self, column: ColumnType) -> KuduType:
        return _BINARY

    def visit_uuid(self, column: ColumnType) -> KuduType:
        return _TEXT

    def visit_inet4(self, column: ColumnType) -> KuduType:
        return _TEXT

    def visit_inet6(self, column: ColumnType) -> KuduType:
        return _TEXT


_WHOLE_20 = KuduType("DECIMAL", 20, 0, "whole")
_MICROS = KuduType("UNIXTIME_MICROS", form="micros")
_TEXT = KuduType("STRING", form="text")
_BINARY = KuduType("BINARY", form="binary")
_VISITOR = KuduTypeVisitor()


def kudu_type(column: ColumnType) -> KuduType:
    """The Kudu type of a MySQL column (see the module docstring)."""
    return visit(column, _VISITOR)


def key_refusal(name: str, column: ColumnType) -> str | None:
    """Why Kudu cannot hold ``name`` in a primary key, or None when it can."""
    kudu = kudu_type(column)
    if kudu.name in ("FLOAT", "DOUBLE", "BOOL"):
        return f"key column {name} is {column.spec}, which Kudu cannot hold in a primary key"
    return None
