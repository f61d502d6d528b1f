"""The pure parts of a replay: the chunk SELECT over the table's key (chosen by
``cdc_platform.mysql_schema``), rows → MOCK messages, the execute time, and the rate limit.
No I/O.

Keyset pagination: chunk n+1 selects the rows whose key is greater than the last key of chunk
n, ``ORDER BY`` the key, ``LIMIT`` the batch size. Never OFFSET: its cost grows with the
position, and rows inserted or deleted under it shift the pages. The "greater than" is written
in the expanded form ``a > x OR (a = x AND b > y)``, which MariaDB's range optimizer turns into
a range scan of the key's index (its row-constructor comparison ``(a, b) > (x, y)`` is not
used for index ranges by every version).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from mock_replay.condition import Condition, quote_identifier
from mock_replay.errors import ReplayError
from simple_binlog.message import EventType, SimpleBinlog, Source
from simple_binlog.type_table import KindVisitor, column_types_text, visit
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode, encode, parse_column_type


@dataclass(frozen=True, slots=True)
class TableShape:
    """A physical table as the replay reads it (``cdc_platform.mysql_schema.TableShape``
    and the estimated row count). ``key``: by ``cdc_platform.mysql_schema.choose_key``;
    ``()``: such a table cannot be paged exactly and is refused by name."""

    schema: str
    table: str
    column_types: dict[str, str]  # in column order, information_schema spelling
    key: tuple[str, ...]
    estimated_rows: int

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def binlog_spelling(spec: str) -> str:
    """A column's ``columnTypes`` text: the server's COLUMN_TYPE verbatim
    (``simple_binlog.type_table.column_types_text``), as the collector sends it too."""
    return column_types_text(spec)


def _printed_short(column: ColumnType) -> bool:
    """Whether the text protocol prints fewer digits than the column stores: FLOAT (6
    significant digits of an exact float32) and FLOAT(M,D)/DOUBLE(M,D) (D decimals of a
    binary value that has more, e.g. -9.999999999998899e-05 printed as -0.0001). The binlog
    carries the stored value; as DOUBLE the full value arrives."""
    return column.kind is Kind.FLOAT or (column.kind is Kind.DOUBLE and column.length is not None)


def _select_expression(name: str, spec: str) -> str:
    quoted = quote_identifier(name)
    if _printed_short(parse_column_type(spec)):
        return f"CAST({quoted} AS DOUBLE) AS {quoted}"
    return quoted


def keyset_predicate(key: Sequence[str]) -> str:
    """``key > last key`` in the expanded form, with one ``%s`` per compared value."""
    terms = []
    for depth in range(len(key)):
        equal = [f"{quote_identifier(column)} = %s" for column in key[:depth]]
        terms.append(" AND ".join([*equal, f"{quote_identifier(key[depth])} > %s"]))
    return "(" + " OR ".join(f"({term})" for term in terms) + ")"


def keyset_params(last_key: Sequence[object]) -> tuple[object, ...]:
    """The parameters of ``keyset_predicate`` for a last key, in placeholder order."""
    params: list[object] = []
    for depth in range(len(last_key)):
        params.extend(last_key[: depth + 1])
    return tuple(params)


def chunk_query(
    shape: TableShape,
    condition: Condition | None,
    last_key: Sequence[object] | None,
    limit: int,
) -> tuple[str, tuple[object, ...]]:
    """The SELECT of the next chunk (one column per table column) and its parameters."""
    columns = ", ".join(_select_expression(n, s) for n, s in shape.column_types.items())
    return _chunk_sql(shape, columns, condition, last_key, limit)


# Kinds whose MySQL text form (text protocol, session time_zone '+00:00') already is the
# contract's wire form: DECIMAL prints exactly its scale's decimals, DATE/DATETIME/TIMESTAMP
# exactly their fsp fraction digits (a zero year, month or day as it is). ``MySQLSource``
# reads them as text, skipping a parse into Decimal/datetime and a format back per value.
TEXT_IS_WIRE = (Kind.DECIMAL, Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP)


@dataclass(frozen=True, slots=True)
class WireSql:
    """The SQL giving a column's wire value, and how it becomes JSON text: a ``number`` as it
    is, ``plain`` text (digits, dates, hex, base64: nothing to escape) in quotes, other text
    through JSON_QUOTE."""

    value: str
    quoting: Literal["number", "plain", "json"]


class WireSqlVisitor(KindVisitor[WireSql]):
    """The type table's visitor for the replay's server-side JSON: the SQL giving one column's
    wire value (a number or a text) as MariaDB computes it."""

    def __init__(self, quoted: str) -> None:
        self._quoted = quoted

    def _as_char(self) -> WireSql:
        return WireSql(f"CAST({self._quoted} AS CHAR)", "plain")

    def visit_int(self, column: ColumnType) -> WireSql:
        return WireSql(self._quoted, "number")

    def visit_uint64(self, column: ColumnType) -> WireSql:
        return self._as_char()

    def visit_decimal(self, column: ColumnType) -> WireSql:
        return self._as_char()  # TEXT_IS_WIRE

    def visit_float(self, column: ColumnType) -> WireSql:
        return WireSql(f"CAST({self._quoted} AS DOUBLE)", "number")

    def visit_double(self, column: ColumnType) -> WireSql:
        if _printed_short(column):  # DOUBLE(M,D)
            return WireSql(f"CAST({self._quoted} AS DOUBLE)", "number")
        return WireSql(self._quoted, "number")

    def visit_date(self, column: ColumnType) -> WireSql:
        return self._as_char()  # TEXT_IS_WIRE

    def visit_datetime(self, column: ColumnType) -> WireSql:
        return self._as_char()  # TEXT_IS_WIRE

    def visit_timestamp(self, column: ColumnType) -> WireSql:
        return self._as_char()  # TEXT_IS_WIRE

    def visit_time(self, column: ColumnType) -> WireSql:
        return self._as_char()  # [-]HH:MM:SS and exactly fsp digits: the wire form

    def visit_year(self, column: ColumnType) -> WireSql:
        return WireSql(f"({self._quoted} + 0)", "number")

    def visit_bit(self, column: ColumnType) -> WireSql:
        return WireSql(f"CAST({self._quoted} AS UNSIGNED)", "number")

    def visit_enum(self, column: ColumnType) -> WireSql:
        return WireSql(self._quoted, "json")

    def visit_set(self, column: ColumnType) -> WireSql:
        return WireSql(self._quoted, "json")

    def visit_text(self, column: ColumnType) -> WireSql:
        # MariaDB's JSON is a LONGTEXT; as CHAR it is quoted as the text it holds.
        if column.spec.lower().startswith("longtext"):
            return WireSql(f"CAST({self._quoted} AS CHAR)", "json")
        return WireSql(self._quoted, "json")

    def visit_binary(self, column: ColumnType) -> WireSql:
        return self._base64(self._quoted)  # BINARY(n): all n bytes, as the collector sends

    def visit_geometry(self, column: ColumnType) -> WireSql:
        return self._base64(self._quoted)

    def _base64(self, raw: str) -> WireSql:
        # TO_BASE64 wraps lines at 76 characters; CHAR(10) alone would be a binary string.
        return WireSql(f"REPLACE(TO_BASE64({raw}), CHAR(10 USING utf8mb4), '')", "plain")

    def visit_uuid(self, column: ColumnType) -> WireSql:
        return self._as_char()

    def visit_inet4(self, column: ColumnType) -> WireSql:
        return self._as_char()

    def visit_inet6(self, column: ColumnType) -> WireSql:
        return self._as_char()


def _json_member(name: str, spec: str) -> str | None:
    """A column's value as JSON text (``null`` for NULL), for the row's CONCAT; None if the
    server cannot produce it (the table is then encoded in Python)."""
    if "zerofill" in spec.lower():
        # The server's text of a ZEROFILL number is padded (00042): not a JSON number.
        return None
    quoted = quote_identifier(name)
    wire = visit(parse_column_type(spec), WireSqlVisitor(quoted))
    # Only the column's own NULL is JSON null. A NULL the conversion makes of a value
    # (JSON_QUOTE of bytes invalid in the column's character set, TO_BASE64 of a value over
    # max_allowed_packet) makes the whole row NULL instead, which the chunk refuses loudly.
    is_null = f"{quoted} IS NULL"
    if wire.quoting == "number":
        return f"IF({is_null}, 'null', {wire.value})"
    if wire.quoting == "plain":
        return f"IF({is_null}, 'null', CONCAT('\"', {wire.value}, '\"'))"
    return f"IF({is_null}, 'null', JSON_QUOTE({wire.value}))"


def json_chunk_query(
    shape: TableShape,
    condition: Condition | None,
    last_key: Sequence[object] | None,
    limit: int,
) -> tuple[str, tuple[object, ...]] | None:
    """The SELECT of the next chunk as one column per row: the row's ``content`` as JSON
    text, built by the server in the contract's wire form. None if a column type or name keeps
    the server from building it."""
    content = _json_object(shape)
    if content is None:
        return None
    return _chunk_sql(shape, content, condition, last_key, limit)


def _json_object(shape: TableShape) -> str | None:
    """The row's content as compact JSON text, written out with CONCAT: about a quarter less
    server CPU per row than JSON_OBJECT (the replay's bottleneck when it reads one table at a
    time), JSON equal in value to the collector's (not always in bytes: the server writes an
    integral DOUBLE as ``1``), and no "illegal mix of collations" when the table's text
    columns differ in character set or collation (JSON_OBJECT refuses those)."""
    pieces = []
    for position, (name, spec) in enumerate(shape.column_types.items()):
        member = _json_member(name, spec)
        label = orjson.dumps(name).decode()
        if member is None or "\\" in label:
            # A name JSON must escape would need a backslash inside a SQL literal, whose
            # meaning depends on the server's sql_mode: such a table is encoded in Python.
            return None
        lead = "{" if position == 0 else ","
        literal = f"{lead}{label}:".replace("'", "''").replace("%", "%%")
        pieces.append(f"'{literal}', {member}")
    if not pieces:
        return None
    return f"CONCAT({', '.join(pieces)}, '}}')"


# Between the rows of a batch: JSON text never holds a raw newline (it is escaped as \n).
BATCH_SEPARATOR = b"\n"
_CONTENT_ALIAS = "_cdc_replay_content"


def batch_is_whole(count: int, length: object, joined: bytes | None) -> bool:
    """Whether a ``json_batch_query`` result holds all of its rows, uncut."""
    if count == 0:
        return True
    if joined is None or length is None:
        return False
    return len(joined) == int(str(length)) + count - 1


def json_batch_query(
    shape: TableShape,
    condition: Condition | None,
    last_key: Sequence[object] | None,
    limit: int,
) -> tuple[str, tuple[object, ...]] | None:
    """The next chunk as ONE row: ``(row count, total bytes of the rows' JSON, the rows'
    content JSON joined by newlines in key order, as bytes)``. One protocol row per chunk
    instead of one per table row: the per-row cost of the client's protocol parsing goes away,
    and as bytes the rows go to Kafka without being decoded and encoded again.

    GROUP_CONCAT cuts a result longer than ``group_concat_max_len`` with a warning, not an
    error, and a cut can fall inside the last row: the caller checks that the joined text is
    exactly ``length + count - 1`` bytes long (``batch_is_whole``) and reads a cut chunk again
    row by row."""
    content = _json_object(shape)
    if content is None or _CONTENT_ALIAS in shape.column_types:
        return None
    keys = ", ".join(quote_identifier(column) for column in shape.key)
    inner, params = _chunk_sql(
        shape, f"{keys}, {content} AS `{_CONTENT_ALIAS}`", condition, last_key, limit
    )
    joined = f"CAST(GROUP_CONCAT(`{_CONTENT_ALIAS}` ORDER BY {keys} SEPARATOR '\n') AS BINARY)"
    lengths = f"SUM(LENGTH(`{_CONTENT_ALIAS}`))"
    sql = f"SELECT COUNT(*), {lengths}, {joined} FROM ({inner}) AS `_cdc_replay_chunk`"  # noqa: S608
    return sql, params


def _chunk_sql(
    shape: TableShape,
    columns: str,
    condition: Condition | None,
    last_key: Sequence[object] | None,
    limit: int,
) -> tuple[str, tuple[object, ...]]:
    clauses: list[str] = []
    params: list[object] = []
    if last_key is not None:
        clauses.append(keyset_predicate(shape.key))
        params.extend(keyset_params(last_key))
    if condition is not None:
        clauses.append(condition.sql)
        params.extend(condition.params)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    order = ", ".join(quote_identifier(column) for column in shape.key)
    # Only quoted identifiers and the parser's own SQL are formatted in; values are bound.
    table = f"{quote_identifier(shape.schema)}.{quote_identifier(shape.table)}"
    sql = f"SELECT {columns} FROM {table}{where} ORDER BY {order} LIMIT {int(limit)}"  # noqa: S608
    return sql, tuple(params)


def _encoder(name: str, column: ColumnType) -> Callable[[Any], JsonScalar]:  # noqa: PLR0911
    """The fastest function equal to ``values.encode`` for what the source returns (never
    called with None)."""
    kind = column.kind
    if kind in (Kind.INT, Kind.YEAR):
        return lambda value: value if type(value) is int else encode(column, value, name)
    if kind is Kind.DECIMAL and "zerofill" in column.spec.lower():
        # The server's text of a ZEROFILL DECIMAL is padded (00012.500): not the wire form.
        return lambda value: encode(column, value, name)
    if kind is Kind.TEXT or kind is Kind.ENUM or kind in TEXT_IS_WIRE:
        return lambda value: value if type(value) is str else encode(column, value, name)
    # The same results as values.encode for the types pymysql returns, minus its dispatch.
    if kind is Kind.UINT64:
        return lambda value: str(value) if type(value) is int else encode(column, value, name)
    if kind is Kind.DOUBLE:
        return lambda value: value if type(value) is float else encode(column, value, name)
    if kind is Kind.BIT:
        return lambda value: (
            int.from_bytes(value, "big") if type(value) is bytes else encode(column, value, name)
        )
    return lambda value: encode(column, value, name)


class RowEncoder:
    """SELECTed rows (tuples in column order) → SimpleBinlog MOCK INSERTs.

    Values are encoded exactly as the collector encodes the binlog's (``simple_binlog.values``);
    the connection must use ``time_zone = '+00:00'`` so TIMESTAMPs arrive in UTC. Every field
    but ``content`` is the same for all rows of a table in a run, so ``encode`` serialises
    them once and splices each row's content in.
    """

    def __init__(self, shape: TableShape, binlog_offset: int, execute_time_ms: int) -> None:
        self._shape = shape
        self._names = tuple(shape.column_types)
        self._encoders = tuple(
            (index, _encoder(name, parse_column_type(spec)))
            for index, (name, spec) in enumerate(shape.column_types.items())
        )
        self._key_names = shape.key
        self._column_types = {name: binlog_spelling(s) for name, s in shape.column_types.items()}
        self._offset = binlog_offset
        self._execute_time = execute_time_ms
        template = self.message_for({}).encode()
        suffix = b'"content":{}}'
        if not template.endswith(suffix):
            raise AssertionError("SimpleBinlog.to_json no longer ends with content")
        self._prefix = template[: -len(suffix)] + b'"content":'
        if BATCH_SEPARATOR in self._prefix:  # encode_batch splits on it; JSON escapes it
            raise AssertionError("a message prefix holds a raw newline")

    def content(self, row: Sequence[Any]) -> dict[str, JsonScalar]:
        values = list(row)
        for index, encoder in self._encoders:
            value = values[index]
            if value is not None:
                values[index] = encoder(value)
        return dict(zip(self._names, values, strict=True))

    def message_for(self, content: dict[str, JsonScalar]) -> SimpleBinlog:
        return SimpleBinlog(
            binlog_offset=self._offset,
            execute_time=self._execute_time,
            event_type=EventType.INSERT,
            schema_name=self._shape.schema,
            table_name=self._shape.table,
            source=Source.MOCK,
            content=content,
            column_types=self._column_types,
            primary_keys=self._shape.key,
        )

    def message(self, row: Sequence[Any]) -> SimpleBinlog:
        return self.message_for(self.content(row))

    def encode(self, content: dict[str, JsonScalar]) -> bytes:
        """``message_for(content).encode()``, byte for byte, without building the message."""
        return self._prefix + orjson.dumps(content) + b"}"

    def encode_json_text(self, content_json: str) -> bytes:
        """The message of a row whose content the server built as JSON text."""
        return self._prefix + content_json.encode() + b"}"

    def encode_batch(self, joined: bytes) -> list[bytes]:
        """The messages of a batch of server-built contents joined by newlines: the same as
        ``encode_json_text`` of each, but each newline becomes "end of this message, start of
        the next" in one pass in C, with no Python step per row."""
        between = b"}" + BATCH_SEPARATOR + self._prefix
        return (self._prefix + joined.replace(BATCH_SEPARATOR, between) + b"}").split(
            BATCH_SEPARATOR
        )

    def key_of(self, content: dict[str, JsonScalar]) -> tuple[JsonScalar, ...]:
        """A row's key in the wire form: what the progress topic stores as the last key."""
        return tuple(content[name] for name in self._key_names)


def encode_key(shape: TableShape, raw_key: Sequence[Any]) -> list[JsonScalar]:
    """A last key as stored in the progress topic (the contract's wire form)."""
    return [
        encode(parse_column_type(shape.column_types[name]), value, name)
        for name, value in zip(shape.key, raw_key, strict=True)
    ]


def decode_key(shape: TableShape, stored: Sequence[JsonScalar]) -> tuple[Any, ...]:
    """A stored last key back as the values the keyset predicate binds (int, Decimal,
    datetime, bytes, …). ENUM and SET values are bound as their numbers: ORDER BY sorts them
    by number (definition order), while comparing with a label would compare text, and the
    pages would skip or repeat rows."""
    if len(stored) != len(shape.key):
        raise ReplayError(
            f"the stored progress of {shape.name} has a key of {len(stored)} values but the "
            f"table's key ({', '.join(shape.key)}) has {len(shape.key)}; the table changed "
            "since the run started."
        )
    return tuple(
        _bindable(parse_column_type(shape.column_types[name]), value, name)
        for name, value in zip(shape.key, stored, strict=True)
    )


def _bindable(column: ColumnType, value: JsonScalar, name: str) -> Any:
    decoded = decode(column, value, name)
    if column.kind is Kind.ENUM and isinstance(decoded, str):
        # Index 0 is the '' of an invalid value; labels count from 1.
        return column.labels.index(decoded) + 1 if decoded in column.labels else 0
    if column.kind is Kind.SET and isinstance(decoded, str):
        members = set(decoded.split(",")) - {""}
        return sum(1 << index for index, label in enumerate(column.labels) if label in members)
    return decoded


def execute_day(text: str | None, now: dt.datetime) -> dt.date:
    """The day the MOCK rows belong to: ``YYYY-MM-DD``, default yesterday (UTC)."""
    if text is None:
        return (now.astimezone(dt.UTC) - dt.timedelta(days=1)).date()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ReplayError(
            f"the execute time {text[:40]!r} is not a day in the form YYYY-MM-DD."
        ) from None


def execute_time_ms(day: dt.date) -> int:
    """Midnight UTC at the start of ``day``, in milliseconds: MOCK rows land in its partition."""
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return int(midnight.timestamp()) * 1000


class TokenBucket:
    """Rows-per-second limit. ``take(n)`` returns how long to wait before reading on.

    The bucket holds at most ``burst`` tokens and refills at ``rate`` per second; taking more
    than it holds runs into debt, repaid by waiting. A rate of 0 means no limit.
    """

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = max(burst, 1.0)
        self._clock = clock
        self._tokens = self._burst
        self._last = clock()

    def take(self, count: int) -> float:
        if self._rate <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        self._tokens -= count
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate
