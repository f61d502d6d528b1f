"""What a MySQL column type change asks of a warehouse column (pure logic, no server).

The warehouse applier knows each column's PostgreSQL type (``format_type`` of the catalog)
and the MySQL type it was made for (the column's comment). When a batch carries another
MySQL type for the column, ``decide`` answers with one of:

* ``Alter``: change the column to a type that holds every value it holds now *and* every
  value of the new MySQL type (``ALTER COLUMN … TYPE … USING col::type``, exact for the
  conversions chosen here: a wider integer, a numeric with no fewer integer and fraction
  digits, real → double, date → timestamp, a wider fraction of seconds, numbers and jsonb →
  text);
* ``Keep``: the column already holds every value of the new type (a narrowing, or a MySQL
  change PostgreSQL does not see such as a longer VARCHAR or a new ENUM member, both text);
* ``Stop``: no PostgreSQL type holds both without rounding or re-interpreting values (e.g.
  DECIMAL → DOUBLE, DATETIME → TIMESTAMP, INT → DATE): the table is stopped.

The answer is the smallest type holding both (``holding_both``); it is ``Keep`` when that is
the column's type, ``Alter`` when PostgreSQL converts the column's values to it exactly.
The table of these decisions is in docs/warehouse-adapters.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Integer types: their decimal digits, and the most digits every value of which they hold.
_INTEGERS = {"smallint": (5, 4), "integer": (10, 9), "bigint": (19, 18)}
_FLOATS = ("real", "double precision")
# Integer types each float holds exactly (a 24-bit and a 53-bit significand).
_EXACT_IN_FLOAT = {"real": ("smallint",), "double precision": ("smallint", "integer")}
_TEXT_HOLDS = ("smallint", "integer", "bigint", "numeric", "real", "double precision", "jsonb")
_TIMESTAMP = re.compile(r"^timestamp(?:\((\d+)\))?(?: (with|without) time zone)?$")
_TIMESTAMPTZ = re.compile(r"^timestamptz(?:\((\d+)\))?$")
_NUMERIC = re.compile(r"^numeric(?:\((\d+)(?:,\s*(\d+))?\))?$")
_UNCONSTRAINED_NUMERIC = 1000  # PostgreSQL's largest declared precision


@dataclass(frozen=True, slots=True)
class PgType:
    """A PostgreSQL column type as the mirror makes them: ``name`` is ``numeric``,
    ``timestamp``, ``timestamptz`` or the type's own name; ``precision`` and ``scale`` are a
    numeric's, ``precision`` a timestamp's fraction digits."""

    name: str
    precision: int | None = None
    scale: int | None = None

    def sql(self) -> str:
        if self.name == "numeric":
            return f"numeric({self.precision},{self.scale})"
        if self.name in ("timestamp", "timestamptz"):
            return f"{self.name}({self.precision})"
        return self.name

    @property
    def integer_digits(self) -> int:
        """Digits before the point a value of this exact type may have."""
        if self.name in _INTEGERS:
            return _INTEGERS[self.name][0]
        assert self.precision is not None and self.scale is not None
        return self.precision - self.scale


def parse_pg_type(text: str) -> PgType:
    """Both spellings: ``mirror.pgtypes.pg_type``'s (``timestamptz(6)``, ``numeric(20)``) and
    the catalog's ``format_type`` (``timestamp(6) with time zone``, ``numeric(20,0)``)."""
    spelled = " ".join(text.lower().split())
    if numeric := _NUMERIC.match(spelled):
        if numeric.group(1) is None:
            return PgType("numeric", _UNCONSTRAINED_NUMERIC, _UNCONSTRAINED_NUMERIC // 2)
        return PgType("numeric", int(numeric.group(1)), int(numeric.group(2) or 0))
    if stamp := _TIMESTAMP.match(spelled):
        name = "timestamptz" if stamp.group(2) == "with" else "timestamp"
        return PgType(name, int(stamp.group(1) or 6))
    if stamp := _TIMESTAMPTZ.match(spelled):
        return PgType("timestamptz", int(stamp.group(1) or 6))
    return PgType(spelled)


def holding_both(current: PgType, wanted: PgType) -> PgType | None:
    """The smallest type the mirror makes that holds every value of both, if there is one."""
    if current == wanted:
        return current
    pair = {current.name, wanted.name}
    if pair <= {*_INTEGERS, "numeric"}:
        return _exact_holding_both(current, wanted)
    if pair <= set(_FLOATS):
        return PgType("double precision")
    if "text" in pair and pair - {"text"} <= set(_TEXT_HOLDS):
        return PgType("text")
    return _float_holding_integer(current, wanted) or _time_holding_both(current, wanted)


def _exact_holding_both(current: PgType, wanted: PgType) -> PgType:
    if current.name in _INTEGERS and wanted.name in _INTEGERS:
        return max(current, wanted, key=lambda t: _INTEGERS[t.name][0])
    for integer, other in ((current, wanted), (wanted, current)):
        if integer.name in _INTEGERS and other.name == "numeric":
            assert other.precision is not None
            if other.scale == 0 and other.precision <= _INTEGERS[integer.name][1]:
                return integer
    scale = max(current.scale or 0, wanted.scale or 0)
    digits = max(current.integer_digits, wanted.integer_digits)
    return PgType("numeric", min(digits + scale, _UNCONSTRAINED_NUMERIC), scale)


def _float_holding_integer(current: PgType, wanted: PgType) -> PgType | None:
    for floating, integer in ((current, wanted), (wanted, current)):
        if integer.name in _EXACT_IN_FLOAT.get(floating.name, ()):
            return floating
    return None


def _time_holding_both(current: PgType, wanted: PgType) -> PgType | None:
    """date → timestamp(n) and a wider fraction of seconds; never across time zones."""
    pair = {current.name, wanted.name}
    if not (pair <= {"date", "timestamp"} or pair == {"timestamptz"}):
        return None
    fraction = max(t.precision for t in (current, wanted) if t.precision is not None)
    return PgType("timestamp" if "timestamp" in pair else "timestamptz", fraction)


@dataclass(frozen=True, slots=True)
class Alter:
    to: PgType


@dataclass(frozen=True, slots=True)
class Keep:
    narrower: bool  # the new MySQL type maps to a narrower PostgreSQL type than the column's


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str


Decision = Alter | Keep | Stop


def decide(current_sql: str, wanted_sql: str) -> Decision:
    """What to do with a column of PostgreSQL type ``current_sql`` whose MySQL type now maps
    to ``wanted_sql``."""
    current, wanted = parse_pg_type(current_sql), parse_pg_type(wanted_sql)
    both = holding_both(current, wanted)
    if both is None:
        return Stop(
            f"PostgreSQL has no type holding both its {current.sql()} values and "
            f"{wanted.sql()} values without rounding or re-reading them"
        )
    if both == current:
        return Keep(narrower=wanted != current)
    return Alter(both)
