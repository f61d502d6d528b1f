"""One table for the types: how each SimpleBinlog ``Kind`` travels and lands in every store.

Every mapping from a column type to something else is a ``KindVisitor``: an abstract base with
one method per ``Kind``, like pyiceberg's ``SchemaVisitorPerPrimitiveType``. A visitor that
forgets a Kind cannot be instantiated (``TypeError``) and mypy flags it; ``visit`` dispatches a
``Kind`` or a parsed ``ColumnType`` to its method and refuses a Kind it has no method for.
The visitors live beside the code that uses them, each in its own component (the contract
imports no component):

* ``WireFormVisitor`` (here): the JSON wire form, as ``simple_binlog.values`` encodes it;
* ``ColumnTypesTextVisitor`` (here): a type's ``columnTypes`` text, the server's COLUMN_TYPE
  verbatim (``column_types_text``);
* ``merge.types.SnapshotTypeVisitor``: the Hive/Spark column type of the lake's snapshot;
* ``mirror.pgtypes.WarehouseTypeVisitor``: the warehouse's PostgreSQL column type, and
  ``mirror.pgtypes.WarehouseTextVisitor``: how a wire value becomes PostgreSQL input text;
* ``mirror.kudu_types.KuduTypeVisitor``: the Kudu column type (and how a value crosses);
* ``mirror.redis_types.RedisValueVisitor``: what a row's value is in the Redis document;
* ``mock_replay.plan.WireSqlVisitor``: the SQL that has MariaDB compute a wire value.

The table below is rendered from those visitors for ``REPRESENTATIVE_TYPES`` (the spellings
that take every branch of every mapping); ``tests/unit/simple_binlog/test_type_table.py``
fails when it differs from what the visitors give (and prints the table to paste here), or
when the table lacks one of the mappings every Kind must have: columnTypes, wire, Spark,
PostgreSQL, Kudu, Redis (``REQUIRED_MAPPINGS`` there).

.. type-table-begin

===============  =========  ==========================  =============  ================  ===============  ===========
columnTypes      Kind       wire (JSON)                 Spark          PostgreSQL        Kudu             Redis
===============  =========  ==========================  =============  ================  ===============  ===========
tinyint(4)       int        number                      int            smallint          INT8             wire number
int(11)          int        number                      int            integer           INT32            wire number
int unsigned     int        number                      bigint         bigint            INT64            wire number
bigint(20)       int        number                      bigint         bigint            INT64            wire number
bigint unsigned  uint64     string of digits            decimal(20,0)  numeric(20)       DECIMAL(20,0)    wire string
decimal(12,2)    decimal    string, exactly s decimals  decimal(12,2)  numeric(12,2)     DECIMAL(12,2)    wire string
decimal(65,30)   decimal    string, exactly s decimals  string         numeric(65,30)    STRING           wire string
float            float      number (the float32 value)  float          real              FLOAT            wire number
float(7,3)       float      number (the float32 value)  float          real              FLOAT            wire number
double           double     number (shortest repr)      double         double precision  DOUBLE           wire number
date             date       "YYYY-MM-DD"                date           date              DATE             wire string
datetime(6)      datetime   "YYYY-MM-DD HH:MM:SS[.f…]"  timestamp      timestamp(6)      UNIXTIME_MICROS  wire string
timestamp(3)     timestamp  the same, in UTC            timestamp      timestamptz(3)    UNIXTIME_MICROS  wire string
time             time       "[-]HH:MM:SS[.f…]"          string         interval          INT64            wire string
time(6)          time       "[-]HH:MM:SS[.f…]"          string         interval          INT64            wire string
year(4)          year       number                      int            smallint          INT16            wire number
bit(5)           bit        number                      bigint         bigint            INT64            wire number
bit(64)          bit        number                      decimal(20,0)  numeric(20)       DECIMAL(20,0)    wire number
enum('a','b')    enum       the label                   string         text              STRING           wire string
set('a','b')     set        labels joined by ","        string         text              STRING           wire string
varchar(32)      text       string                      string         text              STRING           wire string
json             text       string                      string         jsonb             STRING           wire string
binary(16)       binary     base64 string               binary         bytea             BINARY           wire string
blob             binary     base64 string               binary         bytea             BINARY           wire string
geometry         geometry   base64 of the WKB           binary         bytea             BINARY           wire string
point            geometry   base64 of the WKB           binary         bytea             BINARY           wire string
uuid             uuid       MariaDB's text form         string         uuid              STRING           wire string
inet4            inet4      MariaDB's text form         string         inet              STRING           wire string
inet6            inet6      MariaDB's text form         string         inet              STRING           wire string
===============  =========  ==========================  =============  ================  ===============  ===========

.. type-table-end

NULL is ``null`` everywhere (never ``""``). ``columnTypes`` is the server's COLUMN_TYPE text,
verbatim, on the collector's and the replay's messages alike.

Dates with a zero year, month or day (``0000-00-00``, ``2024-00-15``, ``2024-03-00 10:11:12``;
permissive sql_modes allow them) travel as MySQL's own text on both paths and decode to that
text. Per store: Kafka and Redis hold the wire text itself; the warehouse stores the zero date
as ``-infinity`` and any other in a year after 99999, read back exactly by
``mirror.pgtypes.mysql_date_text``; the lake's snapshot keeps them in its DATE/TIMESTAMP
column with the same encoding (the zero date too, in year 100000: Spark has no
``-infinity``), read back exactly by ``merge.types.snapshot_date_text``. BINARY(n) carries all
its n bytes (the collector pads back the trailing zero bytes the binlog strips), so every
store holds them. TIME carries exactly its fsp fraction
digits, as MySQL prints it. Pure logic, no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from simple_binlog.errors import UnsupportedTypeError
from simple_binlog.values import ColumnType, Kind, parse_column_type

T = TypeVar("T")


class KindVisitor(ABC, Generic[T]):
    """One method per SimpleBinlog ``Kind``; each gets the parsed column type.

    Adding a Kind means adding its abstract method here, which makes every visitor that does
    not handle it impossible to instantiate, so no mapping can forget it silently.
    """

    @abstractmethod
    def visit_int(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_uint64(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_decimal(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_float(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_double(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_date(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_datetime(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_timestamp(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_time(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_year(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_bit(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_enum(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_set(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_text(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_binary(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_geometry(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_uuid(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_inet4(self, column: ColumnType) -> T: ...

    @abstractmethod
    def visit_inet6(self, column: ColumnType) -> T: ...


# The method of each Kind, by name: ``getattr`` finds the visitor's own implementation.
_METHOD: dict[Kind, str] = {
    Kind.INT: "visit_int",
    Kind.UINT64: "visit_uint64",
    Kind.DECIMAL: "visit_decimal",
    Kind.FLOAT: "visit_float",
    Kind.DOUBLE: "visit_double",
    Kind.DATE: "visit_date",
    Kind.DATETIME: "visit_datetime",
    Kind.TIMESTAMP: "visit_timestamp",
    Kind.TIME: "visit_time",
    Kind.YEAR: "visit_year",
    Kind.BIT: "visit_bit",
    Kind.ENUM: "visit_enum",
    Kind.SET: "visit_set",
    Kind.TEXT: "visit_text",
    Kind.BINARY: "visit_binary",
    Kind.GEOMETRY: "visit_geometry",
    Kind.UUID: "visit_uuid",
    Kind.INET4: "visit_inet4",
    Kind.INET6: "visit_inet6",
}

# The column type a bare Kind stands for: MySQL's defaults (DECIMAL is decimal(10,0), BIT is
# bit(1), no fractional seconds).
_DEFAULT_SPEC = {
    Kind.INT: "int",
    Kind.UINT64: "bigint unsigned",
    Kind.DECIMAL: "decimal",
    Kind.FLOAT: "float",
    Kind.DOUBLE: "double",
    Kind.DATE: "date",
    Kind.DATETIME: "datetime",
    Kind.TIMESTAMP: "timestamp",
    Kind.TIME: "time",
    Kind.YEAR: "year",
    Kind.BIT: "bit",
    Kind.ENUM: "enum",
    Kind.SET: "set",
    Kind.TEXT: "text",
    Kind.BINARY: "blob",
    Kind.GEOMETRY: "geometry",
    Kind.UUID: "uuid",
    Kind.INET4: "inet4",
    Kind.INET6: "inet6",
}

# The rows of the module's table: every Kind, and every branch a mapping takes within a Kind,
# spelled as servers' COLUMN_TYPE does (MySQL 8.0.19+ and MariaDB differ on display widths).
REPRESENTATIVE_TYPES = (
    "tinyint(4)",
    "int(11)",
    "int unsigned",
    "bigint(20)",
    "bigint unsigned",
    "decimal(12,2)",
    "decimal(65,30)",
    "float",
    "float(7,3)",
    "double",
    "date",
    "datetime(6)",
    "timestamp(3)",
    "time",
    "time(6)",
    "year(4)",
    "bit(5)",
    "bit(64)",
    "enum('a','b')",
    "set('a','b')",
    "varchar(32)",
    "json",
    "binary(16)",
    "blob",
    "geometry",
    "point",
    "uuid",
    "inet4",
    "inet6",
)


def default_column_type(kind: Kind) -> ColumnType:
    """The column type a bare ``Kind`` stands for (MySQL's default length/precision)."""
    spec = _DEFAULT_SPEC.get(kind)
    if spec is None:
        raise UnsupportedTypeError(f"SimpleBinlog has no column type for {kind!r}.")
    return parse_column_type(spec)


def visit(kind_or_column_type: Kind | ColumnType, visitor: KindVisitor[T]) -> T:
    """``visitor``'s answer for a column type, or for a bare Kind's default column type."""
    if isinstance(kind_or_column_type, ColumnType):
        column = kind_or_column_type
    elif isinstance(kind_or_column_type, Kind):
        column = default_column_type(kind_or_column_type)
    else:
        raise TypeError(f"visit takes a Kind or a ColumnType, not {kind_or_column_type!r}.")
    name = _METHOD.get(column.kind)
    if name is None:
        raise UnsupportedTypeError(
            f"{column.kind!r} ({column.spec}) has no method in KindVisitor; add "
            f"visit_{column.kind.value} to KindVisitor and to every visitor."
        )
    method: Callable[[ColumnType], T] = getattr(visitor, name)
    return method(column)


@dataclass(frozen=True, slots=True)
class WireForm:
    """A Kind's JSON wire form: the JSON type ``encode`` gives and how its text reads."""

    json_type: type[int | float | str]
    text: str


_NUMBER = WireForm(int, "number")
_STRING = WireForm(str, "string")
_BASE64 = WireForm(str, "base64 string")
_MARIADB_TEXT = WireForm(str, "MariaDB's text form")


class ColumnTypesTextVisitor(KindVisitor[str]):
    """The ``columnTypes`` text of a column: the server's own column type text, verbatim, as
    information_schema's COLUMN_TYPE (and SHOW COLUMNS) gives it — display widths and
    ZEROFILL (``bigint(20) unsigned``, ``int(5) unsigned zerofill``, ``year(4)``), lengths
    (``varchar(32)``, ``binary(16)``), ``float(7,3)``, geometry subtypes (``point``), ENUM/SET
    labels as the server quotes them. The collector and the replay both send it, so the same
    table has the same ``columnTypes`` on both paths; ``parse_column_type`` reads every one.
    Only when the server cannot be asked (the table was dropped before the collector read its
    events) does the collector fall back to what the binlog's table map says, and logs so."""

    def visit_int(self, column: ColumnType) -> str:
        return column.spec

    def visit_uint64(self, column: ColumnType) -> str:
        return column.spec

    def visit_decimal(self, column: ColumnType) -> str:
        return column.spec

    def visit_float(self, column: ColumnType) -> str:
        return column.spec

    def visit_double(self, column: ColumnType) -> str:
        return column.spec

    def visit_date(self, column: ColumnType) -> str:
        return column.spec

    def visit_datetime(self, column: ColumnType) -> str:
        return column.spec

    def visit_timestamp(self, column: ColumnType) -> str:
        return column.spec

    def visit_time(self, column: ColumnType) -> str:
        return column.spec

    def visit_year(self, column: ColumnType) -> str:
        return column.spec

    def visit_bit(self, column: ColumnType) -> str:
        return column.spec

    def visit_enum(self, column: ColumnType) -> str:
        return column.spec

    def visit_set(self, column: ColumnType) -> str:
        return column.spec

    def visit_text(self, column: ColumnType) -> str:
        return column.spec

    def visit_binary(self, column: ColumnType) -> str:
        return column.spec

    def visit_geometry(self, column: ColumnType) -> str:
        return column.spec

    def visit_uuid(self, column: ColumnType) -> str:
        return column.spec

    def visit_inet4(self, column: ColumnType) -> str:
        return column.spec

    def visit_inet6(self, column: ColumnType) -> str:
        return column.spec


_COLUMN_TYPES_TEXT = ColumnTypesTextVisitor()


def column_types_text(spec: str) -> str:
    """The ``columnTypes`` text of a COLUMN_TYPE (see ``ColumnTypesTextVisitor``)."""
    return visit(parse_column_type(spec), _COLUMN_TYPES_TEXT)


class WireFormVisitor(KindVisitor[WireForm]):
    """The wire forms ``simple_binlog.values`` documents, encodes and decodes."""

    def visit_int(self, column: ColumnType) -> WireForm:
        return _NUMBER

    def visit_uint64(self, column: ColumnType) -> WireForm:
        return WireForm(str, "string of digits")  # exceeds what int64 readers hold

    def visit_decimal(self, column: ColumnType) -> WireForm:
        return WireForm(str, "string, exactly s decimals")

    def visit_float(self, column: ColumnType) -> WireForm:
        return WireForm(float, "number (the float32 value)")

    def visit_double(self, column: ColumnType) -> WireForm:
        return WireForm(float, "number (shortest repr)")

    def visit_date(self, column: ColumnType) -> WireForm:
        return WireForm(str, '"YYYY-MM-DD"')

    def visit_datetime(self, column: ColumnType) -> WireForm:
        return WireForm(str, '"YYYY-MM-DD HH:MM:SS[.f…]"')  # fsp digits

    def visit_timestamp(self, column: ColumnType) -> WireForm:
        return WireForm(str, "the same, in UTC")

    def visit_time(self, column: ColumnType) -> WireForm:
        return WireForm(str, '"[-]HH:MM:SS[.f…]"')  # fsp digits, hours up to 838

    def visit_year(self, column: ColumnType) -> WireForm:
        return _NUMBER

    def visit_bit(self, column: ColumnType) -> WireForm:
        return _NUMBER

    def visit_enum(self, column: ColumnType) -> WireForm:
        return WireForm(str, "the label")

    def visit_set(self, column: ColumnType) -> WireForm:
        return WireForm(str, 'labels joined by ","')  # in definition order

    def visit_text(self, column: ColumnType) -> WireForm:
        return _STRING

    def visit_binary(self, column: ColumnType) -> WireForm:
        return _BASE64

    def visit_geometry(self, column: ColumnType) -> WireForm:
        return WireForm(str, "base64 of the WKB")

    def visit_uuid(self, column: ColumnType) -> WireForm:
        return _MARIADB_TEXT  # the binlog holds 16 raw bytes; a SELECT returns the text

    def visit_inet4(self, column: ColumnType) -> WireForm:
        return _MARIADB_TEXT

    def visit_inet6(self, column: ColumnType) -> WireForm:
        return _MARIADB_TEXT
