"""MySQL's binary JSON (the JSON column's storage and binlog format) → JSON text, and the
partial JSON updates of ``binlog_row_value_options=PARTIAL_JSON`` applied to a before image.
Pure logic.

Written here rather than taken from python-mysql-replication: its ``json_binary`` works on
its packet object (not on bytes at an offset, as ``collector.row_decoder`` reads), returns
bytes keys or strings depending on the version, and prints opaque values (DECIMAL, DATETIME
inside JSON) its own way. Format: MySQL ``sql-common/json_binary.cc``; diffs:
``sql-common/json_diff.cc`` (operation byte, path, value).

The text is what MySQL prints for the value (``CAST(col AS CHAR)``): ``{"a": 1, "b": [1, 2]}``,
object keys in MySQL's storage order (shorter first, then bytewise), DATE/TIME/DATETIME
inside JSON as strings with six fraction digits, DECIMAL as a number.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import struct
from typing import Any

from simple_binlog.errors import ContractError

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0, 1, 2, 3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING = range(4, 13)
_OPAQUE = 15
_INLINE_SMALL = frozenset({_LITERAL, _INT16, _UINT16})
_INLINE_LARGE = frozenset({_LITERAL, _INT16, _UINT16, _INT32, _UINT32})
_SCALARS = {
    _INT16: struct.Struct("<h"),
    _UINT16: struct.Struct("<H"),
    _INT32: struct.Struct("<i"),
    _UINT32: struct.Struct("<I"),
    _INT64: struct.Struct("<q"),
    _UINT64: struct.Struct("<Q"),
    _DOUBLE: struct.Struct("<d"),
}
# MySQL field types an opaque JSON value may carry with a readable text form.
_DECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP = 246, 10, 11, 12, 7

REPLACE, INSERT, REMOVE = 0, 1, 2


class _Number(float):
    """A DECIMAL inside JSON: printed with its own digits, not as a float."""

    text: str

    def __new__(cls, text: str) -> _Number:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __repr__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[type[_Number], tuple[str]]:
        return _Number, (self.text,)


def _malformed(what: str) -> ContractError:
    return ContractError(f"a MySQL binary JSON value is malformed ({what}).")


def _varlen(data: bytes, offset: int) -> tuple[int, int]:
    """A length in 7-bit groups, least significant first (the high bit: more follow)."""
    value = shift = 0
    for _ in range(5):
        if offset >= len(data):
            raise _malformed("truncated length")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
    raise _malformed("length longer than 5 bytes")


def parse(data: bytes) -> Any:
    """The value of a JSON column's bytes (empty: JSON null, as MySQL reads it)."""
    if not data:
        return None
    return _value(data[0], data, 1, len(data))


def _value(kind: int, data: bytes, offset: int, end: int) -> Any:
    if kind in (_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY):
        return _container(kind, data, offset, end)
    if kind == _LITERAL:
        return _literal(data[offset])
    if kind in _SCALARS:
        layout = _SCALARS[kind]
        if offset + layout.size > end:
            raise _malformed("truncated number")
        return layout.unpack_from(data, offset)[0]
    if kind == _STRING:
        length, start = _varlen(data, offset)
        if start + length > end:
            raise _malformed("truncated string")
        return data[start : start + length].decode("utf-8")
    if kind == _OPAQUE:
        field_type = data[offset]
        length, start = _varlen(data, offset + 1)
        if start + length > end:
            raise _malformed("truncated opaque value")
        return _opaque(field_type, data[start : start + length])
    raise _malformed(f"type 0x{kind:02x}")


def _literal(code: int) -> Any:
    if code > 2:
        raise _malformed(f"literal 0x{code:02x}")
    return (None, True, False)[code]


def _container(kind: int, data: bytes, offset: int, end: int) -> Any:
    large = kind in (_LARGE_OBJECT, _LARGE_ARRAY)
    is_object = kind in (_SMALL_OBJECT, _LARGE_OBJECT)
    width = 4 if large else 2
    unpack = struct.Struct("<I" if large else "<H").unpack_from
    if offset + 2 * width > end:
        raise _malformed("truncated container")
    count, size = unpack(data, offset)[0], unpack(data, offset + width)[0]
    if offset + size > end:
        raise _malformed("container larger than its value")
    inline = _INLINE_LARGE if large else _INLINE_SMALL
    keys: list[str] = []
    entry = offset + 2 * width
    if is_object:
        for _ in range(count):
            key_offset, key_length = (
                unpack(data, entry)[0],
                struct.unpack_from("<H", data, entry + width)[0],
            )
            start = offset + key_offset
            keys.append(data[start : start + key_length].decode("utf-8"))
            entry += width + 2
    values = []
    for _ in range(count):
        value_type = data[entry]
        if value_type in inline:
            if value_type == _LITERAL:
                values.append(_literal(data[entry + 1]))
            else:
                values.append(_SCALARS[value_type].unpack_from(data, entry + 1)[0])
        else:
            values.append(
                _value(value_type, data, offset + unpack(data, entry + 1)[0], offset + size)
            )
        entry += 1 + width
    if is_object:
        return dict(zip(keys, values, strict=True))
    return values


def _opaque(field_type: int, raw: bytes) -> Any:
    if field_type == _DECIMAL and len(raw) >= 2:
        return _Number(_decimal_text(raw[0], raw[1], raw[2:]))
    if field_type in (_DATE, _TIME, _DATETIME, _TIMESTAMP) and len(raw) == 8:
        return _temporal_text(field_type, struct.unpack("<q", raw)[0])
    return f"base64:type{field_type}:{base64.b64encode(raw).decode('ascii')}"


_DIGITS_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_text(precision: int, scale: int, raw: bytes) -> str:
    """MySQL's packed DECIMAL (the binlog's layout) as text."""
    integral = precision - scale
    groups = [integral % 9] * bool(integral % 9) + [9] * (integral // 9)
    fraction = [9] * (scale // 9) + [scale % 9] * bool(scale % 9)
    buffer = bytearray(raw)
    if not buffer:
        raise _malformed("empty decimal")
    negative = not buffer[0] & 0x80
    buffer[0] ^= 0x80
    if negative:
        buffer = bytearray(b ^ 0xFF for b in buffer)
    position, whole, part = 0, 0, 0
    for digits in groups:
        width = _DIGITS_BYTES[digits]
        whole = whole * 10**digits + int.from_bytes(buffer[position : position + width], "big")
        position += width
    for digits in fraction:
        width = _DIGITS_BYTES[digits]
        part = part * 10**digits + int.from_bytes(buffer[position : position + width], "big")
        position += width
    text = str(whole) + (f".{part:0{scale}d}" if scale else "")
    return "-" + text if negative else text


def _temporal_text(field_type: int, packed: int) -> str:
    """A temporal inside JSON (MySQL's packed longlong): DATE as ``YYYY-MM-DD``, TIME and
    DATETIME with six fraction digits, as MySQL prints them."""
    negative = packed < 0
    packed = abs(packed)
    intpart, micros = packed >> 24, packed % (1 << 24)
    if field_type == _TIME:
        hms = intpart % (1 << 24)
        hours = hms >> 12
        text = f"{hours:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}.{micros:06d}"
        return "-" + text if negative else text
    ymd, hms = intpart >> 17, intpart % (1 << 17)
    year_month = ymd >> 5
    date = f"{year_month // 13:04d}-{year_month % 13:02d}-{ymd & 31:02d}"
    if field_type == _DATE:
        return date
    return f"{date} {hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}.{micros:06d}"


def _dump(value: Any) -> str:
    if isinstance(value, _Number):
        return value.text
    if isinstance(value, dict):
        items = (
            f"{json.dumps(key, ensure_ascii=False)}: {_dump(item)}" for key, item in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(item) for item in value) + "]"
    if isinstance(value, float):
        return repr(value) if value != int(value) or abs(value) >= 1e15 else f"{value:.1f}"
    return json.dumps(value, ensure_ascii=False)


def to_text(value: Any) -> str:
    return _dump(value)


class ColumnReader:
    """Reads a JSON column of a rows event (a ``collector.row_decoder`` reader): its bytes,
    behind a ``length_size``-byte length, as MySQL's JSON text."""

    __slots__ = ("length_size",)

    def __init__(self, length_size: int) -> None:
        self.length_size = length_size

    def _bytes(self, data: bytes, offset: int) -> tuple[bytes, int]:
        start = offset + self.length_size
        end = start + int.from_bytes(data[offset:start], "little")
        if end > len(data):
            raise _malformed("the value runs past its rows event")
        return data[start:end], end

    def __call__(self, data: bytes, offset: int) -> tuple[str, int]:
        value, end = self.value(data, offset)
        return to_text(value), end

    def value(self, data: bytes, offset: int) -> tuple[Any, int]:
        raw, end = self._bytes(data, offset)
        return parse(raw), end

    def apply_diffs(self, data: bytes, offset: int, before: Any) -> tuple[Any, int]:
        """A partial value (``binlog_row_value_options=PARTIAL_JSON``): ``before`` with the
        column's diffs applied."""
        start = offset + self.length_size
        end = start + int.from_bytes(data[offset:start], "little")
        diffs, _ = read_diffs(data, start, end)
        document = copy.deepcopy(before)
        for operation, path, value in diffs:
            document = apply_diff(document, operation, path, value)
        return document, end


# -- partial updates ---------------------------------------------------------------------------

_STEP = re.compile(r'\.(?:"((?:[^"\\]|\\.)*)"|([A-Za-z_$][\w$]*))|\[(\d+)\]')


def _path(text: str) -> list[str | int]:
    """``$.a[2]."b c"`` → ['a', 2, 'b c'] (the paths MySQL writes in JSON diffs)."""
    if not text.startswith("$"):
        raise _malformed(f"JSON diff path {text!r}")
    steps: list[str | int] = []
    position = 1
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            raise _malformed(f"JSON diff path {text!r}")
        quoted, plain, index = match.groups()
        if index is not None:
            steps.append(int(index))
        elif quoted is not None:
            steps.append(json.loads(f'"{quoted}"'))
        else:
            steps.append(plain)
        position = match.end()
    return steps


def _storage_order(document: dict[str, Any]) -> dict[str, Any]:
    return dict(
        sorted(document.items(), key=lambda item: (len(item[0].encode()), item[0].encode()))
    )


def apply_diff(document: Any, operation: int, path: str, value: Any) -> Any:
    """``document`` with one diff applied (REPLACE / INSERT / REMOVE at ``path``)."""
    steps = _path(path)
    if not steps:
        if operation != REPLACE:
            raise _malformed("a diff inserts or removes the whole document")
        return value
    parent = document
    try:
        for step in steps[:-1]:
            parent = parent[step]
        last = steps[-1]
        if operation == REPLACE:
            parent[last] = value
        elif operation == REMOVE:
            del parent[last]
        elif operation == INSERT:
            if isinstance(parent, list) and isinstance(last, int):
                parent.insert(last, value)
            elif isinstance(parent, dict) and isinstance(last, str):
                parent[last] = value
            else:
                raise TypeError(f"cannot insert at {path}")
        else:
            raise _malformed(f"JSON diff operation {operation}")
    except (KeyError, IndexError, TypeError) as exc:
        raise ContractError(
            f"a partial JSON update does not apply to its before image ({path}: {exc}); the "
            "binlog and the before image disagree."
        ) from None
    if isinstance(parent, dict):
        ordered = _storage_order(parent)
        parent.clear()
        parent.update(ordered)
    return document


def read_diffs(data: bytes, offset: int, end: int) -> tuple[list[tuple[int, str, Any]], int]:
    """The diffs of one partial JSON column value: [(operation, path, value)]."""
    from collector.binlog_events import lenenc  # noqa: PLC0415 - binlog_events imports us

    diffs = []
    while offset < end:
        operation = data[offset]
        if operation not in (REPLACE, INSERT, REMOVE):
            raise _malformed(f"JSON diff operation {operation}")
        length, offset = lenenc(data, offset + 1)
        path = data[offset : offset + length].decode("utf-8")
        offset += length
        value = None
        if operation != REMOVE:
            length, offset = lenenc(data, offset)
            value = parse(data[offset : offset + length])
            offset += length
        diffs.append((operation, path, value))
    if offset != end:
        raise _malformed("JSON diffs overrun their column")
    return diffs, offset
