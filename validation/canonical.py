"""The canonical row encoding, defined once per Kind, and the same encoding in every engine.

A column's **canonical text** is the text of its SimpleBinlog wire value (``simple_binlog.values``),
normalised where two engines could spell one value two ways:

==================  ===============================================================
Kind                canonical text (bytes hashed)
==================  ===============================================================
int, year, bit      decimal digits, ``-`` for negatives (no ZEROFILL padding)
uint64              decimal digits (``18446744073709551615``)
decimal(p,s)        digits with exactly s decimals (``12.30``)
float, double       the shortest round-trip digits of the column's own precision
                    (float32 for FLOAT, float64 for DOUBLE), as ``[-]<digits>e<exp>``
                    meaning 0.<digits> × 10^exp, digits without leading/trailing
                    zeros; zero is ``0`` (so ``1e20``, ``1e+20`` and
                    ``100000000000000000000`` all read ``1e21``)
date, datetime,     MySQL's text: ``YYYY-MM-DD[ HH:MM:SS[.f…]]`` with exactly fsp
timestamp           fraction digits, TIMESTAMP in UTC; zero-part dates as their text
time                ``[-]HH:MM:SS[.f…]`` (hours up to 838, fsp digits)
enum, set, text     the UTF-8 bytes of the text (SET in definition order)
binary, geometry    the bytes themselves (BINARY(n): all n, trailing zero bytes too)
uuid, inet4, inet6  MariaDB's text form (``::ffff:1.2.3.4``)
json                the document with keys sorted, no whitespace (``JSON_NORMALIZE``)
==================  ===============================================================

A **row** is ``md5(md5(shard) , piece₁ , … , pieceₙ)`` joined by ``,``, where a piece is
``md5(canonical text)`` in hex, or ``n`` for NULL (32 hex digits never read ``n``, so NULL
and ``""`` differ). A **chunk** is its row count and the sums, modulo 2^64, of the first and
the second 64 bits of its rows' md5: order-independent, and a duplicated row does not
cancel out as it would under XOR.

Each engine computes it in its own SQL (``MySqlCanonical``, ``PostgresCanonical``: one
``KindVisitor`` each, one method per Kind returning the SQL text of the canonical text of a
column); Redis has no engine, so ``python_canonical`` computes the same bytes from the wire
value. ``tests/integration/validation/test_canonical_engines.py`` checks, for every type of
``REPRESENTATIVE_TYPES``, that MySQL's and PostgreSQL's hashes of the same stored values
are equal. Pure: builds SQL text, runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simple_binlog.type_table import KindVisitor, visit
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode, encode

NULL_PIECE = "n"
_MASK = (1 << 64) - 1

SqlOf = Callable[[str], str]  # a column's SQL reference → its canonical text (SQL)


def is_json(column: ColumnType) -> bool:
    return column.kind is Kind.TEXT and column.spec.strip().lower().startswith("json")


# -- Python (Redis, and the reference the SQL is tested against) ----------------------------


def float_text(text: str) -> str:
    """The canonical text of a float printed as ``text`` (see the module docstring)."""
    negative = text.startswith("-")
    unsigned = text.lstrip("-")
    mantissa, _, exponent = unsigned.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    stripped = digits.lstrip("0")
    leading = len(digits) - len(stripped)
    stripped = stripped.rstrip("0")
    if not stripped:
        return "0"
    power = int(exponent or "0") + len(whole) - leading
    return f"{'-' if negative else ''}{stripped}e{power}"


def _shortest_float32(value: float) -> str:
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == value:
            return text
    return repr(value)


class _Number(str):
    """A JSON number's text as written."""


def _json_number(text: str) -> str:
    normal = float_text(text)  # [-]<digits>e<power>: 0.<digits> × 10^power
    if normal == "0":
        return "0.0E0"
    mantissa, _, power = normal.partition("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-")
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{int(power) - 1}"


def _json_normal(value: object) -> str:
    if isinstance(value, dict):
        members = sorted(value.items(), key=lambda item: item[0].encode())
        return "{" + ",".join(f"{_json_string(k)}:{_json_normal(v)}" for k, v in members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json_normal(v) for v in value) + "]"
    if isinstance(value, _Number):
        return _json_number(value)
    if isinstance(value, str):
        return _json_string(value)
    return json.dumps(value)  # true, false, null


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def json_text(text: str) -> str:
    """A JSON document as MariaDB's ``JSON_NORMALIZE`` prints it (see ``PG_JSON_FUNCTIONS``)."""
    return _json_normal(json.loads(text, parse_int=_Number, parse_float=_Number))


def python_canonical(column: ColumnType, wire: JsonScalar) -> bytes | None:  # noqa: PLR0911
    """The canonical bytes of a wire value (None for NULL)."""
    if wire is None:
        return None
    value = decode(column, wire)
    kind = column.kind
    if kind in (Kind.BINARY, Kind.GEOMETRY):
        return bytes(value)
    if kind is Kind.FLOAT:
        return float_text(_shortest_float32(float(value))).encode()
    if kind is Kind.DOUBLE:
        return float_text(repr(float(value))).encode()
    if kind in (Kind.INT, Kind.UINT64, Kind.YEAR, Kind.BIT):
        return str(int(value)).encode()
    if is_json(column):
        return json_text(str(value)).encode()
    again = encode(column, value)
    return str(again).encode() if not isinstance(again, str) else again.encode()


def python_piece(column: ColumnType, wire: JsonScalar) -> str:
    raw = python_canonical(column, wire)
    return NULL_PIECE if raw is None else hashlib.md5(raw).hexdigest()  # noqa: S324 - a checksum


def python_row_hash(shard: str, columns: Sequence[ColumnType], wires: Sequence[JsonScalar]) -> str:
    pieces = [hashlib.md5(shard.encode()).hexdigest()]  # noqa: S324
    pieces += [python_piece(c, w) for c, w in zip(columns, wires, strict=True)]
    return hashlib.md5(",".join(pieces).encode()).hexdigest()  # noqa: S324


@dataclass(frozen=True, slots=True)
class ChunkDigest:
    """A chunk's count and order-independent hash (two 64-bit sums)."""

    count: int
    high: int = 0
    low: int = 0

    @classmethod
    def of(cls, count: int, high: object, low: object) -> ChunkDigest:
        """From an engine's sums (any sign, any size: reduced modulo 2^64)."""
        return cls(int(count), int(str(high or 0)) & _MASK, int(str(low or 0)) & _MASK)

    @classmethod
    def of_rows(cls, row_hashes: Sequence[str]) -> ChunkDigest:
        high = sum(int(h[:16], 16) for h in row_hashes)
        low = sum(int(h[16:32], 16) for h in row_hashes)
        return cls.of(len(row_hashes), high, low)

    def text(self) -> str:
        return f"{self.count} rows, {self.high:016x}{self.low:016x}"


# -- SQL builders ---------------------------------------------------------------------------


class _Sql(KindVisitor[SqlOf]):
    """The SQL dialect's pieces every engine's visitor needs."""

    def md5_piece(self, expression: str) -> str:
        return f"COALESCE(MD5({expression}), '{NULL_PIECE}')"

    def literal(self, text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _mysql_float(text: str) -> str:
    """``float_text`` in MariaDB/MySQL SQL, over an expression giving the float's text.

    Each intermediate appears as few times as possible: the server evaluates every copy of
    an expression (a DOUBLE column cost four times the rest of a row when ``whole`` and
    ``fraction`` were spelled out separately)."""
    a = f"TRIM(LEADING '-' FROM {text})"
    mantissa = f"SUBSTRING_INDEX({a}, 'e', 1)"
    exponent = f"CAST(IF(LOCATE('e', {a}) > 0, SUBSTRING_INDEX({a}, 'e', -1), '0') AS SIGNED)"
    digits = f"REPLACE({mantissa}, '.', '')"
    # The digits before the point: the point's position in mantissa + '.', less one.
    whole = f"(LOCATE('.', CONCAT({mantissa}, '.')) - 1)"
    leading = f"(LENGTH({digits}) - LENGTH(TRIM(LEADING '0' FROM {digits})))"
    stripped = f"TRIM(BOTH '0' FROM {digits})"
    power = f"({exponent} + {whole} - {leading})"
    sign = f"IF(LEFT({text}, 1) = '-', '-', '')"
    return f"IF({stripped} = '', '0', CONCAT({sign}, {stripped}, 'e', {power}))"


def _as_char(reference: str) -> str:
    return f"CAST({reference} AS CHAR)"


def _mysql_digits(reference: str) -> str:
    # Through DECIMAL: no ZEROFILL padding, BIGINT UNSIGNED and signed alike.
    return f"CAST(CAST({reference} AS DECIMAL(20,0)) AS CHAR)"


class MySqlCanonical(_Sql):
    """MariaDB/MySQL: the canonical text of a column (session time_zone '+00:00')."""

    def visit_int(self, column: ColumnType) -> SqlOf:
        return _mysql_digits

    def visit_uint64(self, column: ColumnType) -> SqlOf:
        return _mysql_digits

    def visit_decimal(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_float(self, column: ColumnType) -> SqlOf:
        return lambda c: _mysql_float(_as_char(c))

    def visit_double(self, column: ColumnType) -> SqlOf:
        return lambda c: _mysql_float(_as_char(c))

    def visit_date(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_datetime(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_timestamp(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_time(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_year(self, column: ColumnType) -> SqlOf:
        return _mysql_digits

    def visit_bit(self, column: ColumnType) -> SqlOf:
        return lambda c: f"CAST(CAST({c} AS UNSIGNED) AS CHAR)"

    def visit_enum(self, column: ColumnType) -> SqlOf:
        return lambda c: f"CONVERT({c} USING utf8mb4)"

    def visit_set(self, column: ColumnType) -> SqlOf:
        return lambda c: f"CONVERT({c} USING utf8mb4)"

    def visit_text(self, column: ColumnType) -> SqlOf:
        if is_json(column):
            return lambda c: f"JSON_NORMALIZE({c})"
        return lambda c: f"CONVERT({c} USING utf8mb4)"

    def visit_binary(self, column: ColumnType) -> SqlOf:
        return lambda c: c

    def visit_geometry(self, column: ColumnType) -> SqlOf:
        return lambda c: c  # the stored bytes: SRID and WKB, as a SELECT returns them

    def visit_uuid(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_inet4(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_inet6(self, column: ColumnType) -> SqlOf:
        return _as_char


def _pg_float(text: str) -> str:
    """``float_text`` in PostgreSQL SQL (extra_float_digits = 1: shortest round-trip), each
    step spelled once (see ``_mysql_float``)."""
    a = f"ltrim({text}, '-')"
    mantissa = f"split_part({a}, 'e', 1)"
    exponent = f"(CASE WHEN strpos({a}, 'e') > 0 THEN split_part({a}, 'e', 2)::int ELSE 0 END)"
    digits = f"replace({mantissa}, '.', '')"
    whole = f"(strpos({mantissa} || '.', '.') - 1)"
    leading = f"(length({digits}) - length(ltrim({digits}, '0')))"
    stripped = f"btrim({digits}, '0')"
    power = f"({exponent} + {whole} - {leading})"
    sign = f"(CASE WHEN left({text}, 1) = '-' THEN '-' ELSE '' END)"
    return f"(CASE WHEN {stripped} = '' THEN '0' ELSE {sign} || {stripped} || 'e' || {power} END)"


# Zero-part dates in the warehouse: -infinity, or a year after 99999 that encodes year, month
# and day (``mirror.pgtypes``: year 100000 + 13·year + month, day of the year day + 1).
_ZERO_PART_YEARS = 100_000


def _pg_date_part(value: str) -> str:
    encoded = f"(extract(year from {value})::int - {_ZERO_PART_YEARS})"
    zero_part = (
        f"lpad(({encoded} / 13)::text, 4, '0') || '-' || lpad(mod({encoded}, 13)::text, 2, '0')"
        f" || '-' || lpad((extract(doy from {value})::int - 1)::text, 2, '0')"
    )
    return (
        f"(CASE WHEN {value} = '-infinity' THEN '0000-00-00' "
        f"WHEN extract(year from {value}) >= {_ZERO_PART_YEARS} THEN {zero_part} "
        f"ELSE to_char({value}, 'YYYY-MM-DD') END)"
    )


def _pg_fraction(value: str, fsp: int) -> str:
    if fsp <= 0:
        return ""
    return (
        f" || (CASE WHEN {value} = '-infinity' THEN '.{'0' * fsp}' "
        f"ELSE '.' || substr(to_char({value}, 'US'), 1, {fsp}) END)"
    )


def _pg_datetime(value: str, fsp: int) -> str:
    # The usual value in one to_char; the encoded zero-part dates and -infinity apart.
    width = 19 + (fsp + 1 if fsp > 0 else 0)
    usual = f"substr(to_char({value}, 'YYYY-MM-DD HH24:MI:SS.US'), 1, {width})"
    clock = (
        f"(CASE WHEN {value} = '-infinity' THEN '00:00:00' ELSE to_char({value}, 'HH24:MI:SS') END)"
    )
    special = f"({_pg_date_part(value)} || ' ' || {clock}{_pg_fraction(value, fsp)})"
    return (
        f"(CASE WHEN {value} = '-infinity' OR extract(year from {value}) >= {_ZERO_PART_YEARS} "
        f"THEN {special} ELSE {usual} END)"
    )


def _two(number: str) -> str:
    return f"(CASE WHEN {number} < 10 THEN '0' ELSE '' END || {number}::text)"


def _pg_time(value: str, fsp: int) -> str:
    epoch = f"abs(extract(epoch from {value}))"
    hours = f"floor({epoch} / 3600)::bigint"
    minutes = f"floor(mod({epoch}, 3600) / 60)::int"
    seconds = f"floor(mod({epoch}, 60))::int"
    text = (
        f"(CASE WHEN extract(epoch from {value}) < 0 THEN '-' ELSE '' END || {_two(hours)}"
        f" || ':' || {_two(minutes)} || ':' || {_two(seconds)}"
    )
    if fsp > 0:
        micros = f"round(({epoch} - floor({epoch})) * 1000000)::int"
        text += f" || '.' || substr(lpad({micros}::text, 6, '0'), 1, {fsp})"
    return text + ")"


def _pg_text(reference: str) -> str:
    return f"{reference}::text"


class PostgresCanonical(_Sql):
    """PostgreSQL (the warehouse, types by ``mirror.pgtypes``): the canonical text."""

    def visit_int(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_uint64(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_decimal(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_float(self, column: ColumnType) -> SqlOf:
        return lambda c: _pg_float(f"{c}::real::text")

    def visit_double(self, column: ColumnType) -> SqlOf:
        return lambda c: _pg_float(f"{c}::float8::text")

    def visit_date(self, column: ColumnType) -> SqlOf:
        return _pg_date_part

    def visit_datetime(self, column: ColumnType) -> SqlOf:
        return lambda c: _pg_datetime(c, column.fsp)

    def visit_timestamp(self, column: ColumnType) -> SqlOf:
        return lambda c: _pg_datetime(f"({c} AT TIME ZONE 'UTC')", column.fsp)

    def visit_time(self, column: ColumnType) -> SqlOf:
        return lambda c: _pg_time(c, column.fsp)

    def visit_year(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_bit(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_enum(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_set(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_text(self, column: ColumnType) -> SqlOf:
        if is_json(column):
            return lambda c: f"pg_temp.cdc_json_text({c}::jsonb)"
        return _pg_text

    def visit_binary(self, column: ColumnType) -> SqlOf:
        return lambda c: c

    def visit_geometry(self, column: ColumnType) -> SqlOf:
        return lambda c: c

    def visit_uuid(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_inet4(self, column: ColumnType) -> SqlOf:
        return lambda c: f"host({c})"

    def visit_inet6(self, column: ColumnType) -> SqlOf:
        return lambda c: f"host({c})"


# jsonb as MariaDB's JSON_NORMALIZE prints it: keys sorted by their bytes, no whitespace,
# numbers as ``<digit>.<digits>E<exp>`` of the digits as written (``1.0E2``, ``-1.0E-3``);
# created in the session's own temporary schema, so nothing is left in the warehouse.
PG_JSON_FUNCTIONS = (
    "CREATE OR REPLACE FUNCTION pg_temp.cdc_json_number(c text) RETURNS text "
    "LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN c = '0' THEN '0.0E0' ELSE "
    "(CASE WHEN left(c, 1) = '-' THEN '-' ELSE '' END) "
    "|| substr(ltrim(split_part(c, 'e', 1), '-'), 1, 1) || '.' "
    "|| COALESCE(NULLIF(substr(ltrim(split_part(c, 'e', 1), '-'), 2), ''), '0') "
    "|| 'E' || (split_part(c, 'e', 2)::int - 1)::text END $$",
    "CREATE OR REPLACE FUNCTION pg_temp.cdc_json_text(j jsonb) RETURNS text "  # noqa: S608
    "LANGUAGE sql IMMUTABLE AS $$ SELECT CASE jsonb_typeof(j) "
    "WHEN 'object' THEN '{' || COALESCE((SELECT string_agg(to_json(k)::text || ':' "
    "|| pg_temp.cdc_json_text(v), ',' ORDER BY convert_to(k, 'UTF8')) "
    "FROM jsonb_each(j) AS e(k, v)), '') || '}' "
    "WHEN 'array' THEN '[' || COALESCE((SELECT string_agg(pg_temp.cdc_json_text(v), ',' "
    "ORDER BY o) FROM jsonb_array_elements(j) WITH ORDINALITY AS a(v, o)), '') || ']' "
    f"WHEN 'number' THEN pg_temp.cdc_json_number({_pg_float('j::text')}) "
    "ELSE j::text END $$",
)


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine's SQL for the canonical encoding."""

    visitor: _Sql
    quote: Callable[[str], str]

    def text(self, name: str, column: ColumnType) -> str:
        """The canonical text of column ``name`` (SQL; NULL stays NULL)."""
        return visit(column, self.visitor)(self.quote(name))

    def piece(self, name: str | None, column: ColumnType) -> str:
        """``md5(canonical text)`` or ``'n'``; an absent column (``name`` None) is NULL."""
        if name is None:
            return f"'{NULL_PIECE}'"
        return self.visitor.md5_piece(self.text(name, column))

    def row_hash(self, shard: str, pieces: Sequence[str]) -> str:
        """The row's md5 (SQL), ``shard`` an SQL expression of the ``schema.table`` text."""
        return f"MD5(CONCAT_WS(',', MD5({shard}), {', '.join(pieces)}))"


def _backquote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _double_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


MYSQL = Engine(MySqlCanonical(), _backquote)
POSTGRES = Engine(PostgresCanonical(), _double_quote)


def mysql_chunk_sums(row_hash: str) -> str:
    """``count, high sum, low sum`` over rows whose md5 is the SQL column ``row_hash``."""
    return (
        f"COUNT(*), SUM(CAST(CONV(SUBSTRING({row_hash}, 1, 16), 16, 10) AS UNSIGNED)), "
        f"SUM(CAST(CONV(SUBSTRING({row_hash}, 17, 16), 16, 10) AS UNSIGNED))"
    )


def postgres_chunk_sums(row_hash: str) -> str:
    return (
        f"count(*), sum(('x' || substr({row_hash}, 1, 16))::bit(64)::bigint), "
        f"sum(('x' || substr({row_hash}, 17, 16))::bit(64)::bigint)"
    )
