"""Column types from the binlog's own table map (``binlog_row_metadata=FULL``).

Each rows event is decoded with the table map written just before it, so names, types and the
primary key are those the row was written under, whatever DDL happened since: no lookup in
information_schema can be stale. The types are spelled as information_schema's COLUMN_TYPE
would (``decimal(12,2)``, ``datetime(6)``, ``enum('a','b')``), which is what
``simple_binlog.values`` reads. Lengths of text columns are left out: the binlog holds them in
bytes, not characters, and no value needs them.

MariaDB's UUID, INET4 and INET6 travel as BINARY(16/4/16) in the binlog; ``refine`` takes their
real types from information_schema by column name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collector import binlog_events as ev
from simple_binlog.errors import UnsupportedTypeError

_INTEGERS = {
    ev.TINY: "tinyint",
    ev.SHORT: "smallint",
    ev.INT24: "mediumint",
    ev.LONG: "int",
    ev.LONGLONG: "bigint",
}
_BLOB_BY_LENGTH_BYTES = {1: "tiny", 2: "", 3: "medium", 4: "long"}
_EXTENDED = {"uuid", "inet4", "inet6"}


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
    if kind == ev.GEOMETRY:
        return "geometry"
    raise UnsupportedTypeError(
        f"column {column.name} has binlog type {kind}, which SimpleBinlog does not carry."
    )


def refine(types: dict[str, str], information_schema: Mapping[str, str]) -> dict[str, str]:
    """Put back MariaDB's UUID/INET4/INET6, which the binlog spells as binary(n)."""
    refined = dict(types)
    for name, spec in types.items():
        live = information_schema.get(name, "")
        if spec.startswith("binary(") and live in _EXTENDED:
            refined[name] = live
    return refined


def has_extended_candidates(types: Mapping[str, str]) -> bool:
    return any(spec in ("binary(16)", "binary(4)") for spec in types.values())
