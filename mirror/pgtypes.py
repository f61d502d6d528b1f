"""MySQL column types → PostgreSQL types, and SimpleBinlog values → PostgreSQL input text.

Pure logic. The mapping keeps every value: unsigned integers get the next wider type
(BIGINT UNSIGNED → numeric(20)), DECIMAL keeps precision and scale, DATETIME → timestamp,
TIMESTAMP (UTC on the wire) → timestamptz, TIME (up to ±838 hours) → interval, JSON → jsonb,
binaries → bytea (BINARY(n): its n bytes), ENUM/SET → text.

Dates with a zero year, month or day, which permissive sql_modes allow, have no PostgreSQL
equivalent; each is stored as a value no MySQL date takes, from which it is read back exactly
(``mysql_date_text``):

* the zero date ``0000-00-00`` (and ``0000-00-00 00:00:00[.0…]``) as ``-infinity``;
* any other, e.g. ``2024-00-15`` or ``2024-03-00 10:11:12``, in a year after 99999 (MySQL's
  years end at 9999): year ``100000 + 13·year + month``, day of the year ``day + 1``
  (January 1 + ``day`` days), the time of day unchanged. ``2024-00-15`` is stored as
  ``126312-01-16``, ``2024-03-00 10:11:12`` as ``126315-01-01 10:11:12``.

These sort after every real date; a PostgreSQL client that maps dates to Python's (psycopg)
cannot hold them, so read such columns as text (``col::text``).

``WarehouseTypeVisitor`` (column types) and ``WarehouseTextVisitor`` (value text) are this
component's visitors of the type table (``simple_binlog.type_table``): one method per Kind.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache, partial

import orjson

from simple_binlog.type_table import KindVisitor, visit
from simple_binlog.values import ColumnType, JsonScalar, Kind, is_zero_part_date, parse_column_type

_SIGNED_INT = {
    "tinyint": "smallint",
    "bool": "smallint",
    "boolean": "smallint",
    "smallint": "smallint",
    "mediumint": "integer",
    "int": "integer",
    "integer": "integer",
    "bigint": "bigint",
}
_UNSIGNED_INT = {
    "tinyint": "smallint",
    "smallint": "integer",
    "mediumint": "integer",
    "int": "bigint",
    "integer": "bigint",
}


def _base(column: ColumnType) -> str:
    return column.spec.strip().split("(")[0].split()[0].lower()


class WarehouseTypeVisitor(KindVisitor[str]):
    """The PostgreSQL column type of each Kind."""

    def visit_int(self, column: ColumnType) -> str:
        table = _UNSIGNED_INT if column.unsigned else _SIGNED_INT
        return table.get(_base(column), "bigint")

    def visit_uint64(self, column: ColumnType) -> str:
        return "numeric(20)"

    def visit_decimal(self, column: ColumnType) -> str:
        return f"numeric({column.precision},{column.scale})"

    def visit_float(self, column: ColumnType) -> str:
        return "real"

    def visit_double(self, column: ColumnType) -> str:
        return "double precision"

    def visit_date(self, column: ColumnType) -> str:
        return "date"

    def visit_datetime(self, column: ColumnType) -> str:
        return f"timestamp({min(column.fsp, 6)})"

    def visit_timestamp(self, column: ColumnType) -> str:
        return f"timestamptz({min(column.fsp, 6)})"  # UTC on the wire

    def visit_time(self, column: ColumnType) -> str:
        return "interval"  # up to ±838 hours

    def visit_year(self, column: ColumnType) -> str:
        return "smallint"

    def visit_bit(self, column: ColumnType) -> str:
        return "bigint" if (column.length or 1) <= 63 else "numeric(20)"

    def visit_enum(self, column: ColumnType) -> str:
        return "text"

    def visit_set(self, column: ColumnType) -> str:
        return "text"

    def visit_text(self, column: ColumnType) -> str:
        return "jsonb" if _base(column) == "json" else "text"

    def visit_binary(self, column: ColumnType) -> str:
        return "bytea"

    def visit_geometry(self, column: ColumnType) -> str:
        return "bytea"

    def visit_uuid(self, column: ColumnType) -> str:
        return "uuid"

    def visit_inet4(self, column: ColumnType) -> str:
        return "inet"

    def visit_inet6(self, column: ColumnType) -> str:
        return "inet"


_WAREHOUSE_TYPE = WarehouseTypeVisitor()


def pg_type(spec: str | None) -> str:
    """The PostgreSQL column type for a MySQL column type (``text`` when the type is unknown,
    i.e. the message carried no ``columnTypes``)."""
    if spec is None:
        return "text"
    return visit(parse_column_type(spec), _WAREHOUSE_TYPE)


TextConverter = Callable[[JsonScalar], "str | None"]


def _plain(value: JsonScalar) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return repr(value)  # int: its digits; float: the shortest round-trip form


def _unknown(value: JsonScalar) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


# Zero-part dates live in the years from here on (see the module docstring).
ZERO_PART_YEARS = 100_000
_MONTHS = 13  # 0..12
_ALL_ZERO = re.compile(r"^0000-00-00(?: 00:00:00(?:\.0+)?)?$")


def _zero_part_text(text: str) -> str:
    """A MySQL date text with a zero year, month or day as PostgreSQL input text."""
    if _ALL_ZERO.match(text):
        return "-infinity"
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    stored_year = ZERO_PART_YEARS + _MONTHS * year + month
    # January 1 + day days: day 31 is February 1.
    stored = f"{stored_year}-01-{day + 1:02d}" if day < 31 else f"{stored_year}-02-01"
    return stored + text[10:]


def mysql_date_text(stored: str, spec: str | None = None) -> str:
    """The MySQL text of a DATE/DATETIME/TIMESTAMP value as PostgreSQL prints it
    (``col::text``, session time zone UTC for TIMESTAMP): itself for a real date, the
    zero-part date it encodes otherwise (the inverse of how ``pg_text`` stores them). With
    the column's type ``spec`` it is exactly MySQL's text: the zero date of a DATETIME(3) is
    ``0000-00-00 00:00:00.000``, and fractions have the column's fsp digits (PostgreSQL drops
    trailing zeros: ``.5`` of a DATETIME(3) is ``.500``); without it, ``-infinity`` reads
    ``0000-00-00`` and the fraction is left as PostgreSQL printed it."""
    text = _decoded_date_text(stored.removesuffix("+00"))
    if spec is None:
        return text
    column = parse_column_type(spec)
    if column.kind is Kind.DATE:
        return text
    if len(text) == len("0000-00-00"):  # the zero date, stored as -infinity
        text += " 00:00:00"
    whole, _, fraction = text.partition(".")
    fsp = min(column.fsp, 6)
    return whole + ("." + fraction.ljust(fsp, "0")[:fsp] if fsp else "")


def _decoded_date_text(stored: str) -> str:
    if stored == "-infinity":
        return "0000-00-00"
    head, _, rest = stored.partition("-")
    if not head.isdigit() or int(head) < ZERO_PART_YEARS:
        return stored
    year, month = divmod(int(head) - ZERO_PART_YEARS, _MONTHS)
    day = 31 if rest[0:2] == "02" else int(rest[3:5]) - 1
    return f"{year:04d}-{month:02d}-{day:02d}" + rest[5:]


def _date_like(value: JsonScalar) -> str | None:
    if isinstance(value, str) and is_zero_part_date(value):
        return _zero_part_text(value)
    return _plain(value)


def _timestamp(value: JsonScalar) -> str | None:
    if isinstance(value, str):
        return _zero_part_text(value) if is_zero_part_date(value) else value + "+00"
    return _plain(value)


def _binary(length: int | None, value: JsonScalar) -> str | None:
    if not isinstance(value, str):
        return _plain(value)
    raw = base64.b64decode(value)
    if length is not None:
        # Messages written before the collector padded BINARY(n) lack its trailing zeros.
        raw = raw.ljust(length, b"\x00")
    return "\\x" + raw.hex()


class WarehouseTextVisitor(KindVisitor[TextConverter]):
    """How the wire values of each Kind become PostgreSQL input text. ``_plain`` (the value as
    it is, numbers as their digits) is the answer ``RowConverters`` leaves to psycopg."""

    def visit_int(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_uint64(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_decimal(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_float(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_double(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_date(self, column: ColumnType) -> TextConverter:
        return _date_like

    def visit_datetime(self, column: ColumnType) -> TextConverter:
        return _date_like

    def visit_timestamp(self, column: ColumnType) -> TextConverter:
        return _timestamp

    def visit_time(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_year(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_bit(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_enum(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_set(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_text(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_binary(self, column: ColumnType) -> TextConverter:
        return partial(_binary, column.length if column.is_fixed_binary else None)

    def visit_geometry(self, column: ColumnType) -> TextConverter:
        return partial(_binary, None)

    def visit_uuid(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_inet4(self, column: ColumnType) -> TextConverter:
        return _plain

    def visit_inet6(self, column: ColumnType) -> TextConverter:
        return _plain


_WAREHOUSE_TEXT = WarehouseTextVisitor()


@lru_cache(maxsize=4096)
def text_converter(spec: str | None) -> TextConverter:
    """The function turning wire values of one column type into PostgreSQL input text."""
    if spec is None:
        return _unknown
    return visit(parse_column_type(spec), _WAREHOUSE_TEXT)


def pg_text(spec: str | None, value: JsonScalar) -> str | None:
    """The PostgreSQL input text of a wire value, for COPY (None stays NULL)."""
    return text_converter(spec)(value)


class RowConverters:
    """Rows → the values of one COPY row, for the columns ``columns`` in that order.

    Values psycopg writes as PostgreSQL reads them (strings, integers, floats, NULL) are
    passed as they are; only the columns whose type needs a conversion (dates, timestamps,
    binaries, columns without a type) go through ``text_converter``. Which ones that is
    depends on the change's ``columnTypes``; changes of one batch nearly always share them,
    so the last answer is kept."""

    def __init__(self, columns: Sequence[str]) -> None:
        self._columns = list(columns)
        self._types: Mapping[str, str] | None = None
        self._converted: list[tuple[int, TextConverter]] = []

    def values(self, row: Mapping[str, JsonScalar], types: Mapping[str, str]) -> list[JsonScalar]:
        if types is not self._types and types != self._types:
            self._converted = [
                (index, converter)
                for index, name in enumerate(self._columns)
                if (converter := text_converter(types.get(name))) is not _plain
            ]
        self._types = types
        values: list[JsonScalar] = [row.get(name) for name in self._columns]
        for index, converter in self._converted:
            values[index] = converter(values[index])
        return values
