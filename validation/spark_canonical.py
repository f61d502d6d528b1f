"""The canonical row encoding (``validation.canonical``) in Spark SQL, over the snapshot's
column types (merge's type map, docs/merge.md): ``SPARK``, an ``Engine`` like ``MYSQL`` and
``POSTGRES``, so a lake table is hashed in Spark and only counts and sums leave it.

What differs from the SQL engines:

* **Floats.** Spark prints a DOUBLE with Java's ``Double.toString``, which before JDK 19
  (the stack runs 17) is not always the shortest round-trip text. So the text is not taken
  from a cast: the value is printed with 15, 16 and 17 significant digits
  (``format_string('%.14e')`` …) and the first that reads back as the same value is used; the
  shortest text of a double with ``k <= 15`` digits is the 15-digit rounding with its
  trailing zeros dropped, so this is Python's ``repr`` (a FLOAT: 1 to 9 digits, read back as a
  float32). Then ``float_text``'s normalisation, as in the other engines.
  A DOUBLE in ``double_piece``'s exact range is not printed at all: its piece is two
  integers (``<w>p<f>``) from a truncation and a product by 2^62, as in every engine; the
  digits above are a value's outside that range and what a differing row shows.
* **Zero-part dates** are stored as years after 99999 (merge's encoding, the warehouse's):
  decoded back to ``YYYY-MM-DD`` text like ``PostgresCanonical`` does.
* **JSON** has no normaliser in Spark SQL: ``cdc_json_text``, a Python UDF running
  ``canonical.json_text``, registered by ``register_functions`` (only a table with a JSON
  column calls it).
* String literals escape with a backslash (two quotes in Spark are two literals).

The session must run in UTC (``cdc_platform.spark`` sets ``spark.sql.session.timeZone``).
Pure: builds SQL text, runs nothing (``register_functions`` registers the UDF).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simple_binlog.values import ColumnType
from validation.canonical import (
    _HIGH_SQL,
    _LOW_SQL,
    _SCALE_SQL,
    Engine,
    SqlOf,
    _Sql,
    is_json,
    json_text,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JSON_FUNCTION = "cdc_json_text"
_SMALLEST_NORMAL = "2.2250738585072014E-308"
_ZERO_PART_YEARS = 100_000  # merge.types / mirror.pgtypes: year 100000 + 13·year + month


def _text(reference: str) -> str:
    return f"CAST({reference} AS STRING)"


def spark_float_text(text: str) -> str:
    """``canonical.float_text`` in Spark SQL, of a text ``[-]d.ddd[e±x]`` or plain."""
    lowered = f"lower({text})"
    absolute = f"TRIM(LEADING '-' FROM {lowered})"
    mantissa = f"substring_index({absolute}, 'e', 1)"
    exponent = (
        f"(CASE WHEN instr({absolute}, 'e') > 0 "
        f"THEN CAST(substring_index({absolute}, 'e', -1) AS INT) ELSE 0 END)"
    )
    digits = f"replace({mantissa}, '.', '')"
    whole = f"(instr(concat({mantissa}, '.'), '.') - 1)"
    leading = f"(length({digits}) - length(TRIM(LEADING '0' FROM {digits})))"
    stripped = f"TRIM(BOTH '0' FROM {digits})"
    power = f"({exponent} + {whole} - {leading})"
    sign = f"(CASE WHEN left({lowered}, 1) = '-' THEN '-' ELSE '' END)"
    return (
        f"(CASE WHEN {stripped} = '' THEN '0' "
        f"ELSE concat({sign}, {stripped}, 'e', CAST({power} AS STRING)) END)"
    )


def _shortest(column: str, cast_to: str, precisions: range) -> str:
    """The first of ``format_string('%.{p}e')`` for ``p`` in ``precisions`` that reads back
    as the column's value (the last one always does)."""
    value = f"CAST({column} AS DOUBLE)"
    texts = [f"format_string('%.{p}e', {value})" for p in precisions]
    branches = " ".join(
        f"WHEN try_cast({text} AS {cast_to}) = {column} THEN {text}" for text in texts[:-1]
    )
    return f"(CASE {branches} ELSE {texts[-1]} END)"


def _float32(column: str) -> str:
    """``float_text`` of a FLOAT: the shortest of 1 to 9 significant digits that reads back
    as the same float32, rounded half to even as Python's ``%g`` is (Java's ``%e`` rounds
    half up). A tie at ``p`` digits has an exact value of ``p + 1`` digits ending in 5, which
    the widened double's own text shows (``digits``); then its first ``p`` digits are kept
    when the last of them is even."""
    value = f"CAST({column} AS DOUBLE)"
    digits = (
        f"TRIM(BOTH '0' FROM regexp_replace(substring_index(lower(CAST({value} AS STRING)), "
        "'e', 1), '[-.]', ''))"
    )
    sign = f"(CASE WHEN {column} < 0 THEN '-' ELSE '' END)"
    branches = []
    for p in range(1, 10):
        text = spark_float_text(f"format_string('%.{p - 1}e', {value})")
        even_tie = (
            f"length({digits}) = {p + 1} AND right({digits}, 1) = '5' "
            f"AND substr({digits}, {p}, 1) IN ('0', '2', '4', '6', '8')"
        )
        kept = (
            f"concat({sign}, TRIM(TRAILING '0' FROM left({digits}, {p})), 'e', "
            f"substring_index({text}, 'e', -1))"
        )
        chosen = f"(CASE WHEN {even_tie} THEN {kept} ELSE {text} END)"
        check = f"format_string('%.{p - 1}e', {value})"
        if p < 9:
            branches.append(f"WHEN try_cast({check} AS FLOAT) = {column} THEN {chosen}")
        else:
            branches.append(f"ELSE {chosen}")
    return f"(CASE {' '.join(branches)} END)"


def _zero_part_date(value: str) -> str:
    encoded = f"(year({value}) - {_ZERO_PART_YEARS})"
    return (
        f"concat(lpad(CAST({encoded} DIV 13 AS STRING), 4, '0'), '-', "
        f"lpad(CAST(pmod({encoded}, 13) AS STRING), 2, '0'), '-', "
        f"lpad(CAST(dayofyear({value}) - 1 AS STRING), 2, '0'))"
    )


def _datetime(value: str, fsp: int) -> str:
    fraction = f", '.', substr(date_format({value}, 'SSSSSS'), 1, {fsp})" if fsp > 0 else ""
    usual = f"concat(date_format({value}, 'yyyy-MM-dd HH:mm:ss'){fraction})"
    special = f"concat({_zero_part_date(value)}, ' ', date_format({value}, 'HH:mm:ss'){fraction})"
    return f"(CASE WHEN year({value}) >= {_ZERO_PART_YEARS} THEN {special} ELSE {usual} END)"


def _date(value: str) -> str:
    return (
        f"(CASE WHEN year({value}) >= {_ZERO_PART_YEARS} THEN {_zero_part_date(value)} "
        f"ELSE date_format({value}, 'yyyy-MM-dd') END)"
    )


def _as_is(reference: str) -> str:
    return reference  # a STRING column holding the wire text, which is the canonical text


class SparkCanonical(_Sql):
    """Spark SQL over the snapshot's types (``merge.types``): the canonical text."""

    def prefixed(self, text: str, length_of: str | None = None) -> str:
        # ANSI mode: no implicit INT → STRING in concat.
        return f"concat(CAST(char_length({length_of or text}) AS STRING), ':', {text})"

    def as_text(self, expression: str) -> str:
        return expression  # every canonical text is a STRING already

    def literal(self, text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    def visit_int(self, column: ColumnType) -> SqlOf:
        return _text

    def visit_uint64(self, column: ColumnType) -> SqlOf:
        return _text  # DECIMAL(20,0): its digits

    def visit_decimal(self, column: ColumnType) -> SqlOf:
        # DECIMAL(p,s) prints plainly with s decimals; p > 38 is a STRING of the wire text.
        return _text

    def visit_float(self, column: ColumnType) -> SqlOf:
        return lambda c: (
            f"(CASE WHEN {c} IS NULL THEN NULL WHEN {c} = 0 THEN '0' ELSE {_float32(c)} END)"
        )

    def readable_double(self, reference: str) -> str:
        c = reference
        return (
            f"(CASE WHEN {c} IS NULL THEN NULL WHEN {c} = 0 THEN '0' "
            # Subnormals have fewer digits of precision: every length is tried.
            f"WHEN abs({c}) < {_SMALLEST_NORMAL} "
            f"THEN {spark_float_text(_shortest(c, 'DOUBLE', range(17)))} "
            f"ELSE {spark_float_text(_shortest(c, 'DOUBLE', range(14, 17)))} END)"
        )

    def visit_double(self, column: ColumnType) -> SqlOf:
        def text(c: str) -> str:
            # CAST(… AS BIGINT) truncates toward zero; exact for the integers these are.
            whole = f"CAST({c} AS BIGINT)"
            fraction = f"({c} - CAST({whole} AS DOUBLE)) * {_SCALE_SQL}D"
            exact = (
                f"concat(CAST({whole} AS STRING), 'p', CAST(CAST({fraction} AS BIGINT) AS STRING))"
            )
            return (
                f"(CASE WHEN abs({c}) >= {_LOW_SQL}D AND abs({c}) < {_HIGH_SQL}D THEN {exact} "
                f"ELSE {self.readable_double(c)} END)"
            )

        return text

    def visit_date(self, column: ColumnType) -> SqlOf:
        return _date

    def visit_datetime(self, column: ColumnType) -> SqlOf:
        return lambda c: _datetime(c, column.fsp)

    def visit_timestamp(self, column: ColumnType) -> SqlOf:
        return lambda c: _datetime(c, column.fsp)  # stored in UTC, read in a UTC session

    def visit_time(self, column: ColumnType) -> SqlOf:
        return _as_is  # STRING: MySQL's text, as on the wire

    def visit_year(self, column: ColumnType) -> SqlOf:
        return _text

    def visit_bit(self, column: ColumnType) -> SqlOf:
        return _text

    def visit_enum(self, column: ColumnType) -> SqlOf:
        return _as_is

    def visit_set(self, column: ColumnType) -> SqlOf:
        return _as_is

    def visit_text(self, column: ColumnType) -> SqlOf:
        if is_json(column):
            return lambda c: f"{JSON_FUNCTION}({c})"
        return _as_is

    def visit_binary(self, column: ColumnType) -> SqlOf:
        return lambda c: f"lower(hex({c}))"

    def visit_geometry(self, column: ColumnType) -> SqlOf:
        return lambda c: f"lower(hex({c}))"

    def visit_uuid(self, column: ColumnType) -> SqlOf:
        return _as_is

    def visit_inet4(self, column: ColumnType) -> SqlOf:
        return _as_is

    def visit_inet6(self, column: ColumnType) -> SqlOf:
        return _as_is


def _backquote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


SPARK = Engine(SparkCanonical(), _backquote)


def spark_chunk_sums(row_hash: str) -> str:
    """``count, sum`` (``ChunkDigest``) over rows whose md5 is the SQL column ``row_hash``
    (exact: a DECIMAL sum, reduced modulo 2^64 by ``ChunkDigest.of``)."""
    return f"count(*), sum(CAST(conv(substr({row_hash}, 1, 16), 16, 10) AS DECIMAL(20,0)))"


def _json_or_none(text: str | None) -> str | None:
    return None if text is None else json_text(text)


def register_functions(spark: SparkSession) -> None:
    """``cdc_json_text`` (the JSON normaliser) in ``spark``'s session."""
    spark.udf.register(JSON_FUNCTION, _json_or_none, "string")
