"""Zero-part dates in the snapshot: the text Spark prints of a stored value decodes to MySQL's
text, and the stored dates are the warehouse's encoding (one encoding for both stores)."""

from __future__ import annotations

import pytest

from merge.types import ZERO_PART_YEARS, hive_type, snapshot_date_text
from mirror.pgtypes import ZERO_PART_YEARS as WAREHOUSE_ZERO_PART_YEARS
from mirror.pgtypes import _zero_part_text, mysql_date_text


@pytest.mark.parametrize(
    ("stored", "fsp", "mysql"),
    [
        ("+126312-01-16", 0, "2024-00-15"),
        ("+126315-01-01 10:11:12", 0, "2024-03-00 10:11:12"),
        ("+126315-01-01 10:11:12.5", 3, "2024-03-00 10:11:12.500"),
        ("+126312-01-01 23:59:59.999999", 6, "2024-00-00 23:59:59.999999"),
        ("+100000-01-01", 0, "0000-00-00"),
        ("+100000-01-01 00:00:00", 6, "0000-00-00 00:00:00.000000"),
        ("+100012-02-01", 0, "0000-12-31"),  # day 31: February 1
        ("+126312-02-01 12:00:00.1", 3, "2024-00-31 12:00:00.100"),
        # Real dates: as they are, the fraction as MySQL prints DATETIME(fsp).
        ("2024-07-04 05:06:07.0809", 6, "2024-07-04 05:06:07.080900"),
        ("1000-01-01 00:00:00", 6, "1000-01-01 00:00:00.000000"),
        ("9999-12-31", 0, "9999-12-31"),
        ("not a date", 0, "not a date"),
    ],
)
def test_a_stored_value_reads_back_as_mysql_text(stored: str, fsp: int, mysql: str) -> None:
    assert snapshot_date_text(stored, fsp) == mysql


@pytest.mark.parametrize(
    "mysql", ["2024-00-15", "2024-03-00 10:11:12", "0000-12-31", "2024-00-31", "9999-12-00"]
)
def test_the_lake_and_the_warehouse_store_a_zero_part_date_alike(mysql: str) -> None:
    assert ZERO_PART_YEARS == WAREHOUSE_ZERO_PART_YEARS
    warehouse = _zero_part_text(mysql)
    assert mysql_date_text(warehouse) == mysql
    assert snapshot_date_text("+" + warehouse) == mysql  # Spark prints the year with '+'


def test_date_columns_keep_their_calendar_types() -> None:
    assert hive_type("date") == "date"
    assert hive_type("datetime(6)") == "timestamp"
    assert hive_type("timestamp") == "timestamp"
    assert hive_type("binary(16)") == "binary"


@pytest.mark.parametrize(
    ("stored", "spec", "mysql"),
    [
        ("-infinity", "date", "0000-00-00"),
        ("-infinity", "datetime", "0000-00-00 00:00:00"),
        ("-infinity", "datetime(3)", "0000-00-00 00:00:00.000"),
        ("-infinity", "timestamp(6)", "0000-00-00 00:00:00.000000"),
        ("126315-01-01 23:59:59.125", "datetime(3)", "2024-03-00 23:59:59.125"),
        ("126312-02-01 01:02:03.45", "datetime(3)", "2024-00-31 01:02:03.450"),
        ("2024-01-02 03:04:05.6", "datetime(6)", "2024-01-02 03:04:05.600000"),
        ("2024-01-02 03:04:05", "datetime(2)", "2024-01-02 03:04:05.00"),
        ("2038-01-19 03:14:07.9+00", "timestamp(1)", "2038-01-19 03:14:07.9"),
        ("2024-01-02", "date", "2024-01-02"),
    ],
)
def test_the_warehouse_text_reads_back_exactly_given_the_column_type(
    stored: str, spec: str, mysql: str
) -> None:
    """PostgreSQL prints -infinity for every zero date and drops a fraction's trailing
    zeros; with the column's type the decoding gives MySQL's text, digit for digit."""
    assert mysql_date_text(stored, spec) == mysql
