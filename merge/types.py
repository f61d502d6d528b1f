"""MySQL column type → Hive/Spark column type of the snapshot, losslessly. Pure logic.

``SnapshotTypeVisitor`` is this component's visitor of the type table
(``simple_binlog.type_table``): one method per SimpleBinlog Kind.

=======================================  ===================  ===============================
MySQL (``information_schema`` spelling)   snapshot type        why
=======================================  ===================  ===============================
TINYINT, SMALLINT, MEDIUMINT, INT         INT                  signed 32 bits holds them all
INT UNSIGNED                              BIGINT               up to 4294967295
BIGINT                                    BIGINT
BIGINT UNSIGNED                           DECIMAL(20,0)        up to 18446744073709551615
DECIMAL(p,s), p ≤ 38                      DECIMAL(p,s)         Spark's decimal holds 38 digits
DECIMAL(p,s), p > 38                      STRING               the exact digits, never rounded
FLOAT / DOUBLE                            FLOAT / DOUBLE       the float32 / float64 value
DATE                                      DATE
DATETIME(fsp), TIMESTAMP(fsp)             TIMESTAMP            fsp ≤ 6 fits microseconds; the
                                                               wire form is UTC (TIMESTAMP) or
                                                               naive, read in a UTC session
TIME(fsp)                                 STRING               Hive has no time of day type
                                                               (and TIME spans ±838 hours)
YEAR                                      INT
BIT(n)                                    BIGINT, n = 64:      BIT(64) exceeds a signed long
                                          DECIMAL(20,0)
ENUM, SET, CHAR, VARCHAR, TEXT, JSON,     STRING
UUID, INET4, INET6
BINARY, VARBINARY, BLOB, GEOMETRY         BINARY               the base64 wire form decoded
=======================================  ===================  ===============================

Values are cast from their canonical JSON text with Spark's ANSI casts (on by default in
Spark 4), so a value that does not fit fails the merge with an error instead of becoming NULL
silently (``snapshot_value``).

**Dates with a zero year, month or day** (``0000-00-00``, ``2024-00-15``, ``2024-03-00
10:11:12``; permissive sql_modes allow them, the wire carries MySQL's text) have no calendar
date. The snapshot keeps them in the DATE/TIMESTAMP column itself, as a date no MySQL value
takes (MySQL's years end at 9999), from which they are read back exactly
(``snapshot_date_text``) — the warehouse's encoding (``mirror.pgtypes``), with the all-zero
date in it too (Spark has no ``-infinity``): year ``100000 + 13·year + month``, day of the
year ``day + 1`` (January 1 + ``day`` days), the time of day unchanged. ``2024-00-15`` is
stored as ``+126312-01-16``, ``2024-03-00 10:11:12`` as ``+126315-01-01 10:11:12``,
``0000-00-00`` as ``+100000-01-01``. They sort after every real date; Spark prints and casts
them to text with a ``+``; a client that maps dates to Python's cannot hold them, so read such
columns as text (``CAST(col AS STRING)``) and decode with ``snapshot_date_text``.

**BINARY(n)** keeps its n bytes: the wire value holds them all (the collector pads back the
trailing zero bytes the binlog strips; the replay reads them with SELECT), and ``unbase64``
keeps every byte.

Widening (``widen``): a column whose MySQL type grew keeps every old value readable in the
new type, e.g. INT → BIGINT → DECIMAL(20,0), DECIMAL(10,2) → DECIMAL(12,4), FLOAT → DOUBLE,
DATE → TIMESTAMP, anything → STRING. A narrowing change keeps the wider snapshot type (the
new values still fit); a change no common type holds without loss is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simple_binlog.errors import CdcMirrorError
from simple_binlog.type_table import KindVisitor, visit
from simple_binlog.values import ColumnType, parse_column_type

if TYPE_CHECKING:
    # PySpark is the optional spark extra, and the web admin's lineage imports hive_type:
    # only the two column builders below import it, when called.
    from pyspark.sql import Column

MAX_SPARK_DECIMAL_PRECISION = 38
_DECIMAL = re.compile(r"^decimal\((?P<p>\d+),(?P<s>\d+)\)$")


class SchemaChangeError(CdcMirrorError):
    """A MySQL schema change the snapshot cannot follow without losing data."""


_LONGEST_SIGNED_BIT = 63


def _base(column: ColumnType) -> str:
    return column.spec.strip().lower().split("(")[0].split()[0]


class SnapshotTypeVisitor(KindVisitor[str]):
    """The snapshot column type (Hive DDL, lowercase) of each Kind: the table above."""

    def visit_int(self, column: ColumnType) -> str:
        base = _base(column)
        wide = base == "bigint" or (column.unsigned and base in ("int", "integer"))
        return "bigint" if wide else "int"

    def visit_uint64(self, column: ColumnType) -> str:
        return "decimal(20,0)"

    def visit_decimal(self, column: ColumnType) -> str:
        precision = column.precision or 10
        scale = column.scale or 0
        fits = precision <= MAX_SPARK_DECIMAL_PRECISION
        return f"decimal({precision},{scale})" if fits else "string"

    def visit_float(self, column: ColumnType) -> str:
        return "float"

    def visit_double(self, column: ColumnType) -> str:
        return "double"

    def visit_date(self, column: ColumnType) -> str:
        return "date"

    def visit_datetime(self, column: ColumnType) -> str:
        return "timestamp"

    def visit_timestamp(self, column: ColumnType) -> str:
        return "timestamp"

    def visit_time(self, column: ColumnType) -> str:
        return "string"  # Hive has no time of day type, and TIME spans ±838 hours

    def visit_year(self, column: ColumnType) -> str:
        return "int"

    def visit_bit(self, column: ColumnType) -> str:
        return "decimal(20,0)" if (column.length or 1) > _LONGEST_SIGNED_BIT else "bigint"

    def visit_enum(self, column: ColumnType) -> str:
        return "string"

    def visit_set(self, column: ColumnType) -> str:
        return "string"

    def visit_text(self, column: ColumnType) -> str:
        return "string"

    def visit_binary(self, column: ColumnType) -> str:
        return "binary"

    def visit_geometry(self, column: ColumnType) -> str:
        return "binary"

    def visit_uuid(self, column: ColumnType) -> str:
        return "string"

    def visit_inet4(self, column: ColumnType) -> str:
        return "string"

    def visit_inet6(self, column: ColumnType) -> str:
        return "string"


_SNAPSHOT_TYPE = SnapshotTypeVisitor()

# Zero-part dates live in the years from here on (the module docstring; mirror.pgtypes's too).
ZERO_PART_YEARS = 100_000
_MONTHS = 13  # 0..12
# simple_binlog.values.is_zero_part_date as a Java regex: a date text, year, month or day 0.
_ZERO_PART_SQL = (
    r"^(0000-\d{2}-\d{2}|\d{4}-00-\d{2}|\d{4}-\d{2}-00)"
    r"( \d{2}:\d{2}:\d{2}(\.\d{1,6})?)?$"
)


def _zero_part(text: Column, hive: str) -> Column:
    """The stored DATE/TIMESTAMP of a zero-part date text (``_ZERO_PART_SQL`` matched)."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the spark extra, when called

    year = F.substring(text, 1, 4).cast("int")
    month = F.substring(text, 6, 2).cast("int")
    day = F.substring(text, 9, 2).cast("int")
    stored_year = F.lit(ZERO_PART_YEARS) + F.lit(_MONTHS) * year + month
    if hive == "date":
        return F.date_add(F.make_date(stored_year, F.lit(1), F.lit(1)), day)
    has_time = F.length(text) > F.lit(10)
    hour = F.when(has_time, F.substring(text, 12, 2).cast("int")).otherwise(0)
    minute = F.when(has_time, F.substring(text, 15, 2).cast("int")).otherwise(0)
    second = F.when(has_time, F.substring(text, 18, 9).cast("decimal(8,6)")).otherwise(
        F.lit(0).cast("decimal(8,6)")
    )
    start = F.make_timestamp(stored_year, F.lit(1), F.lit(1), hour, minute, second)
    return F.timestamp_add("DAY", day, start)


def snapshot_value(text: Column, hive: str) -> Column:
    """The snapshot value of a wire value (its JSON text, strings unquoted) for a column of
    snapshot type ``hive``: ANSI casts, base64 decoded for binaries, a zero-part date as its
    stored date (the module docstring)."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the spark extra, when called

    if hive == "string":
        return text
    if hive == "binary":
        return F.unbase64(text)
    if hive in ("date", "timestamp"):
        return F.when(text.rlike(_ZERO_PART_SQL), _zero_part(text, hive)).otherwise(text.cast(hive))
    return text.cast(hive)


_STORED = re.compile(
    r"^\+?(?P<year>\d{4,})-(?P<month>\d{2})-(?P<day>\d{2})"
    r"(?: (?P<clock>\d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d+))?)?$"
)


def snapshot_date_text(stored: str, fsp: int = 0) -> str:
    """The MySQL text of a snapshot DATE/TIMESTAMP value as Spark casts it to text (the
    inverse of ``snapshot_value``): the zero-part date it encodes, or the date itself, with
    ``fsp`` fraction digits as MySQL prints a DATETIME(fsp) (Spark trims trailing zeros).
    A text that is no such value is returned as it is."""
    match = _STORED.match(stored)
    if match is None:
        return stored
    if int(match["year"]) >= ZERO_PART_YEARS:
        year, month = divmod(int(match["year"]) - ZERO_PART_YEARS, _MONTHS)
        day = 31 if match["month"] == "02" else int(match["day"]) - 1
    else:
        year, month, day = int(match["year"]), int(match["month"]), int(match["day"])
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if match["clock"] is None:
        return text
    text += " " + match["clock"]
    if fsp > 0:
        text += "." + (match["fraction"] or "").ljust(fsp, "0")[:fsp]
    return text


def hive_type(mysql_type: str) -> str:
    """The snapshot column type (Hive DDL, lowercase) of a MySQL ``COLUMN_TYPE``."""
    return visit(parse_column_type(mysql_type), _SNAPSHOT_TYPE)


@dataclass(frozen=True, slots=True)
class _Numeric:
    """A numeric type as (integer digits, scale); floats are not in this lattice."""

    integer_digits: int
    scale: int


_INTEGER_DIGITS = {"int": 10, "bigint": 19}


def _numeric(hive: str) -> _Numeric | None:
    if hive in _INTEGER_DIGITS:
        return _Numeric(_INTEGER_DIGITS[hive], 0)
    match = _DECIMAL.match(hive)
    if match:
        precision, scale = int(match["p"]), int(match["s"])
        return _Numeric(precision - scale, scale)
    return None


def _holds(wide: str, narrow: str) -> bool:
    """Whether every value of type ``narrow`` is exactly representable in ``wide``."""
    if "binary" in (wide, narrow):
        return wide == narrow
    if wide in (narrow, "string"):
        return True
    lossless_pairs = {("double", "float"), ("double", "int"), ("timestamp", "date")}
    if (wide, narrow) in lossless_pairs:
        return True
    wide_numeric, narrow_numeric = _numeric(wide), _numeric(narrow)
    if wide_numeric is None or narrow_numeric is None:
        return False
    if wide in _INTEGER_DIGITS:
        # An integer type holds a narrower integer type, never a decimal exactly.
        return narrow in _INTEGER_DIGITS and _INTEGER_DIGITS[wide] >= _INTEGER_DIGITS[narrow]
    return (
        wide_numeric.integer_digits >= narrow_numeric.integer_digits
        and wide_numeric.scale >= narrow_numeric.scale
    )


def widen(column: str, old: str, new: str) -> str:
    """The snapshot type that holds both the old snapshot type and the new one.

    ``old`` when it already holds the new values (including a narrowing MySQL change), ``new``
    when it holds the old ones, the smallest decimal holding both numeric types, or
    ``string`` for text-like mixes; SchemaChangeError when no type holds both.
    """
    if _holds(old, new):
        return old
    if _holds(new, old):
        return new
    old_numeric, new_numeric = _numeric(old), _numeric(new)
    if old_numeric is not None and new_numeric is not None:
        digits = max(old_numeric.integer_digits, new_numeric.integer_digits)
        scale = max(old_numeric.scale, new_numeric.scale)
        if digits + scale <= MAX_SPARK_DECIMAL_PRECISION:
            return f"decimal({digits + scale},{scale})"
        return "string"
    raise SchemaChangeError(
        f"column {column!r} changed from {old} to {new} in MySQL, and no snapshot type holds "
        "both without loss; recreate the snapshot table or map the column by hand."
    )
