"""MySQL column types → PostgreSQL types, and SimpleBinlog values → PostgreSQL input text.

Pure logic. The mapping keeps every value: unsigned integers get the next wider type
(BIGINT UNSIGNED → numeric(20)), DECIMAL keeps precision and scale, DATETIME → timestamp,
TIMESTAMP (UTC on the wire) → timestamptz, TIME (up to ±838 hours) → interval, JSON → jsonb,
binaries → bytea, ENUM/SET → text. MySQL's zero dates (``0000-00-00``) have no PostgreSQL
equivalent and are stored as ``-infinity``, a value no real date takes.

``WarehouseTypeVisitor`` (column types) and ``WarehouseTextVisitor`` (value text) are this
component's visitors of the type table (``simple_binlog.type_table``): one method per Kind.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache, partial

import orjson

from simple_binlog.type_table import KindVisitor, visit
from simple_binlog.values import ColumnType, JsonScalar, parse_column_type

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


def _date_like(value: JsonScalar) -> str | None:
    if isinstance(value, str) and value.startswith("0000-00-00"):
        return "-infinity"
    return _plain(value)


def _timestamp(value: JsonScalar) -> str | None:
    if isinstance(value, str):
        return "-infinity" if value.startswith("0000-00-00") else value + "+00"
    return _plain(value)


def _binary(length: int | None, value: JsonScalar) -> str | None:
    if not isinstance(value, str):
        return _plain(value)
    raw = base64.b64decode(value)
    if length is not None:
        # The binlog drops BINARY(n)'s trailing zero bytes; the column holds n bytes.
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
