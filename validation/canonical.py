"""The canonical row encoding, defined once per Kind, and the same encoding in every engine.

A column's **canonical text** is the text of its SimpleBinlog wire value (``simple_binlog.values``),
normalised where two engines could spell one value two ways:

==================  ===============================================================
Kind                canonical text (bytes hashed)
==================  ===============================================================
int, year, bit      decimal digits, ``-`` for negatives (no ZEROFILL padding)
uint64              decimal digits (``18446744073709551615``)
decimal(p,s)        digits with exactly s decimals (``12.30``)
float               the shortest round-trip digits of float32, as
                    ``[-]<digits>e<exp>`` meaning 0.<digits> × 10^exp, digits without
                    leading/trailing zeros; zero is ``0`` (so ``1e20``, ``1e+20`` and
                    ``100000000000000000000`` all read ``1e21``)
double              for 2^-10 <= |x| < 2^53 (``double_piece``): ``<w>p<f>``, w the
                    integer part (toward zero) and f the fraction times 2^62, both
                    integers (``-1.25``: ``-1p-1152921504606846976``): exact
                    arithmetic, no decimal printing; else as FLOAT's rule, with
                    float64's shortest digits (``1e21``, ``0``, ``-25e-299``)
date, datetime,     MySQL's text: ``YYYY-MM-DD[ HH:MM:SS[.f…]]`` with exactly fsp
timestamp           fraction digits, TIMESTAMP in UTC; zero-part dates as their text
time                ``[-]HH:MM:SS[.f…]`` (hours up to 838, fsp digits)
enum, set, text     the UTF-8 bytes of the text (SET in definition order)
binary, geometry    the bytes in lower-case hex (BINARY(n): all n, trailing zero bytes
                    too)
uuid, inet4, inet6  MariaDB's text form (``::ffff:1.2.3.4``)
json                the document with keys sorted, no whitespace (``JSON_NORMALIZE``)
==================  ===============================================================

A column's **piece** is its canonical text, or ``n`` for NULL; for text, JSON, ENUM and SET
it is ``<length in characters>:<text>``. A **row** is the md5 of its pieces joined by ``,``
after the shard's (``<length>:<schema.table>``): one md5 per row, as pt-table-checksum does.
A DOUBLE's two forms cannot meet (``p`` in one, ``e`` or ``0`` alone in the other), and
both are exact: within its range a double is a multiple of 2^-62 (2^-10 × 2^-52) below 2^53,
so the fraction times 2^62 is an integer below 2^62, and both parts are computed without
rounding in every engine (truncation, a subtraction of the integer part, a product by a power
of two). Printing a double's shortest decimal digits was most of a row's text in MySQL
(``bench/results/2026-11-26-validation-s12/notes.md``); the readable text stays what a
differing row shows (``Engine.shown``, ``python_canonical``).

The encoding is injective: no piece but a length-prefixed one can hold ``,``, and none reads
``n`` but NULL, so NULL, ``""`` and the text ``'NULL'`` differ, and any differing value
changes the row's bytes (and so its md5, barring a collision). A **chunk** is its row count
and the sum, modulo 2^64, of the first 64 bits of its rows' md5: order-independent, and a
duplicated row does not cancel out as it would under XOR; a differing chunk passes for equal
only if its differing rows' 64-bit values sum alike (about 2^-64 for a change).

Each engine computes it in its own SQL (``MySqlCanonical``, ``PostgresCanonical``: one
``KindVisitor`` each, one method per Kind returning the SQL text of the canonical text of a
column, each kept to the fewest function calls: it runs for every value of every chunk;
PostgreSQL's, IMMUTABLE, is in ``cdc_platform.canonical_sql`` with the dialects' shared part,
because the warehouse mirror's stored row hash is made of it too);
Redis has no engine, so ``python_pieces`` computes the same pieces from the wire values,
which are the canonical text already for most kinds (``simple_binlog.values``).
``tests/integration/validation/test_canonical_engines.py`` checks, for every type of
``REPRESENTATIVE_TYPES`` and for float and double values one unit in the last place apart,
that MySQL's, PostgreSQL's and Python's pieces and row hashes of the same stored values are
equal. Pure: builds SQL text, runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The SQL dialects' shared part and PostgreSQL's dialect live in cdc_platform: the warehouse
# mirror keeps a stored row hash in PostgreSQL's spelling (``stored_row_hash``).
from cdc_platform.canonical_sql import (
    HIGH_SQL,
    LOW_SQL,
    PLAIN_BELOW,
    PREFIXED_KINDS,
    SCALE_SQL,
    SqlDialect,
    double_quote,
    exact_range,
    pg_functions,
    pg_hash_value,
)
from cdc_platform.canonical_sql import NULL_PIECE as NULL_PIECE  # noqa: PLC0414 - re-exported
from cdc_platform.canonical_sql import Engine as Engine  # noqa: PLC0414 - re-exported
from cdc_platform.canonical_sql import PostgresCanonical as PostgresCanonical  # noqa: PLC0414 - re-exported
from cdc_platform.canonical_sql import SqlOf as SqlOf  # noqa: PLC0414 - re-exported
from cdc_platform.canonical_sql import is_json as is_json  # noqa: PLC0414 - re-exported
from cdc_platform.canonical_sql import prefixed as prefixed  # noqa: PLC0414 - re-exported
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode, encode

_MASK = (1 << 64) - 1
# The shared names under this module's older private names (the SQL dialects and the Redis
# and Spark hashers use them).
_HIGH_SQL = HIGH_SQL
_LOW_SQL = LOW_SQL
_PLAIN_BELOW = PLAIN_BELOW
_PREFIXED_KINDS = PREFIXED_KINDS
_SCALE_SQL = SCALE_SQL
_Sql = SqlDialect
_exact_range = exact_range


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


def double_text(value: float) -> str:
    """``float_text(repr(value))``, reading ``repr``'s two forms directly (``D[.DDD]e±XX``
    or plain, ``.0`` for a whole number): the one float step of a Redis row."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    text = repr(abs(value))
    mantissa, e, exponent = text.partition("e")
    if e:
        return f"{sign}{mantissa.replace('.', '')}e{int(exponent) + 1}"
    whole, _, fraction = text.partition(".")
    if whole == "0":
        digits = fraction.lstrip("0")
        return f"{sign}{digits}e{len(digits) - len(fraction)}"
    return f"{sign}{(whole + fraction).rstrip('0')}e{len(whole)}"


# A DOUBLE of magnitude in [2^-10, 2^53) has the piece ``<integer part>p<fraction × 2^62>``
# (see the module docstring): every engine's SQL spells these three numbers.
DOUBLE_EXACT_LOW = 2.0**-10
DOUBLE_EXACT_HIGH = 2.0**53
_FRACTION_SCALE = 2.0**62


def double_piece(value: float) -> str:
    """A DOUBLE's piece: ``<w>p<f>`` in the exact range, ``double_text`` outside it."""
    if DOUBLE_EXACT_LOW <= abs(value) < DOUBLE_EXACT_HIGH:
        whole = int(value)  # toward zero; exact below 2^53, and so is the subtraction
        return f"{whole}p{int((value - whole) * _FRACTION_SCALE)}"
    return double_text(value)


def _shortest_float32(value: float) -> str:
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        try:
            again = struct.unpack("<f", struct.pack("<f", float(text)))[0]
        except OverflowError:  # near FLT_MAX a short text rounds past float32's range
            continue
        if again == value:
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


# Kinds whose wire value is a string that is already the canonical text (``encode`` writes
# it so): taken as it is, a value in any other spelling is a different value.
_TEXT_WIRE_KINDS = frozenset(
    {
        Kind.UINT64,
        Kind.DECIMAL,
        Kind.DATE,
        Kind.DATETIME,
        Kind.TIMESTAMP,
        Kind.TIME,
        Kind.UUID,
        Kind.INET4,
        Kind.INET6,
    }
)

PieceOf = Callable[[JsonScalar], str]  # a non-NULL wire value → its piece


def piece_of(column: ColumnType, name: str = "?") -> PieceOf:
    """The piece of a column's non-NULL wire value, chosen once per column: the common kinds
    without decoding (the wire text or the int), the others through ``python_canonical``."""
    kind = column.kind

    def checked(wire: JsonScalar) -> JsonScalar:
        decode(column, wire, name)  # raises ContractError for a malformed value, naming it
        return wire

    if kind in (Kind.INT, Kind.YEAR, Kind.BIT):
        return lambda w: str(w) if type(w) is int else str(checked(w))
    if kind in _TEXT_WIRE_KINDS:
        return lambda w: w if type(w) is str else str(checked(w))
    if kind is Kind.DOUBLE:
        return lambda w: double_piece(w if type(w) is float else float(decode(column, w, name)))
    if kind in (Kind.BINARY, Kind.GEOMETRY):
        return lambda w: bytes(decode(column, w, name)).hex()
    if kind in _PREFIXED_KINDS and not is_json(column):
        return lambda w: prefixed(w) if type(w) is str else prefixed(str(checked(w)))

    def general(wire: JsonScalar) -> str:
        raw = python_canonical(column, wire)
        assert raw is not None
        return prefixed(raw.decode()) if kind in _PREFIXED_KINDS else raw.decode()

    return general


def python_piece(column: ColumnType, wire: JsonScalar) -> str:
    return NULL_PIECE if wire is None else piece_of(column)(wire)


class RowHasher:
    """The row hash of wire rows of one column list, the per-column work chosen once (a
    wire text that is the canonical text already is taken as it is, with no call)."""

    def __init__(self, names: Sequence[str], columns: Sequence[ColumnType]) -> None:
        self._checked = [
            (name, piece_of(column, name)) for name, column in zip(names, columns, strict=True)
        ]
        self._pieces = [
            (name, None if column.kind in _TEXT_WIRE_KINDS else piece)
            for (name, piece), column in zip(self._checked, columns, strict=True)
        ]

    def text(self, shard: str, row: Mapping[str, JsonScalar]) -> bytes:
        try:
            # One comprehension, no call for a text taken as it is: this runs for every row.
            pieces: list[Any] = [
                NULL_PIECE
                if (wire := row.get(name)) is None
                else (wire if piece is None else piece(wire))
                for name, piece in self._pieces
            ]
            body = ",".join(pieces)  # a wire value that is no text raises TypeError
        except TypeError:
            # A text-kind wire value that is no text: the checked pieces say which.
            body = ",".join(
                NULL_PIECE if (wire := row.get(name)) is None else piece(wire)
                for name, piece in self._checked
            )
        return f"{len(shard)}:{shard},{body}".encode()

    def digest(self, shard: str, row: Mapping[str, JsonScalar]) -> bytes:
        return hashlib.md5(self.text(shard, row)).digest()  # noqa: S324 - a checksum

    def hexdigest(self, shard: str, row: Mapping[str, JsonScalar]) -> str:
        return hashlib.md5(self.text(shard, row)).hexdigest()  # noqa: S324 - a checksum


def python_row_hash(shard: str, columns: Sequence[ColumnType], wires: Sequence[JsonScalar]) -> str:
    names = [str(i) for i in range(len(columns))]
    return RowHasher(names, columns).hexdigest(shard, dict(zip(names, wires, strict=True)))


@dataclass(frozen=True, slots=True)
class ChunkDigest:
    """A chunk's count and order-independent hash: the sum, modulo 2^64, of the first 64
    bits of its rows' md5 (one sum: each engine reads each row's md5 once, with no
    materialised subquery to reuse it in a second sum)."""

    count: int
    total: int = 0

    @classmethod
    def of(cls, count: int, total: object) -> ChunkDigest:
        """From an engine's sum (any sign, any size: reduced modulo 2^64)."""
        return cls(int(count), int(str(total or 0)) & _MASK)

    @classmethod
    def of_rows(cls, row_hashes: Sequence[str]) -> ChunkDigest:
        return cls.of(len(row_hashes), sum(int(h[:16], 16) for h in row_hashes))

    @classmethod
    def of_digests(cls, digests: Sequence[bytes]) -> ChunkDigest:
        """From rows' md5 digests (16 bytes each)."""
        return cls.of(len(digests), sum(int.from_bytes(d[:8], "big") for d in digests))

    def text(self) -> str:
        return f"{self.count} rows, {self.total:016x}"


# -- SQL builders ---------------------------------------------------------------------------


def _mysql_float(column: str, absolute: str) -> str:
    """``float_text`` in MariaDB/MySQL SQL, given ``absolute``, the text of the column's
    absolute value, which the server prints with the shortest round-trip digits either as
    ``D[.DDD]e[-]X`` (one digit before the point) or plainly (``0.000015``, ``14285.7``).
    Sign and zero are read from the number; each branch reads the text as few times as it
    can (every copy is evaluated: the general form of ``float_text`` cost a DOUBLE column
    fifteen times a plain one)."""
    e_form = (
        f"CONCAT(REPLACE(SUBSTRING_INDEX({absolute}, 'e', 1), '.', ''), 'e', "
        f"SUBSTRING_INDEX({absolute}, 'e', -1) + 1)"
    )
    fraction = f"TRIM(LEADING '0' FROM SUBSTRING({absolute}, 3))"
    below_one = f"CONCAT({fraction}, 'e', 2 + LENGTH({fraction}) - LENGTH({absolute}))"
    plain = (
        f"CONCAT(TRIM(TRAILING '0' FROM REPLACE({absolute}, '.', '')), 'e', "
        f"LOCATE('.', CONCAT({absolute}, '.')) - 1)"
    )
    return (
        f"IF({column} = 0, '0', CONCAT(IF({column} < 0, '-', ''), "
        f"IF(LOCATE('e', {absolute}) > 0, {e_form}, "
        f"IF(ABS({column}) < 1, {below_one}, {plain}))))"
    )


def _as_char(reference: str) -> str:
    return f"CAST({reference} AS CHAR)"


def _own_text(reference: str) -> str:
    # The column as it is: COALESCE and CONCAT_WS print it with the server's own text, the
    # same as CAST(… AS CHAR) (DECIMAL's scale digits, DATETIME's fsp digits, TIMESTAMP in
    # the session's time zone), one call per value fewer (tested in every type's text).
    return reference


def _mysql_digits(reference: str) -> str:
    # Through DECIMAL: no ZEROFILL padding (and YEAR's four digits: 0 reads 0).
    return f"CAST(CAST({reference} AS DECIMAL(20,0)) AS CHAR)"


def _mysql_int(column: ColumnType) -> SqlOf:
    # An integer's own text is its digits (CONCAT_WS converts it), but for ZEROFILL.
    return _mysql_digits if "zerofill" in column.spec.lower() else (lambda c: c)


class MySqlCanonical(_Sql):
    """MariaDB/MySQL: the canonical text of a column (session time_zone '+00:00')."""

    def visit_int(self, column: ColumnType) -> SqlOf:
        return _mysql_int(column)

    def visit_uint64(self, column: ColumnType) -> SqlOf:
        return _mysql_int(column)

    def visit_decimal(self, column: ColumnType) -> SqlOf:
        return _own_text

    def visit_float(self, column: ColumnType) -> SqlOf:
        # Not ABS(c): it would be a DOUBLE, printed with a double's digits.
        return lambda c: _mysql_float(c, f"TRIM(LEADING '-' FROM CAST({c} AS CHAR))")

    def readable_double(self, reference: str) -> str:
        c = reference
        absolute = f"CAST(ABS({c}) AS CHAR)"
        # 1 <= |c| < 1e14 (most values): printed plainly, the integer digits those of
        # FLOOR (a shortest round-trip text never rounds across an integer there), so
        # the text is made once; the rest by the general rule.
        usual = (
            f"CONCAT(IF({c} < 0, '-', ''), TRIM(TRAILING '0' FROM REPLACE({absolute}, '.', "
            f"'')), 'e', LENGTH(CAST(FLOOR(ABS({c})) AS UNSIGNED)))"
        )
        return (
            f"IF(ABS({c}) >= 1 AND ABS({c}) < {_PLAIN_BELOW}, {usual}, {_mysql_float(c, absolute)})"
        )

    def visit_double(self, column: ColumnType) -> SqlOf:
        def text(c: str) -> str:
            # TRUNCATE(c, 0) is c toward zero, exact (a DOUBLE, printed through SIGNED).
            whole = f"TRUNCATE({c}, 0)"
            exact = (
                f"CONCAT(CAST({whole} AS SIGNED), 'p', "
                f"CAST(({c} - {whole}) * {_SCALE_SQL}e0 AS SIGNED))"
            )
            in_range = _exact_range(f"ABS({c})", f"{_LOW_SQL}e0", f"{_HIGH_SQL}e0")
            return f"IF({in_range}, {exact}, {self.readable_double(c)})"

        return text

    def visit_date(self, column: ColumnType) -> SqlOf:
        return _own_text

    def visit_datetime(self, column: ColumnType) -> SqlOf:
        return _own_text

    def visit_timestamp(self, column: ColumnType) -> SqlOf:
        return _own_text

    def visit_time(self, column: ColumnType) -> SqlOf:
        return _own_text

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
        return lambda c: f"LOWER(HEX({c}))"

    def visit_geometry(self, column: ColumnType) -> SqlOf:
        # The stored bytes: SRID and WKB, as a SELECT returns them.
        return lambda c: f"LOWER(HEX({c}))"

    # MariaDB's UUID and INET types are cast: COALESCE would read its 'n' as one of them
    # (an invalid one: NULL).
    def visit_uuid(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_inet4(self, column: ColumnType) -> SqlOf:
        return _as_char

    def visit_inet6(self, column: ColumnType) -> SqlOf:
        return _as_char


def _backquote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


MYSQL = Engine(MySqlCanonical(), _backquote)
POSTGRES = Engine(PostgresCanonical(), double_quote)


def mysql_hash_value(row_hash: str) -> str:
    """The first 64 bits of the md5 ``row_hash`` (hex) as an unsigned number (SQL)."""
    return f"CAST(CONV(LEFT({row_hash}, 16), 16, 10) AS UNSIGNED)"


def mysql_chunk_sums(row_hash: str) -> str:
    """``count, sum`` (``ChunkDigest``) over rows whose md5 is the SQL expression
    ``row_hash`` (read once per row)."""
    return f"COUNT(*), SUM({mysql_hash_value(row_hash)})"


def postgres_chunk_sums(row_hash: str) -> str:
    """``count, sum`` over rows whose md5 is the SQL expression ``row_hash``."""
    return f"count(*), sum({pg_hash_value(row_hash)})"


# The canonical encoding's functions in the session's own temporary schema (the session
# dialect ``POSTGRES`` calls them there), so a validation leaves nothing in the warehouse.
PG_JSON_FUNCTIONS = tuple(pg_functions("pg_temp"))
