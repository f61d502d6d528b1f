"""Lossless MySQL values in JSON: one canonical wire form per column type.

``encode(column_type, value)`` takes what a driver returns (python-mysql-replication from the
binlog, or pymysql from a SELECT) and gives a JSON scalar; ``decode`` gives back the canonical
Python value. The wire forms, chosen so that nothing is rounded, truncated or confused:

=====================  ==========================================  =======================
MySQL type             JSON                                        Python (decoded)
=====================  ==========================================  =======================
TINYINT..BIGINT        number                                      int
BIGINT UNSIGNED        string of digits (exceeds int64 readers)    int
DECIMAL(p,s)           string with exactly s decimals              Decimal
FLOAT                  number (the float32 value)                  float (float32-rounded)
DOUBLE                 number (shortest round-trip repr)           float
DATE                   "YYYY-MM-DD"                                date
DATETIME(fsp)          "YYYY-MM-DD HH:MM:SS[.f…]" (fsp digits)     datetime (naive)
TIMESTAMP(fsp)         same, always in UTC                         datetime (naive, UTC)
TIME(fsp)              "[-]HH:MM:SS[.f…]" (fsp digits, hours up    timedelta
                       to 838), as MySQL prints it
YEAR                   number                                      int
BIT(n)                 number                                      int
ENUM                   the label                                   str
SET                    labels joined by "," in definition order    str
CHAR/VARCHAR/TEXT/JSON string                                      str
BINARY/VARBINARY/BLOB  base64 string; BINARY(n) always n bytes    bytes
GEOMETRY               base64 of the stored WKB                    bytes
UUID, INET4, INET6     MariaDB's text form (binlog holds 16/4/16   str
                       raw bytes; a SELECT returns text)
NULL                   null (never "" — empty string stays "")     None
=====================  ==========================================  =======================

Dates whose year, month or day is zero (``0000-00-00``, ``2024-00-15``, ``2024-03-00 10:11:12``),
which permissive sql_modes allow and no calendar holds, travel as MySQL's own text and decode
to that text (a ``str``, not a ``date``): exactly what the server holds, never another date.
The binlog strips BINARY(n)'s trailing zero bytes; ``encode`` pads them back from the column
type, so the wire value holds the column's n bytes, as a SELECT returns them.
Pure logic, no I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import re
import struct
import uuid
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from enum import Enum
from functools import lru_cache
from typing import Any

from simple_binlog.errors import ContractError, UnsupportedTypeError

JsonScalar = int | float | str | None


class Kind(Enum):
    INT = "int"
    UINT64 = "uint64"
    DECIMAL = "decimal"
    FLOAT = "float"
    DOUBLE = "double"
    DATE = "date"
    DATETIME = "datetime"
    TIMESTAMP = "timestamp"
    TIME = "time"
    YEAR = "year"
    BIT = "bit"
    ENUM = "enum"
    SET = "set"
    TEXT = "text"
    BINARY = "binary"
    GEOMETRY = "geometry"
    UUID = "uuid"
    INET4 = "inet4"
    INET6 = "inet6"


_KIND_BY_BASE = {
    "tinyint": Kind.INT,
    "smallint": Kind.INT,
    "mediumint": Kind.INT,
    "int": Kind.INT,
    "integer": Kind.INT,
    "bigint": Kind.INT,
    "bool": Kind.INT,
    "boolean": Kind.INT,
    "decimal": Kind.DECIMAL,
    "numeric": Kind.DECIMAL,
    "float": Kind.FLOAT,
    "double": Kind.DOUBLE,
    "real": Kind.DOUBLE,
    "date": Kind.DATE,
    "datetime": Kind.DATETIME,
    "timestamp": Kind.TIMESTAMP,
    "time": Kind.TIME,
    "year": Kind.YEAR,
    "bit": Kind.BIT,
    "enum": Kind.ENUM,
    "set": Kind.SET,
    "char": Kind.TEXT,
    "varchar": Kind.TEXT,
    "tinytext": Kind.TEXT,
    "text": Kind.TEXT,
    "mediumtext": Kind.TEXT,
    "longtext": Kind.TEXT,
    "json": Kind.TEXT,
    "uuid": Kind.UUID,
    "inet4": Kind.INET4,
    "inet6": Kind.INET6,
    "binary": Kind.BINARY,
    "varbinary": Kind.BINARY,
    "tinyblob": Kind.BINARY,
    "blob": Kind.BINARY,
    "mediumblob": Kind.BINARY,
    "longblob": Kind.BINARY,
    "vector": Kind.BINARY,  # MySQL 9: its float32 values' bytes (little-endian), as stored
    "geometry": Kind.GEOMETRY,
    "point": Kind.GEOMETRY,
    "linestring": Kind.GEOMETRY,
    "polygon": Kind.GEOMETRY,
    "multipoint": Kind.GEOMETRY,
    "multilinestring": Kind.GEOMETRY,
    "multipolygon": Kind.GEOMETRY,
    "geometrycollection": Kind.GEOMETRY,
}

_TYPE_RE = re.compile(
    r"^\s*(?P<base>[a-z0-9]+)\s*(?:\((?P<args>.*)\))?\s*(?P<flags>(?:\s*(?:unsigned|signed|zerofill))*)\s*$",
    re.IGNORECASE | re.DOTALL,
)
_LABEL_RE = re.compile(r"'((?:[^']|'')*)'")
# A DATE/DATETIME/TIMESTAMP text as MySQL prints it; see ``is_zero_part_date``.
_DATE_TEXT_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?: \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)?$")
# DECIMAL holds up to 65 digits; the default decimal context (28 digits) would refuse more.
_DECIMAL_CONTEXT = Context(prec=65)


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A parsed MySQL column type, as information_schema's COLUMN_TYPE spells it."""

    spec: str
    kind: Kind
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    fsp: int = 0
    length: int | None = None
    labels: tuple[str, ...] = ()

    @property
    def is_fixed_binary(self) -> bool:
        return self.kind is Kind.BINARY and self.spec.lower().startswith("binary")


@lru_cache(maxsize=4096)
def parse_column_type(spec: str) -> ColumnType:
    """Parse ``decimal(12,4) unsigned``, ``datetime(6)``, ``enum('a','b')``, ``bit(5)``, …"""
    match = _TYPE_RE.match(spec)
    if match is None:
        raise UnsupportedTypeError(f"column type {spec!r} cannot be parsed.")
    base = match.group("base").lower()
    kind = _KIND_BY_BASE.get(base)
    if kind is None:
        raise UnsupportedTypeError(f"column type {spec!r} is not supported by SimpleBinlog.")
    args = match.group("args")
    unsigned = "unsigned" in (match.group("flags") or "").lower()
    if kind is Kind.INT and unsigned and base == "bigint":
        kind = Kind.UINT64
    if kind in (Kind.ENUM, Kind.SET):
        labels = tuple(label.replace("''", "'") for label in _LABEL_RE.findall(args or ""))
        return ColumnType(spec, kind, labels=labels)
    numbers = [int(part) for part in (args or "").split(",") if part.strip().isdigit()]
    if kind is Kind.DECIMAL:
        precision = numbers[0] if numbers else 10
        scale = numbers[1] if len(numbers) > 1 else 0
        return ColumnType(spec, kind, unsigned, precision=precision, scale=scale)
    if kind in (Kind.DATETIME, Kind.TIMESTAMP, Kind.TIME):
        return ColumnType(spec, kind, fsp=numbers[0] if numbers else 0)
    return ColumnType(spec, kind, unsigned, length=numbers[0] if numbers else None)


def is_zero_part_date(text: str) -> bool:
    """Whether ``text`` is a MySQL date/datetime whose year, month or day is zero
    (``0000-00-00``, ``2024-00-15``, ``2024-03-00 10:11:12``): a value the server holds under a
    permissive sql_mode that no calendar type holds, carried as its text."""
    match = _DATE_TEXT_RE.match(text)
    if match is None:
        return False
    year, month, day = match.groups()
    return year == "0000" or month == "00" or day == "00"


def _fraction(micros: int, fsp: int) -> str:
    if fsp <= 0:
        return ""
    return "." + f"{micros:06d}"[:fsp]


def _format_datetime(value: dt.datetime, fsp: int) -> str:
    # Not strftime: its %Y does not zero-pad years before 1000 on glibc ('1-01-01 …').
    whole = value.replace(tzinfo=None, microsecond=0).isoformat(sep=" ")
    return whole + _fraction(value.microsecond, fsp)


def _format_time(value: dt.timedelta, fsp: int) -> str:
    """MySQL's text of a TIME(fsp): ``[-]HH:MM:SS`` and exactly ``fsp`` fraction digits."""
    total_micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total_micros < 0 else ""
    total_micros = abs(total_micros)
    seconds, micros = divmod(total_micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}" + _fraction(micros, fsp)


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _bit_to_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    if isinstance(value, str) and value and set(value) <= {"0", "1"}:
        return int(value, 2)  # python-mysql-replication's bit string
    raise TypeError


def _set_to_text(column: ColumnType, value: Any) -> str:
    members = set(value.split(",")) if isinstance(value, str) else set(value)
    members.discard("")
    if column.labels:
        unknown = members - set(column.labels)
        if unknown:
            raise ValueError(f"not members of the SET: {sorted(unknown)}")
        return ",".join(label for label in column.labels if label in members)
    return ",".join(sorted(members))


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    raise TypeError


def _inet6_text(raw: bytes) -> str:
    """MariaDB's (and glibc inet_ntop's) spelling: embedded IPv4 for ::a.b.c.d and
    ::ffff:a.b.c.d, otherwise the compressed hex form."""
    address = ipaddress.IPv6Address(raw)
    if raw[:10] == bytes(10):
        tail = ipaddress.IPv4Address(raw[12:])
        if raw[10:12] == b"\xff\xff":
            return f"::ffff:{tail}"
        if raw[10:12] == bytes(2) and raw[12:14] != bytes(2):
            return f"::{tail}"
    return address.compressed


def _encode_special_text(kind: Kind, value: Any) -> str:
    if isinstance(value, str) and value:
        return value
    if value == "":
        # python-mysql-replication returns an all-zero fixed binary (its trailing zero bytes
        # are stripped in the binlog) as an empty str; a SELECT never returns "".
        value = b""
    if not isinstance(value, bytes | bytearray):
        raise TypeError
    # The binlog drops trailing zero bytes of these fixed-size binaries.
    if kind is Kind.UUID:
        return str(uuid.UUID(bytes=bytes(value).ljust(16, b"\x00")))
    if kind is Kind.INET4:
        return str(ipaddress.IPv4Address(bytes(value).ljust(4, b"\x00")))
    return _inet6_text(bytes(value).ljust(16, b"\x00"))


def _encode(column: ColumnType, value: Any) -> JsonScalar:  # noqa: PLR0911, PLR0912
    kind = column.kind
    if kind is Kind.INT or kind is Kind.YEAR:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError
        return value
    if kind is Kind.UINT64:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TypeError
        return str(value)
    if kind is Kind.DECIMAL:
        number = Decimal(value) if isinstance(value, str | int) else value
        if not isinstance(number, Decimal) or not number.is_finite():
            raise TypeError
        if column.scale is not None:
            number = number.quantize(Decimal(1).scaleb(-column.scale), context=_DECIMAL_CONTEXT)
        return format(number, "f")
    if kind is Kind.FLOAT:
        return _float32(float(value))
    if kind is Kind.DOUBLE:
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise TypeError
        return float(value)
    if isinstance(value, str) and kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP):
        if is_zero_part_date(value):
            return value  # a (partly) zero date of a permissive sql_mode, kept verbatim
        raise TypeError
    if kind is Kind.DATE:
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise TypeError
        return value.isoformat()
    if kind is Kind.DATETIME:
        if not isinstance(value, dt.datetime):
            raise TypeError
        return _format_datetime(value, column.fsp)
    if kind is Kind.TIMESTAMP:
        if not isinstance(value, dt.datetime):
            raise TypeError
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return _format_datetime(value, column.fsp)
    if kind is Kind.TIME:
        if not isinstance(value, dt.timedelta):
            raise TypeError
        return _format_time(value, column.fsp)
    if kind is Kind.BIT:
        return _bit_to_int(value)
    if kind is Kind.ENUM or kind is Kind.TEXT:
        return _to_text(value)
    if kind in (Kind.UUID, Kind.INET4, Kind.INET6):
        return _encode_special_text(kind, value)
    if kind is Kind.SET:
        return _set_to_text(column, value)
    if kind is Kind.BINARY or kind is Kind.GEOMETRY:
        if isinstance(value, str):
            value = value.encode("utf-8")
        if not isinstance(value, bytes | bytearray):
            raise TypeError
        if column.is_fixed_binary and column.length is not None:
            # The binlog strips BINARY(n)'s trailing zero bytes; the column holds n bytes.
            value = bytes(value).ljust(column.length, b"\x00")
        return base64.b64encode(bytes(value)).decode("ascii")
    raise UnsupportedTypeError(f"column type {column.spec!r} is not supported.")


def encode(column: ColumnType, value: Any, column_name: str = "?") -> JsonScalar:
    """The canonical JSON scalar of a driver value; ContractError names the column if it can't."""
    if value is None:
        return None
    try:
        return _encode(column, value)
    except (TypeError, ValueError, InvalidOperation, OverflowError, UnicodeDecodeError) as exc:
        detail = f": {exc}" if str(exc) else ""
        raise ContractError(
            f"column {column_name} ({column.spec}) cannot carry a "
            f"{type(value).__name__} value{detail}."
        ) from None


def _parse_datetime(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def _parse_time(text: str) -> dt.timedelta:
    sign = -1 if text.startswith("-") else 1
    hours, minutes, rest = text.lstrip("-").split(":")
    seconds, _, fraction = rest.partition(".")
    micros = int((fraction + "000000")[:6]) if fraction else 0
    magnitude = dt.timedelta(
        hours=int(hours), minutes=int(minutes), seconds=int(seconds), microseconds=micros
    )
    return sign * magnitude


def _decode(column: ColumnType, value: JsonScalar) -> Any:  # noqa: PLR0911, PLR0912
    kind = column.kind
    if kind in (Kind.INT, Kind.YEAR, Kind.BIT):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError
        return value
    if kind is Kind.UINT64:
        if not isinstance(value, str) or not value.isdigit():
            raise TypeError
        return int(value)
    if kind is Kind.DECIMAL:
        if not isinstance(value, str):
            raise TypeError
        return Decimal(value)
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError
        return float(value)
    if not isinstance(value, str):
        raise TypeError
    if kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP) and is_zero_part_date(value):
        return value
    if kind is Kind.DATE:
        return dt.date.fromisoformat(value)
    if kind in (Kind.DATETIME, Kind.TIMESTAMP):
        return _parse_datetime(value)
    if kind is Kind.TIME:
        return _parse_time(value)
    if kind in (Kind.ENUM, Kind.SET, Kind.TEXT, Kind.UUID, Kind.INET4, Kind.INET6):
        return value
    raw = base64.b64decode(value, validate=True)
    if column.is_fixed_binary and column.length is not None:
        # Messages written before the collector padded BINARY(n) lack its trailing zero bytes.
        raw = raw.ljust(column.length, b"\x00")
    return raw


def decode(column: ColumnType, value: JsonScalar, column_name: str = "?") -> Any:
    """The canonical Python value of a wire value; ContractError if the value is malformed."""
    if value is None:
        return None
    try:
        return _decode(column, value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ContractError(
            f"column {column_name} ({column.spec}) holds a malformed value {value!r}."
        ) from exc


def canonical(column: ColumnType, value: Any) -> Any:
    """What ``decode(encode(value))`` gives: the form to compare a SELECTed value against."""
    return decode(column, encode(column, value))
