"""Column types from the binlog's own table map (``binlog_row_metadata=FULL``).

Each rows event is decoded with the table map written just before it, so names, types and the
primary key are those the row was written under, whatever DDL happened since. The table map
says less than the server's COLUMN_TYPE: no integer display widths or ZEROFILL, no character
lengths (it holds bytes), no float(M,D), no geometry subtype, and MariaDB's UUID, INET4 and
INET6 travel as BINARY(16/4/16). ``column_type`` spells what it does say
(``decimal(12,2)``, ``datetime(6)``, ``enum('a','b')``, ``binary(16)``), and ``binlog_form``
reduces a COLUMN_TYPE to that same spelling.

``refine`` puts the server's COLUMN_TYPE, verbatim, in place of each column whose COLUMN_TYPE
says what the table map says (``binlog_form(live) == column_type(column)``): the
``columnTypes`` a message carries are then the server's text, as the replay sends them. A column
the live schema no longer matches (a DDL the collector has not reached yet) keeps the table
map's spelling, which is the type the row was written under.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collector import binlog_events as ev
from simple_binlog.errors import UnsupportedTypeError
from simple_binlog.values import Kind, parse_column_type

_INTEGERS = {
    ev.TINY: "tinyint",
    ev.SHORT: "smallint",
    ev.INT24: "mediumint",
    ev.LONG: "int",
    ev.LONGLONG: "bigint",
}
_BLOB_BY_LENGTH_BYTES = {1: "tiny", 2: "", 3: "medium", 4: "long"}
_EXTENDED = {"uuid": "binary(16)", "inet4": "binary(4)", "inet6": "binary(16)"}
# COLUMN_TYPE bases the table map spells otherwise.
_SYNONYMS = {"integer": "int", "bool": "tinyint", "boolean": "tinyint", "numeric": "decimal"}


def _quoted(labels: Sequence[str]) -> str:
    return ",".join("'" + label.replace("'", "''") + "'" for label in labels)


def _is_binary(column: Any) -> bool:
    return getattr(column, "character_set_name", None) == "binary"


def column_type(column: Any) -> str:  # noqa: PLR0911, PLR0912
    """The COLUMN_TYPE spelling of a python-mysql-replication table-map column."""
    kind = column.type
    if kind in _INTEGERS:
        return _INTEGERS[kind] + (" unsigned" if column.unsigned else "")
    if kind == ev.NEWDECIMAL:
        return f"decimal({column.precision},{column.decimals})" + (
            " unsigned" if column.unsigned else ""
        )
    if kind == ev.FLOAT:
        return "float"
    if kind == ev.DOUBLE:
        return "double"
    if kind in (ev.DATE, ev.NEWDATE):
        return "date"
    if kind == ev.DATETIME2:
        return f"datetime({column.fsp})" if column.fsp else "datetime"
    if kind == ev.DATETIME:
        return "datetime"
    if kind == ev.TIMESTAMP2:
        return f"timestamp({column.fsp})" if column.fsp else "timestamp"
    if kind == ev.TIMESTAMP:
        return "timestamp"
    if kind == ev.TIME2:
        return f"time({column.fsp})" if column.fsp else "time"
    if kind == ev.TIME:
        return "time"
    if kind == ev.YEAR:
        return "year"
    if kind == ev.BIT:
        return f"bit({column.bits})"
    if kind == ev.ENUM:
        return f"enum({_quoted(column.enum_values or [])})"
    if kind == ev.SET:
        return f"set({_quoted(column.set_values or [])})"
    if kind in (ev.STRING, ev.VAR_STRING, ev.VARCHAR):
        fixed = kind == ev.STRING
        if _is_binary(column):
            return f"{'binary' if fixed else 'varbinary'}({column.max_length})"
        return "char" if fixed else "varchar"
    if kind in (ev.BLOB, ev.TINY_BLOB, ev.MEDIUM_BLOB, ev.LONG_BLOB):
        prefix = _BLOB_BY_LENGTH_BYTES.get(getattr(column, "length_size", 2), "")
        return f"{prefix}{'blob' if _is_binary(column) else 'text'}"
    if kind == ev.JSON:
        return "json"
    if kind == ev.VECTOR:  # MySQL 9; the dimension comes from information_schema (refine)
        return "vector"
    if kind == ev.GEOMETRY:
        return "geometry"
    raise UnsupportedTypeError(
        f"column {column.name} has binlog type {kind}, which SimpleBinlog does not carry."
    )


def binlog_form(spec: str) -> str:  # noqa: PLR0911 - one spelling per Kind
    """What the binlog's table map says of a column of COLUMN_TYPE ``spec``, spelled as
    ``column_type`` spells it (``int(5) unsigned zerofill`` → ``int unsigned``,
    ``float(7,3)`` → ``float``, ``point`` → ``geometry``, ``varchar(32)`` → ``varchar``)."""
    column = parse_column_type(spec)
    base = spec.strip().split("(", 1)[0].split()[0].lower()
    base = _SYNONYMS.get(base, base)
    sign = " unsigned" if column.unsigned else ""
    kind = column.kind
    if kind in (Kind.INT, Kind.UINT64):
        return base + sign
    if kind is Kind.YEAR:
        return "year"
    if kind is Kind.DECIMAL:
        return f"decimal({column.precision},{column.scale}){sign}"
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        return "float" if kind is Kind.FLOAT else "double"
    if kind in (Kind.DATETIME, Kind.TIMESTAMP, Kind.TIME):
        return f"{base}({column.fsp})" if column.fsp else base
    if kind is Kind.BIT:
        return f"bit({column.length or 1})"
    if kind in (Kind.ENUM, Kind.SET):
        return f"{base}({_quoted(column.labels)})"
    if kind is Kind.GEOMETRY:
        return "geometry"
    if base in _EXTENDED:
        return _EXTENDED[base]
    if base in ("binary", "varbinary"):
        return f"{base}({column.length if column.length is not None else 1})"
    return base  # char, varchar (no length), date, year, the text and blob families


def refine(types: dict[str, str], information_schema: Mapping[str, str]) -> dict[str, str]:
    """The server's COLUMN_TYPE, verbatim, for every column where it says what the binlog's
    table map says (``types``, spelled by ``column_type``); the table map's spelling where
    it does not, or where information_schema has no such column."""
    refined = dict(types)
    for name, spec in types.items():
        live = information_schema.get(name)
        if live is not None and _matches(live, spec):
            refined[name] = live
    return refined


def _matches(live: str, binlog_spec: str) -> bool:
    try:
        return binlog_form(live) == binlog_spec
    except UnsupportedTypeError:
        return False
