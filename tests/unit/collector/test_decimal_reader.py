"""The packed-DECIMAL reader against MySQL's format written independently
(``test_fast_decoding.packed_decimal``), on every precision and scale MySQL allows."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from collector import binlog_events as ev
from collector.binlog_events import BinlogColumn
from collector.row_decoder import column_reader
from simple_binlog.values import parse_column_type
from tests.unit.collector.test_fast_decoding import packed_decimal


@st.composite
def decimals(draw: st.DrawFn) -> tuple[str, int, int]:
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    whole = draw(st.integers(0, 10 ** (precision - scale) - 1))
    fraction = draw(st.integers(0, 10**scale - 1))
    sign = draw(st.sampled_from(["", "-"]))
    text = f"{sign}{whole}" + (f".{fraction:0{scale}d}" if scale else "")
    return text, precision, scale


@given(decimals())
def test_every_decimal_reads_back_as_written(case: tuple[str, int, int]) -> None:
    text, precision, scale = case
    column = BinlogColumn(
        index=0, type=ev.NEWDECIMAL, name="d", precision=precision, decimals=scale
    )
    read = column_reader(column, parse_column_type(f"decimal({precision},{scale})"))
    data = b"\x01" + packed_decimal(text, precision, scale) + b"\x02"
    value, end = read(data, 1)
    assert end == len(data) - 1
    assert value == text
    assert Decimal(str(value)) == Decimal(text)
