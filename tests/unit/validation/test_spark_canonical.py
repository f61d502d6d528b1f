"""The Spark encoding covers every Kind, and the lake's pure parts: key conditions, the raw
layer's latest state and the state at a day's cut."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from simple_binlog.type_table import REPRESENTATIVE_TYPES
from simple_binlog.values import Kind, parse_column_type
from validation.canonical import ChunkDigest
from validation.lake import (
    OverlaySide,
    Override,
    RawChange,
    _compare,
    latest_state,
    spark_literal,
    state_at_cut,
)
from validation.plan import Chunk
from validation.spark_canonical import SPARK, SparkCanonical
from validation.table import TableShape


def test_every_kind_has_a_spark_encoding() -> None:
    # SparkCanonical is a KindVisitor: a Kind without its method cannot be instantiated,
    # and every Kind appears among the representative types.
    SparkCanonical()
    kinds = {parse_column_type(spec).kind for spec in REPRESENTATIVE_TYPES}
    assert kinds == set(Kind)
    for spec in REPRESENTATIVE_TYPES:
        piece = SPARK.piece("v", parse_column_type(spec))
        assert "`v`" in piece and piece.startswith("COALESCE("), spec


def test_spark_literals_and_row_comparison() -> None:
    assert spark_literal(parse_column_type("bigint unsigned"), 18446744073709551615) == (
        "CAST('18446744073709551615' AS DECIMAL(20,0))"
    )
    assert spark_literal(parse_column_type("varchar(8)"), "it's\\") == "'it\\'s\\\\'"
    assert spark_literal(parse_column_type("decimal(5,2)"), Decimal("1.50")) == "1.50BD"
    assert spark_literal(parse_column_type("datetime(3)"), dt.datetime(2024, 1, 5, 10, 11, 12)) == (
        "TIMESTAMP '2024-01-05 10:11:12'"
    )
    assert spark_literal(parse_column_type("varbinary(4)"), b"\x00\xff") == "X'00ff'"
    assert _compare(["a", "b"], ["1", "2"], ">") == "((a > 1) OR (a = 1 AND b > 2))"
    assert _compare(["a", "b"], ["1", "2"], "<=") == "((a < 1) OR (a = 1 AND b <= 2))"


SHAPE = TableShape("t", (("d", "t"),), (("id", "int"), ("v", "varchar(8)")), ("id",))


def _change(
    offset: int, event: str, content: dict, before: dict | None = None, source: str = "BINLOG"
) -> RawChange:
    return RawChange(offset, event, source, "d.t", content, before)


def test_latest_state_and_state_at_the_cut() -> None:
    changes = [
        _change(10, "UPDATE", {"id": 1, "v": "b"}, {"id": 1, "v": "a"}),
        _change(11, "UPDATE", {"id": 1, "v": "c"}, {"id": 1, "v": "b"}),
        _change(12, "INSERT", {"id": 2, "v": "x"}),
        _change(13, "DELETE", {"id": 3, "v": "gone"}),
        _change(14, "UPDATE", {"id": 5, "v": "k"}, {"id": 4, "v": "k"}),  # the key changes
        _change(15, "INSERT", {"id": 6, "v": "mock"}, source="MOCK"),
    ]
    latest = latest_state(SHAPE, changes)
    assert latest[(1,)] == Override("d.t", {"id": 1, "v": "c"}, 11)
    assert latest[(3,)].row is None and latest[(4,)].row is None
    assert latest[(5,)].row == {"id": 5, "v": "k"} and latest[(6,)].offset == 15
    cut = state_at_cut(SHAPE, changes)
    assert cut[(1,)].row == {"id": 1, "v": "a"}  # before the first change after the cut
    assert cut[(2,)].row is None  # inserted after the cut
    assert cut[(3,)].row == {"id": 3, "v": "gone"}
    assert cut[(4,)].row == {"id": 4, "v": "k"} and cut[(5,)].row is None
    assert (6,) not in cut  # a MOCK event is no change of MySQL


class _Rows:
    """A side over a dict of key → row hash (and offsets)."""

    name = "memory"

    def __init__(self, rows: dict, offsets: dict | None = None) -> None:
        self._rows, self._offsets = rows, offsets or {}

    def digest(self, chunk: Chunk) -> ChunkDigest:
        return ChunkDigest.of_rows([h for k, h in self._rows.items() if chunk.holds(k)])

    def key_hashes(self, keys):
        return {k: self._rows[k] for k in keys if k in self._rows}

    def key_versions(self, keys):
        return {k: (self._rows[k], self._offsets.get(k)) for k in keys if k in self._rows}

    def row_hashes(self, chunk: Chunk):
        return {k: h for k, h in self._rows.items() if chunk.holds(k)}


def test_an_overlay_corrects_the_digest_as_if_the_rows_were_replaced() -> None:
    from validation.canonical import RowHasher

    hasher = RowHasher(["id", "v"], [parse_column_type("int"), parse_column_type("varchar(8)")])
    rows = {(i,): hasher.hexdigest("d.t", {"id": i, "v": str(i)}) for i in range(1, 6)}
    overrides = {
        (2,): Override("d.t", {"id": 2, "v": "new"}, 50),  # newer than the base's row: applies
        (3,): Override("d.t", None, 50),  # deleted
        (4,): Override("d.t", {"id": 4, "v": "old"}, 5),  # older than the base's: ignored
        (9,): Override("d.t", {"id": 9, "v": "9"}, 60),  # not in the base: added
    }
    overlay = OverlaySide(_Rows(rows, dict.fromkeys(rows, 10)), SHAPE, lambda: overrides)
    expected = dict(rows)
    expected[(2,)] = hasher.hexdigest("d.t", {"id": 2, "v": "new"})
    del expected[(3,)]
    expected[(9,)] = hasher.hexdigest("d.t", {"id": 9, "v": "9"})
    whole = Chunk()
    assert overlay.digest(whole) == ChunkDigest.of_rows(list(expected.values()))
    assert overlay.row_hashes(whole) == expected
    assert overlay.digest(Chunk(None, (3,))) == ChunkDigest.of_rows(
        [expected[(1,)], expected[(2,)]]
    )
