"""The type table: every Kind is handled by every mapping, and the docstring table is true.

A visitor (``simple_binlog.type_table.KindVisitor``) has one abstract method per Kind, so a
mapping that forgets a Kind cannot be instantiated; these tests check that the abstract
methods and the dispatch cover ``Kind`` exactly, that every visitor in the product answers
every Kind and every representative column type, and that the table in the module's
docstring is what the visitors give (on a mismatch the failure prints the table to paste).
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import re
from abc import abstractmethod
from decimal import Decimal
from typing import Any

import pytest

import simple_binlog.type_table as type_table
from merge.types import SnapshotTypeVisitor
from mirror.kudu_types import KuduTypeVisitor
from mirror.pgtypes import WarehouseTextVisitor, WarehouseTypeVisitor
from mirror.plan import RowChange
from mirror.redis_applier import decode_value, encode_value
from mirror.redis_types import WIRE_NUMBER, WIRE_STRING, RedisValueVisitor
from mock_replay.plan import WireSqlVisitor
from simple_binlog.errors import UnsupportedTypeError
from simple_binlog.type_table import (
    REPRESENTATIVE_TYPES,
    ColumnTypesTextVisitor,
    KindVisitor,
    WireFormVisitor,
    default_column_type,
    visit,
)
from simple_binlog.values import ColumnType, Kind, decode, encode, parse_column_type
from validation.canonical import MySqlCanonical, PostgresCanonical
from validation.spark_canonical import SparkCanonical

# Every visitor of the product. ``test_every_visitor_is_registered`` finds any other.
VISITORS: list[KindVisitor[Any]] = [
    WireFormVisitor(),
    ColumnTypesTextVisitor(),
    SnapshotTypeVisitor(),
    WarehouseTypeVisitor(),
    WarehouseTextVisitor(),
    RedisValueVisitor(),
    WireSqlVisitor("`c`"),
    KuduTypeVisitor(),
    MySqlCanonical(),
    PostgresCanonical(),
    SparkCanonical(),
]

# A driver value of each Kind, as python-mysql-replication or pymysql return it.
SAMPLES: dict[Kind, Any] = {
    Kind.INT: -5,
    Kind.UINT64: 18446744073709551615,
    Kind.DECIMAL: Decimal("12.5"),
    Kind.FLOAT: 1.5,
    Kind.DOUBLE: 0.1,
    Kind.DATE: dt.date(2026, 1, 2),
    Kind.DATETIME: dt.datetime(2026, 1, 2, 3, 4, 5, 6),
    Kind.TIMESTAMP: dt.datetime(2026, 1, 2, 3, 4, 5, 6),
    Kind.TIME: dt.timedelta(hours=-838),
    Kind.YEAR: 2026,
    Kind.BIT: 5,
    Kind.ENUM: "a",
    Kind.SET: "b,a",
    Kind.TEXT: '{"a": 1}',
    Kind.BINARY: b"\x01\x02",
    Kind.GEOMETRY: b"\x00\x00\x00\x00\x01",
    Kind.UUID: "123e4567-e89b-12d3-a456-426614174000",
    Kind.INET4: "10.0.0.1",
    Kind.INET6: "::ffff:10.0.0.1",
}

# The mappings issue 24 names for every Kind, each the visitor that gives it, in the order of
# the module docstring's table: columnTypes spelling, SimpleBinlog (wire) encoding,
# Spark/Iceberg type of the lake's snapshot, warehouse type in PostgreSQL and in Kudu, Redis
# encoding. ``test_the_table_has_every_mapping_the_contract_names`` fails when one is missing.
REQUIRED_MAPPINGS: dict[str, type[KindVisitor[Any]]] = {
    "columnTypes": ColumnTypesTextVisitor,
    "wire (JSON)": WireFormVisitor,
    "Spark": SnapshotTypeVisitor,
    "PostgreSQL": WarehouseTypeVisitor,
    "Kudu": KuduTypeVisitor,
    "Redis": RedisValueVisitor,
}
_TABLE_COLUMNS = ("columnTypes", "Kind", "wire (JSON)", "Spark", "PostgreSQL", "Kudu", "Redis")


def _all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_all_subclasses(sub) for sub in found))


def _rows() -> list[tuple[str, ...]]:
    rows = []
    for spec in REPRESENTATIVE_TYPES:
        column = parse_column_type(spec)
        rows.append(
            (
                spec,
                column.kind.value,
                visit(column, WireFormVisitor()).text,
                visit(column, SnapshotTypeVisitor()),
                visit(column, WarehouseTypeVisitor()),
                visit(column, KuduTypeVisitor()).text,
                visit(column, RedisValueVisitor()),
            )
        )
    return rows


def render_table() -> str:
    rows = _rows()
    widths = [
        max(len(cell) for cell in column) for column in zip(_TABLE_COLUMNS, *rows, strict=True)
    ]
    rule = "  ".join("=" * width for width in widths)

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([rule, line(_TABLE_COLUMNS), rule, *map(line, rows), rule])


def _docstring_table() -> str:
    doc = type_table.__doc__ or ""
    match = re.search(r"\.\. type-table-begin\n\n(.*?)\n\n\.\. type-table-end", doc, re.DOTALL)
    assert match is not None, "the type table's markers are missing from the docstring"
    return match.group(1)


# -- the visitor interface covers Kind exactly -------------------------------------------------


def test_every_kind_has_exactly_one_abstract_method() -> None:
    expected = {f"visit_{kind.value}" for kind in Kind}
    assert KindVisitor.__abstractmethods__ == expected


@pytest.mark.parametrize("kind", list(Kind))
def test_visit_dispatches_every_kind_to_its_method(kind: Kind) -> None:
    class Recorder(WireFormVisitor):
        pass

    calls: list[str] = []
    recorder = Recorder()
    for name in KindVisitor.__abstractmethods__:
        setattr(recorder, name, lambda column, name=name: calls.append(name) or name)
    assert visit(kind, recorder) == f"visit_{kind.value}"
    assert visit(default_column_type(kind), recorder) == f"visit_{kind.value}"
    assert calls == [f"visit_{kind.value}"] * 2


def test_a_visitor_missing_a_kind_cannot_be_instantiated() -> None:
    methods = {
        name: function
        for name, function in vars(WireFormVisitor).items()
        if name.startswith("visit_") and name != "visit_inet6"
    }
    Forgetful = type("Forgetful", (KindVisitor,), methods)
    with pytest.raises(TypeError, match="visit_inet6"):
        Forgetful()


def test_adding_a_kind_without_its_method_fails() -> None:
    """A new Kind's abstract method makes every existing visitor abstract until it handles
    it; a Kind with no method at all is refused by ``visit`` with a clear error."""

    class WithVector(KindVisitor[str]):
        @abstractmethod
        def visit_vector(self, column: ColumnType) -> str: ...

    class OldSnapshotVisitor(SnapshotTypeVisitor, WithVector):
        pass

    with pytest.raises(TypeError, match="visit_vector"):
        OldSnapshotVisitor()  # type: ignore[abstract]

    Extended = enum.Enum("Extended", {"VECTOR": "vector"})
    column = ColumnType("vector(3)", Extended.VECTOR)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedTypeError, match="add visit_vector to KindVisitor"):
        visit(column, SnapshotTypeVisitor())


def test_visit_refuses_what_is_not_a_kind() -> None:
    with pytest.raises(TypeError, match="Kind or a ColumnType"):
        visit("int", SnapshotTypeVisitor())  # type: ignore[arg-type]


def test_the_table_has_every_mapping_the_contract_names() -> None:
    """Each mapping is a complete visitor (one method per Kind, else it cannot be built), is
    a column of the table, and answers every Kind with something non-empty."""
    assert set(REQUIRED_MAPPINGS) == {
        "columnTypes",
        "wire (JSON)",
        "Spark",
        "PostgreSQL",
        "Kudu",
        "Redis",
    }
    assert set(REQUIRED_MAPPINGS) <= set(_TABLE_COLUMNS)
    header = _docstring_table().splitlines()[1].split()
    for name, visitor_class in REQUIRED_MAPPINGS.items():
        assert issubclass(visitor_class, KindVisitor), name
        assert not inspect.isabstract(visitor_class), (name, visitor_class.__abstractmethods__)
        assert name.split()[0] in header, f"the docstring table lacks the {name} column"
        visitor = visitor_class()
        for kind in Kind:
            assert visit(kind, visitor), (name, kind)


# -- every visitor answers every Kind ----------------------------------------------------------


def test_every_visitor_is_registered() -> None:
    concrete = {cls for cls in _all_subclasses(KindVisitor) if not inspect.isabstract(cls)}
    concrete = {cls for cls in concrete if not cls.__qualname__.startswith("test_")}
    assert concrete <= {type(visitor) for visitor in VISITORS}


def test_representative_types_cover_every_kind() -> None:
    assert {parse_column_type(spec).kind for spec in REPRESENTATIVE_TYPES} == set(Kind)


@pytest.mark.parametrize("spec", REPRESENTATIVE_TYPES)
def test_table_rows_are_spelled_as_column_types_carries_them(spec: str) -> None:
    assert visit(parse_column_type(spec), ColumnTypesTextVisitor()) == spec


@pytest.mark.parametrize("visitor", VISITORS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize(
    "column",
    [*(default_column_type(kind) for kind in Kind), *map(parse_column_type, REPRESENTATIVE_TYPES)],
    ids=lambda column: column.spec,
)
def test_every_visitor_answers_every_kind(visitor: KindVisitor[Any], column: ColumnType) -> None:
    result = visit(column, visitor)
    if isinstance(visitor, WarehouseTextVisitor):
        wire = encode(column, SAMPLES[column.kind])
        assert isinstance(result(wire), str)
        assert result(None) is None
    elif isinstance(visitor, WireFormVisitor):
        assert result.text
    elif isinstance(visitor, WireSqlVisitor):
        assert "`c`" in result.value
        assert result.quoting in ("number", "plain", "json")
    elif isinstance(visitor, KuduTypeVisitor):
        canonical = decode(column, encode(column, SAMPLES[column.kind]))
        carried = result.to_java(canonical)
        returned = str(carried) if result.name == "DECIMAL" else carried
        assert result.text and result.from_java(returned) == canonical
    elif isinstance(visitor, MySqlCanonical | PostgresCanonical | SparkCanonical):
        # The engine's SQL expression of the canonical text of a column reference.
        sql = result('"c"' if isinstance(visitor, PostgresCanonical) else "`c`")
        assert isinstance(sql, str) and "c" in sql
    else:
        assert isinstance(result, str)
        assert result


# -- the table is true -------------------------------------------------------------------------


def test_docstring_table_is_what_the_visitors_give() -> None:
    rendered = render_table()
    assert _docstring_table() == rendered, (
        "simple_binlog/type_table.py's table differs from its visitors; paste this between "
        f"the markers:\n\n{rendered}\n"
    )


@pytest.mark.parametrize("spec", REPRESENTATIVE_TYPES)
def test_wire_form_is_the_json_type_encode_gives(spec: str) -> None:
    column = parse_column_type(spec)
    wire = encode(column, SAMPLES[column.kind])
    assert type(wire) is visit(column, WireFormVisitor()).json_type


@pytest.mark.parametrize("spec", REPRESENTATIVE_TYPES)
def test_replay_sql_writes_numbers_exactly_where_the_wire_has_numbers(spec: str) -> None:
    column = parse_column_type(spec)
    is_number = visit(column, WireSqlVisitor("`c`")).quoting == "number"
    assert is_number == (visit(column, WireFormVisitor()).json_type in (int, float))


def test_redis_document_holds_every_kind_as_its_wire_value() -> None:
    columns = {f"c{i}": parse_column_type(spec) for i, spec in enumerate(REPRESENTATIVE_TYPES)}
    row = {name: encode(column, SAMPLES[column.kind]) for name, column in columns.items()}
    change = RowChange(
        "t",
        ("1",),
        7,
        False,
        row,
        {name: column.spec for name, column in columns.items()},
        ("c0",),
        "s.t",
        0,
    )
    stored = decode_value(encode_value(change, None))[2]
    assert stored == row
    for name, column in columns.items():
        expected = {WIRE_NUMBER: (int, float), WIRE_STRING: (str,)}[
            visit(column, RedisValueVisitor())
        ]
        assert type(stored[name]) in expected
        assert type(stored[name]) is visit(column, WireFormVisitor()).json_type
