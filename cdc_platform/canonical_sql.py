"""The canonical row encoding's SQL (``validation/canonical.py`` defines the encoding): the
dialect base every engine's visitor extends, ``Engine`` (a column's piece, a row's md5), and
PostgreSQL's dialect, which the warehouse mirror needs too (its tables keep a stored row hash,
``stored_row_hash``), so it lives here, below both components. Pure: builds SQL text.

**PostgreSQL's spelling is immutable**: it reads no session setting, so PostgreSQL can keep
it in a ``GENERATED ALWAYS AS (…) STORED`` column (whose expression must be IMMUTABLE) and
the stored value is the row's canonical hash whoever wrote the row. A date's and a
timestamp's text is built from ``date_part`` and ``time``'s text (``::text`` of a date or a
timestamp and ``to_char`` follow DateStyle and are only STABLE), every number is cast to
text explicitly (``text || integer`` is STABLE), the row's pieces are joined with ``||``
(``concat_ws`` is STABLE). A float's shortest digits follow ``extra_float_digits``, and a
JSON document's normal text needs a loop: those are SQL functions of the product's own
(``pg_functions``), IMMUTABLE and truly so: the float's sets ``extra_float_digits = 1`` for
its call, the JSON's reads nothing but its argument. Their names end with the md5 of their
definition, so a changed definition is a new function (and a new stored expression), never a
silent change of the one existing columns were computed with.
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simple_binlog.type_table import KindVisitor, visit
from simple_binlog.values import ColumnType, Kind

NULL_PIECE = "n"

SqlOf = Callable[[str], str]  # a column's SQL reference → its canonical text (SQL)

# Kinds whose piece is length-prefixed: their text may hold "," or read "n".
PREFIXED_KINDS = frozenset({Kind.TEXT, Kind.ENUM, Kind.SET})


def is_json(column: ColumnType) -> bool:
    return column.kind is Kind.TEXT and column.spec.strip().lower().startswith("json")


def prefixed(text: str) -> str:
    """``<length in characters>:<text>``."""
    return f"{len(text)}:{text}"


class SqlDialect(KindVisitor[SqlOf]):
    """The SQL dialect's pieces every engine's visitor needs."""

    def prefixed(self, text: str, length_of: str | None = None) -> str:
        """``<length in characters>:<text>``; the length read from ``length_of`` (the
        column itself: the same characters, whatever its character set, and not converted
        a second time) or else from ``text`` itself."""
        return f"CONCAT(CHAR_LENGTH({length_of or text}), ':', {text})"

    def as_text(self, expression: str) -> str:
        """An expression as text (MySQL leaves an integer column a number)."""
        return f"CAST({expression} AS CHAR)"

    def literal(self, text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"

    def row_hash(self, pieces: Sequence[str]) -> str:
        """The md5 (SQL) of ``pieces`` (none NULL) joined by ``,``."""
        return f"MD5(CONCAT_WS(',', {', '.join(pieces)}))"

    @abstractmethod
    def readable_double(self, reference: str) -> str:
        """A DOUBLE's readable text (``[-]<digits>e<exp>``, the shortest round-trip digits),
        as a differing row shows it: the piece of a value outside the exact range."""


def exact_range(absolute: str, low: str, high: str) -> str:
    return f"{absolute} >= {low} AND {absolute} < {high}"


# ``double_piece``'s range and scale as SQL number literals (exact in every engine).
LOW_SQL = "0.0009765625"  # 2^-10
HIGH_SQL = "9007199254740992"  # 2^53
SCALE_SQL = "4611686018427387904"  # 2^62

# Below this a double of at least 1 is printed plainly by MariaDB/MySQL (up to 1e15) and
# PostgreSQL (up to 1e15): the engines' common fast path (tested at the edges).
PLAIN_BELOW = "1e14"


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine's SQL for the canonical encoding."""

    visitor: SqlDialect
    quote: Callable[[str], str]

    def text(self, name: str, column: ColumnType) -> str:
        """The canonical text of column ``name`` (SQL; NULL stays NULL)."""
        return visit(column, self.visitor)(self.quote(name))

    def shown(self, name: str, column: ColumnType) -> str:
        """The column as a differing row is shown (SQL): its canonical text as text, the
        bytes themselves for a binary."""
        if column.kind in (Kind.BINARY, Kind.GEOMETRY):
            return self.quote(name)
        if column.kind is Kind.DOUBLE:
            return self.visitor.as_text(self.visitor.readable_double(self.quote(name)))
        return self.visitor.as_text(self.text(name, column))

    def piece(self, name: str | None, column: ColumnType) -> str:
        """The column's piece (SQL): ``'n'`` for NULL, and for an absent column (``name``
        None)."""
        if name is None:
            return f"'{NULL_PIECE}'"
        text = self.text(name, column)
        if column.kind in PREFIXED_KINDS:
            # A JSON document's length is its normalised text's; other texts', the column's.
            text = self.visitor.prefixed(text, None if is_json(column) else self.quote(name))
        return f"COALESCE({text}, '{NULL_PIECE}')"

    def shard_piece(self, shard: str) -> str:
        """The piece of a shard's ``schema.table`` text (an SQL literal)."""
        return self.visitor.literal(prefixed(shard))

    def row_hash(self, shard: str, pieces: Sequence[str]) -> str:
        """The row's md5 (SQL), ``shard`` an SQL expression of the shard's piece."""
        return self.visitor.row_hash([shard, *pieces])


def double_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- PostgreSQL ------------------------------------------------------------------------------


def _pg_float(text: str) -> str:
    """``float_text`` of a printed number ``text`` in PostgreSQL SQL, each step spelled
    once (see ``validation.canonical._mysql_float``)."""
    a = f"ltrim({text}, '-')"
    mantissa = f"split_part({a}, 'e', 1)"
    exponent = f"(CASE WHEN strpos({a}, 'e') > 0 THEN split_part({a}, 'e', 2)::int ELSE 0 END)"
    digits = f"replace({mantissa}, '.', '')"
    whole = f"(strpos({mantissa} || '.', '.') - 1)"
    leading = f"(length({digits}) - length(ltrim({digits}, '0')))"
    stripped = f"btrim({digits}, '0')"
    power = f"({exponent} + {whole} - {leading})"
    sign = f"(CASE WHEN left({text}, 1) = '-' THEN '-' ELSE '' END)"
    return (
        f"(CASE WHEN {stripped} = '' THEN '0' ELSE {sign} || {stripped} || 'e' || "
        f"{power}::text END)"
    )


def _pg_column_float(column: str, absolute: str) -> str:
    """``_mysql_float`` in PostgreSQL: ``absolute`` is printed with the shortest round-trip
    digits (extra_float_digits = 1) as ``D[.DDD]e±XX`` or plainly."""
    e_form = (
        f"replace(split_part({absolute}, 'e', 1), '.', '') || 'e' || "
        f"(split_part({absolute}, 'e', 2)::int + 1)::text"
    )
    fraction = f"ltrim(substr({absolute}, 3), '0')"
    below_one = f"{fraction} || 'e' || (2 + length({fraction}) - length({absolute}))::text"
    plain = (
        f"rtrim(replace({absolute}, '.', ''), '0') || 'e' || "
        f"(strpos({absolute} || '.', '.') - 1)::text"
    )
    return (
        f"(CASE WHEN {column} = 0 THEN '0' ELSE "
        f"(CASE WHEN {column} < 0 THEN '-' ELSE '' END) || "
        f"(CASE WHEN strpos({absolute}, 'e') > 0 THEN {e_form} "
        f"WHEN abs({column}) < 1 THEN {below_one} ELSE {plain} END) END)"
    )


def _pg_readable_double(value: str) -> str:
    absolute = f"abs({value})::text"
    usual = (
        f"(CASE WHEN {value} < 0 THEN '-' ELSE '' END) || "
        f"rtrim(replace({absolute}, '.', ''), '0') || 'e' || "
        f"length(floor(abs({value}))::bigint::text)::text"
    )
    return (
        f"(CASE WHEN abs({value}) >= 1 AND abs({value}) < {PLAIN_BELOW} THEN {usual} "
        f"ELSE {_pg_column_float(value, absolute)} END)"
    )


def _named(stem: str, definition: Callable[[str], str]) -> tuple[str, Callable[[str], str]]:
    """A function's name, ``<stem>_<md5 of its definition>`` (the definition given its own
    name as a placeholder: the JSON one calls itself), and its definition in a schema."""
    digest = hashlib.md5(definition("{self}").encode()).hexdigest()[:12]  # noqa: S324 - a name
    name = f"{stem}_{digest}"
    return name, lambda schema: definition(f"{schema}.{name}")


# The float texts: the shortest round-trip digits, whatever the session's
# extra_float_digits (any value above 0 selects them; the function sets 1 for its call).
_FLOAT4_NAME, _FLOAT4_SQL = _named(
    "cdc_float4_text",
    lambda own: (
        f"CREATE OR REPLACE FUNCTION {own}(v real) RETURNS text LANGUAGE sql IMMUTABLE STRICT "
        "PARALLEL SAFE SET extra_float_digits = 1 AS $$ SELECT "
        f"{_pg_column_float('v', 'abs(v)::text')} $$"
    ),
)
_FLOAT8_NAME, _FLOAT8_SQL = _named(
    "cdc_float8_text",
    lambda own: (
        f"CREATE OR REPLACE FUNCTION {own}(v double precision) RETURNS text LANGUAGE sql "
        "IMMUTABLE STRICT PARALLEL SAFE SET extra_float_digits = 1 AS $$ SELECT "
        f"{_pg_readable_double('v')} $$"
    ),
)
# jsonb as MariaDB's JSON_NORMALIZE prints it: keys sorted by their bytes, no whitespace,
# numbers as ``<digit>.<digits>E<exp>`` of the digits as written (``1.0E2``, ``-1.0E-3``).
# jsonb's numbers are numeric, printed alike in every session.
_JSON_NUMBER_NAME, _JSON_NUMBER_SQL = _named(
    "cdc_json_number",
    lambda own: (
        f"CREATE OR REPLACE FUNCTION {own}(c text) RETURNS text "
        "LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT CASE WHEN c = '0' THEN '0.0E0' "
        "ELSE (CASE WHEN left(c, 1) = '-' THEN '-' ELSE '' END) "
        "|| substr(ltrim(split_part(c, 'e', 1), '-'), 1, 1) || '.' "
        "|| COALESCE(NULLIF(substr(ltrim(split_part(c, 'e', 1), '-'), 2), ''), '0') "
        "|| 'E' || (split_part(c, 'e', 2)::int - 1)::text END $$"
    ),
)


def _json_text_sql(own: str) -> str:
    number = own.rsplit(".", 1)[0] + "." + _JSON_NUMBER_NAME if "." in own else _JSON_NUMBER_NAME
    return (
        f"CREATE OR REPLACE FUNCTION {own}(j jsonb) RETURNS text "  # noqa: S608
        "LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT CASE jsonb_typeof(j) "
        "WHEN 'object' THEN '{' || COALESCE((SELECT string_agg(to_json(k)::text || ':' "
        f"|| {own}(v), ',' ORDER BY convert_to(k, 'UTF8')) "
        "FROM jsonb_each(j) AS e(k, v)), '') || '}' "
        "WHEN 'array' THEN '[' || COALESCE((SELECT string_agg("
        f"{own}(v), ',' ORDER BY o) FROM jsonb_array_elements(j) "
        "WITH ORDINALITY AS a(v, o)), '') || ']' "
        f"WHEN 'number' THEN {number}({_pg_float('j::text')}) "
        "ELSE j::text END $$"
    )


_JSON_TEXT_NAME, _JSON_TEXT_SQL = _named("cdc_json_text", _json_text_sql)


def pg_functions(schema: str) -> list[str]:
    """The statements creating the canonical encoding's functions in ``schema`` (an SQL
    name, quoted as needed: ``pg_temp`` for a session's own). Repeating them is harmless: a
    name is its definition's."""
    return [
        _FLOAT4_SQL(schema),
        _FLOAT8_SQL(schema),
        _JSON_NUMBER_SQL(schema),
        _JSON_TEXT_SQL(schema),
    ]


# Zero-part dates in the warehouse: -infinity, or a year after 99999 that encodes year, month
# and day (``mirror.pgtypes``: year 100000 + 13·year + month, day of the year day + 1).
_ZERO_PART_YEARS = 100_000


def _pg_ymd(value: str) -> str:
    """``YYYY-MM-DD`` of a date or timestamp (years below 10000), from its parts
    (``to_char`` and a date's own text are not IMMUTABLE: DateStyle)."""
    return (
        f"lpad(date_part('year', {value})::int::text, 4, '0') || '-' || "
        f"lpad(date_part('month', {value})::int::text, 2, '0') || '-' || "
        f"lpad(date_part('day', {value})::int::text, 2, '0')"
    )


def _pg_zero_part_date(value: str) -> str:
    encoded = f"(date_part('year', {value})::int - {_ZERO_PART_YEARS})"
    return (
        f"lpad(({encoded} / 13)::text, 4, '0') || '-' || lpad(mod({encoded}, 13)::text, 2, '0')"
        f" || '-' || lpad((date_part('doy', {value})::int - 1)::text, 2, '0')"
    )


def _pg_date_part(value: str) -> str:
    return (
        f"(CASE WHEN {value} = '-infinity' THEN '0000-00-00' "
        f"WHEN {value} >= '{_ZERO_PART_YEARS}-01-01' THEN {_pg_zero_part_date(value)} "
        f"ELSE {_pg_ymd(value)} END)"
    )


def _pg_clock(value: str, fsp: int) -> str:
    """``HH:MM:SS[.f…]`` with exactly ``fsp`` fraction digits, from ``time``'s own text
    (IMMUTABLE, the same in every session; it drops the fraction's trailing zeros)."""
    clock = f"{value}::time::text"
    if fsp <= 0:
        return f"left({clock}, 8)"
    return (
        f"(CASE WHEN length({clock}) = 8 THEN {clock} || '.{'0' * fsp}' "
        f"ELSE rpad({clock}, {9 + fsp}, '0') END)"
    )


def _pg_datetime(value: str, fsp: int) -> str:
    # The encoded zero-part dates and -infinity apart; comparisons, not date_part(): this
    # runs for every value.
    zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp > 0 else "")
    special = f"{_pg_zero_part_date(value)} || ' ' || {_pg_clock(value, fsp)}"
    return (
        f"(CASE WHEN {value} = '-infinity' THEN '{zero}' "
        f"WHEN {value} >= '{_ZERO_PART_YEARS}-01-01' THEN {special} "
        f"ELSE {_pg_ymd(value)} || ' ' || {_pg_clock(value, fsp)} END)"
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


class PostgresCanonical(SqlDialect):
    """PostgreSQL (the warehouse, types by ``mirror.pgtypes``): the canonical text, in
    IMMUTABLE SQL (the module docstring), its functions in schema ``functions``
    (``pg_functions`` creates them)."""

    def __init__(self, functions: str = "pg_temp") -> None:
        self.functions = functions

    def prefixed(self, text: str, length_of: str | None = None) -> str:
        return f"(char_length({length_of or text})::text || ':' || {text})"

    def as_text(self, expression: str) -> str:
        return expression  # every canonical text is text already

    def row_hash(self, pieces: Sequence[str]) -> str:
        joined = " || ',' || ".join(pieces)
        return f"md5({joined})"

    def visit_int(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_uint64(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_decimal(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_float(self, column: ColumnType) -> SqlOf:
        return lambda c: f"{self.functions}.{_FLOAT4_NAME}({c}::real)"

    def readable_double(self, reference: str) -> str:
        return f"{self.functions}.{_FLOAT8_NAME}({reference}::float8)"

    def visit_double(self, column: ColumnType) -> SqlOf:
        def text(c: str) -> str:
            value = f"{c}::float8"
            # float8 → bigint rounds, exact for the integers these are.
            whole = f"trunc({value})"
            exact = (
                f"{whole}::bigint::text || 'p' || "
                f"(({value} - {whole}) * {SCALE_SQL}::float8)::bigint::text"
            )
            in_range = exact_range(f"abs({value})", f"{LOW_SQL}::float8", f"{HIGH_SQL}::float8")
            return f"(CASE WHEN {in_range} THEN {exact} ELSE {self.readable_double(c)} END)"

        return text

    def visit_date(self, column: ColumnType) -> SqlOf:
        return _pg_date_part

    def visit_datetime(self, column: ColumnType) -> SqlOf:
        return lambda c: _pg_datetime(c, min(column.fsp, 6))

    def visit_timestamp(self, column: ColumnType) -> SqlOf:
        # timezone(interval, timestamptz) is IMMUTABLE: the UTC wall clock, whatever
        # TimeZone; an offset, not the zone's name, which each row would look up (-16 %).
        return lambda c: _pg_datetime(f"({c} AT TIME ZONE INTERVAL '00:00')", min(column.fsp, 6))

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
            return lambda c: f"{self.functions}.{_JSON_TEXT_NAME}({c}::jsonb)"
        return _pg_text

    def visit_binary(self, column: ColumnType) -> SqlOf:
        return lambda c: f"encode({c}, 'hex')"

    def visit_geometry(self, column: ColumnType) -> SqlOf:
        return lambda c: f"encode({c}, 'hex')"

    def visit_uuid(self, column: ColumnType) -> SqlOf:
        return _pg_text

    def visit_inet4(self, column: ColumnType) -> SqlOf:
        return lambda c: f"host({c})"

    def visit_inet6(self, column: ColumnType) -> SqlOf:
        return lambda c: f"host({c})"


# -- The warehouse's stored row hash ---------------------------------------------------------

# The generated column of a warehouse table: the first 64 bits of the row's md5 as a bigint,
# kept by PostgreSQL (it cannot be written, and every INSERT and UPDATE computes it).
ROW_HASH_COLUMN = "_cdc_row_hash"
SHARD_COLUMN = "_shard"


def pg_hash_value(row_hash: str) -> str:
    """The first 64 bits of the md5 ``row_hash`` (hex) as a signed bigint (SQL). The cast to
    bit(64) keeps the first 64 of the md5's 128 bits (an explicit cast to bit(n) truncates on
    the right): no substr per row."""
    return f"('x' || {row_hash})::bit(64)::bigint"


def pg_row_hash(
    functions: str, columns: Sequence[tuple[str | None, ColumnType]], shard: str | None = None
) -> str:
    """A warehouse row's md5 (SQL, IMMUTABLE) over ``columns`` in order (a name None: a
    column the table lacks, NULL), after the piece of ``shard`` (SQL; default the row's
    ``_shard`` column)."""
    engine = Engine(PostgresCanonical(functions), double_quote)
    quoted = double_quote(SHARD_COLUMN)
    shard_piece = shard or engine.visitor.prefixed(quoted, quoted)
    return engine.row_hash(shard_piece, [engine.piece(name, column) for name, column in columns])


def stored_row_hash(functions: str, columns: Sequence[tuple[str, ColumnType]]) -> str:
    """The generation expression of ``ROW_HASH_COLUMN`` for a table whose MySQL columns are
    ``columns`` (MySQL's order), its functions in schema ``functions``."""
    return pg_hash_value(pg_row_hash(functions, columns))
