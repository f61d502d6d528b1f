"""Schema changes on the real PostgreSQL with the real warehouse applier: for each kind of
MySQL column change, a row written before it and a row after it, read back exactly (no
rounding, no truncation); changes the warehouse cannot hold stop that table with one sentence
and the alert's gauge, while another table of the same batch keeps flowing."""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal
from typing import Any

import pytest
from psycopg import sql

from cdc_platform.config import Settings
from mirror.metrics import MirrorMetrics
from mirror.plan import RowChange
from mirror.warehouse import WarehouseApplier
from simple_binlog.values import parse_column_type
from tests.integration.mirror.targets import pg_connect, pg_rows
from validation.canonical import python_row_hash


class Table:
    """Row changes of one test table, each newer than the last."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.offset = 1000

    def write(self, key: int, row: dict[str, Any], types: dict[str, str]) -> RowChange:
        return self._change(key, row, types, deleted=False)

    def delete(self, key: int, row: dict[str, Any], types: dict[str, str]) -> RowChange:
        return self._change(key, row, types, deleted=True)

    def _change(
        self, key: int, row: dict[str, Any], types: dict[str, str], deleted: bool
    ) -> RowChange:
        self.offset += 1
        return RowChange(
            table=self.name,
            key=(key,),
            offset=self.offset,
            deleted=deleted,
            row={"id": key, **row},
            column_types={"id": "int(11)", **types},
            key_columns=("id",),
            shard=f"shop_00.{self.name}",
            execute_time_ms=0,
        )


def _column(settings: Settings, table: str, column: str) -> tuple[str, str | None]:
    """The column's PostgreSQL type and comment."""
    with pg_connect(settings) as conn:
        found = conn.execute(
            "SELECT format_type(a.atttypid, a.atttypmod), col_description(a.attrelid, a.attnum) "
            "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attname = %s",
            (sql.Identifier(settings.mirror.warehouse_schema, table).as_string(conn), column),
        ).fetchone()
    assert found is not None, (table, column)
    return found[0], found[1]


@pytest.fixture()
def applier(mirror_settings: Settings):
    applier = WarehouseApplier(mirror_settings.postgres, mirror_settings.mirror, [])
    yield applier
    applier.close()


def _widened(
    settings: Settings,
    applier: WarehouseApplier,
    old: str,
    new: str,
    before: Any,
    after: Any,
) -> dict[str, dict[str, Any]]:
    """A row of type ``old``, then the column changed to ``new`` and a row of it, and the old
    row written again with the new type (as after the ALTER): the rows as PostgreSQL holds them."""
    t = Table("t_change")
    applier.apply_batch([t.write(1, {"v": before}, {"v": old})])
    result = applier.apply_batch(
        [t.write(2, {"v": after}, {"v": new}), t.write(3, {"v": before}, {"v": new})]
    )
    assert result.applied == 2  # nothing stopped
    return pg_rows(settings, "t_change")


def test_decimal_precision_and_scale_grow(mirror_settings: Settings, applier) -> None:
    rows = _widened(
        mirror_settings, applier, "decimal(5,2)", "decimal(12,6)", "123.45", "123456.123456"
    )
    assert rows["1"]["v"] == Decimal("123.45")
    assert str(rows["2"]["v"]) == "123456.123456"
    assert rows["3"]["v"] == Decimal("123.45")
    assert _column(mirror_settings, "t_change", "v") == (
        "numeric(12,6)",
        "MySQL type: decimal(12,6)",
    )


def test_decimal_scale_grows_at_the_same_precision_without_rounding(
    mirror_settings: Settings, applier
) -> None:
    """decimal(6,2) → decimal(6,4): numeric(6,2) would round 12.3456 to 12.35 silently; the
    column becomes numeric(8,4), which holds 9999.99 and 12.3456 both."""
    rows = _widened(mirror_settings, applier, "decimal(6,2)", "decimal(6,4)", "9999.99", "12.3456")
    assert rows["1"]["v"] == Decimal("9999.99")
    assert str(rows["2"]["v"]) == "12.3456"
    assert _column(mirror_settings, "t_change", "v")[0] == "numeric(8,4)"


def test_varchar_widened_holds_a_value_of_the_new_length(
    mirror_settings: Settings, applier
) -> None:
    long = "ÿ" + "x" * 38 + "é"
    rows = _widened(mirror_settings, applier, "varchar(4)", "varchar(40)", "abcd", long)
    assert (rows["1"]["v"], rows["2"]["v"]) == ("abcd", long) and len(long) == 40
    assert _column(mirror_settings, "t_change", "v") == ("text", "MySQL type: varchar(40)")


def test_int_to_bigint(mirror_settings: Settings, applier) -> None:
    rows = _widened(mirror_settings, applier, "int(11)", "bigint(20)", -(2**31), 2**40)
    assert (rows["1"]["v"], rows["2"]["v"]) == (-(2**31), 2**40)
    assert _column(mirror_settings, "t_change", "v") == ("bigint", "MySQL type: bigint(20)")


def test_bigint_to_bigint_unsigned(mirror_settings: Settings, applier) -> None:
    rows = _widened(
        mirror_settings,
        applier,
        "bigint(20)",
        "bigint(20) unsigned",
        -(2**63),
        str(2**64 - 1),
    )
    assert rows["1"]["v"] == -(2**63)
    assert rows["2"]["v"] == Decimal(2**64 - 1)
    assert _column(mirror_settings, "t_change", "v")[0] == "numeric(20,0)"


def test_a_new_enum_member(mirror_settings: Settings, applier) -> None:
    rows = _widened(
        mirror_settings,
        applier,
        "enum('NEW','PAID')",
        "enum('NEW','PAID','REFUNDED')",
        "PAID",
        "REFUNDED",
    )
    assert (rows["1"]["v"], rows["2"]["v"]) == ("PAID", "REFUNDED")
    assert _column(mirror_settings, "t_change", "v") == (
        "text",
        "MySQL type: enum('NEW','PAID','REFUNDED')",
    )


def test_datetime_fraction_grows(mirror_settings: Settings, applier) -> None:
    """datetime → datetime(6): timestamp(0) would round .123456 away silently."""
    rows = _widened(
        mirror_settings,
        applier,
        "datetime",
        "datetime(6)",
        "2024-02-29 23:59:59",
        "2024-03-01 00:00:00.123456",
    )
    assert rows["1"]["v"] == dt.datetime(2024, 2, 29, 23, 59, 59)
    assert rows["2"]["v"] == dt.datetime(2024, 3, 1, 0, 0, 0, 123456)
    assert _column(mirror_settings, "t_change", "v")[0] == "timestamp(6) without time zone"


def test_a_narrowed_column_is_kept_and_said_once(
    mirror_settings: Settings, applier, caplog: pytest.LogCaptureFixture
) -> None:
    """bigint → int: the bigint column holds every int, so it is kept (no value can be lost);
    one warning, not one per batch."""
    t = Table("t_narrow")
    with caplog.at_level(logging.WARNING, logger="mirror.warehouse"):
        applier.apply_batch([t.write(1, {"v": 2**40}, {"v": "bigint(20)"})])
        applier.apply_batch([t.write(2, {"v": -(2**31)}, {"v": "int(11)"})])
        applier.apply_batch([t.write(3, {"v": 7}, {"v": "int(11)"})])
    rows = pg_rows(mirror_settings, "t_narrow")
    assert [rows[k]["v"] for k in ("1", "2", "3")] == [2**40, -(2**31), 7]
    assert _column(mirror_settings, "t_narrow", "v") == ("bigint", "MySQL type: int(11)")
    kept = [r.getMessage() for r in caplog.records if "is kept" in r.getMessage()]
    assert len(kept) == 1 and "column v: MySQL bigint(20) → int(11)" in kept[0]


def test_a_key_column_widened_in_the_table_and_its_tombstones(
    mirror_settings: Settings, applier
) -> None:
    """id int → bigint, then a delete of a key only a bigint holds: its tombstone is written."""
    t = Table("t_key")
    applier.apply_batch([t.write(1, {"v": "a"}, {"v": "text"})])
    wider = {"id": "bigint(20)", "v": "text"}
    big = 2**40
    applier.apply_batch([t.write(big, {"v": "b"}, wider), t.write(1, {"v": "c"}, wider)])
    gone = t.delete(big, {"v": "b"}, wider)
    applier.apply_batch([gone])
    assert {k: r["v"] for k, r in pg_rows(mirror_settings, "t_key").items()} == {"1": "c"}
    with pg_connect(mirror_settings) as conn:
        tombstones = conn.execute(
            sql.SQL("SELECT id, _binlog_offset FROM {}").format(
                sql.Identifier(mirror_settings.mirror.warehouse_schema, "t_key__tombstone")
            )
        ).fetchall()
    assert tombstones == [(big, gone.offset)]
    assert _column(mirror_settings, "t_key__tombstone", "id")[0] == "bigint"


def test_a_dropped_and_a_renamed_column_are_kept_and_said_once(
    mirror_settings: Settings, applier, caplog: pytest.LogCaptureFixture
) -> None:
    """MySQL ``DROP COLUMN gone, RENAME COLUMN old_name TO new_name``: row events show two
    columns missing and one new; the old ones are kept (their values too), NULL from then on."""
    t = Table("t_drop")
    before = {"gone": "x", "old_name": "n1", "v": "1"}
    before_types = {"gone": "varchar(8)", "old_name": "varchar(8)", "v": "varchar(8)"}
    with caplog.at_level(logging.WARNING, logger="mirror.warehouse"):
        applier.apply_batch([t.write(1, before, before_types)])
        after_types = {"new_name": "varchar(8)", "v": "varchar(8)"}
        applier.apply_batch([t.write(2, {"new_name": "n2", "v": "2"}, after_types)])
        applier.apply_batch([t.write(3, {"new_name": "n3", "v": "3"}, after_types)])
    rows = pg_rows(mirror_settings, "t_drop")
    assert {k: (r["gone"], r["old_name"], r["new_name"], r["v"]) for k, r in rows.items()} == {
        "1": ("x", "n1", None, "1"),
        "2": (None, None, "n2", "2"),
        "3": (None, None, "n3", "3"),
    }
    absent = sorted(r.getMessage() for r in caplog.records if "no longer in" in r.getMessage())
    assert len(absent) == 2
    assert "column gone is" in absent[0] and "column old_name is" in absent[1]


def test_an_impossible_change_stops_that_table_and_the_other_flows(
    mirror_settings: Settings, applier, caplog: pytest.LogCaptureFixture
) -> None:
    """decimal(10,2) → double: numeric(10,2) would store 1e-05 as 0.00 (silently) and
    1e300 not at all; double precision would round the stored decimals. The table stops with
    one sentence; a table in the same batch, and in later batches, is applied."""
    stopped, other = Table("t_stop"), Table("t_other")
    applier.apply_batch(
        [
            stopped.write(1, {"v": "12345678.91"}, {"v": "decimal(10,2)"}),
            other.write(1, {"v": "a"}, {"v": "varchar(8)"}),
        ]
    )
    changed = stopped.write(2, {"v": 1e-05}, {"v": "double"})
    with caplog.at_level(logging.ERROR, logger="mirror.warehouse"):
        result = applier.apply_batch([changed, other.write(2, {"v": "b"}, {"v": "varchar(8)"})])
        later = applier.apply_batch(
            [
                stopped.write(3, {"v": 1e300}, {"v": "double"}),
                other.write(3, {"v": "c"}, {"v": "varchar(8)"}),
            ]
        )
    assert (result.applied, later.applied) == (1, 1)
    sentence = (
        f"the warehouse mirror of t_stop stopped at binlogOffset {changed.offset}: column v "
        "changed from MySQL decimal(10,2) to double and PostgreSQL has no type holding both "
        "its numeric(10,2) values and double precision values without rounding or re-reading "
        "them; alter the column in PostgreSQL, restart the mirror and replay t_stop "
        "(cdc-mirror replay)."
    )
    assert applier.stopped == {"t_stop": sentence}
    assert [r.getMessage() for r in caplog.records] == [sentence]
    assert {k: r["v"] for k, r in pg_rows(mirror_settings, "t_stop").items()} == {
        "1": Decimal("12345678.91")
    }
    assert {k: r["v"] for k, r in pg_rows(mirror_settings, "t_other").items()} == {
        "1": "a",
        "2": "b",
        "3": "c",
    }
    assert _column(mirror_settings, "t_stop", "v")[0] == "numeric(10,2)"


def test_an_alter_postgresql_refuses_stops_that_table_only(
    mirror_settings: Settings, applier
) -> None:
    """A view on the column: PostgreSQL refuses to retype it. That table stops; the other
    table's rows of the same batch (and its own added column) are applied."""
    stopped, other = Table("t_viewed"), Table("t_other")
    applier.apply_batch(
        [
            stopped.write(1, {"v": 1}, {"v": "int(11)"}),
            other.write(1, {"v": "a"}, {"v": "varchar(8)"}),
        ]
    )
    schema = mirror_settings.mirror.warehouse_schema
    with pg_connect(mirror_settings) as conn:
        conn.execute(
            sql.SQL("CREATE VIEW {} AS SELECT v FROM {}").format(
                sql.Identifier(schema, "v_viewed"), sql.Identifier(schema, "t_viewed")
            )
        )
    result = applier.apply_batch(
        [
            stopped.write(2, {"v": 2**40}, {"v": "bigint(20)"}),
            other.write(2, {"v": "b", "w": "new"}, {"v": "varchar(8)", "w": "varchar(8)"}),
        ]
    )
    assert result.applied == 1
    assert applier.stopped["t_viewed"].startswith(
        "the warehouse mirror of t_viewed stopped at binlogOffset "
    )
    assert (
        "PostgreSQL refused to alter column v to bigint (cannot alter type of a column "
        in (applier.stopped["t_viewed"])
    )
    assert {k: r["v"] for k, r in pg_rows(mirror_settings, "t_viewed").items()} == {"1": 1}
    assert {k: (r["v"], r["w"]) for k, r in pg_rows(mirror_settings, "t_other").items()} == {
        "1": ("a", None),
        "2": ("b", "new"),
    }


def test_the_consumer_exports_a_stopped_table_for_the_alert(
    mirror_settings: Settings, applier
) -> None:
    import threading

    from mirror.consumer import MirrorConsumer
    from mirror.plan import ChangeRouter
    from simple_binlog.routing import ShardRouter

    metrics = MirrorMetrics("warehouse")
    consumer = MirrorConsumer(
        mirror_settings.kafka,
        mirror_settings.mirror,
        "warehouse",
        ["local"],
        ChangeRouter([], ShardRouter(list(mirror_settings.shard_rules)), "warehouse"),
        applier,
        metrics,
        threading.Event(),
    )
    stopped, other = Table("t_stop"), Table("t_other")
    assert consumer._apply([stopped.write(1, {"v": "1.5"}, {"v": "decimal(4,1)"})])
    assert consumer._apply(
        [
            stopped.write(2, {"v": 1.5}, {"v": "double"}),
            other.write(1, {"v": "a"}, {"v": "varchar(8)"}),
        ]
    )
    gauge = "cdc_mirror_table_stopped"
    labels = {"target": "warehouse", "table": "t_stop"}
    assert metrics.registry.get_sample_value(gauge, labels) == 1
    assert metrics.registry.get_sample_value(gauge, {**labels, "table": "t_other"}) is None
    assert set(pg_rows(mirror_settings, "t_other")) == {"1"}


def _stored_hashes(settings: Settings, table: str) -> dict[int, int]:
    """Each row's ``_cdc_row_hash`` as the unsigned 64 bits validation sums."""
    with pg_connect(settings) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, _cdc_row_hash FROM {}").format(
                sql.Identifier(settings.mirror.warehouse_schema, table)
            )
        ).fetchall()
    return {int(key): int(value) & (2**64 - 1) for key, value in rows}


def _canonical_hashes(
    table: Table, rows: dict[int, dict[str, Any]], types: dict[str, str]
) -> dict[int, int]:
    """The first 64 bits of each row's canonical md5 (validation's Python reference)."""
    names = ["id", *types]
    columns = [parse_column_type(spec) for spec in ("int(11)", *types.values())]
    return {
        key: int(
            python_row_hash(
                f"shop_00.{table.name}", columns, [{"id": key, **row}.get(n) for n in names]
            )[:16],
            16,
        )
        for key, row in rows.items()
    }


def test_the_row_hash_follows_column_changes_and_a_write_behind_the_mirrors_back(
    mirror_settings: Settings, applier
) -> None:
    """The stored row hash equals validation's canonical hash of each row after the table is
    created, after MySQL adds a column (rows written before it: NULL there) and after a
    column is retyped; a value changed directly in PostgreSQL changes it."""
    t = Table("t_hash")
    types = {"v": "int(11)", "d": "datetime(3)", "x": "double", "doc": "json"}
    rows: dict[int, dict[str, Any]] = {
        1: {"v": 7, "d": "2024-01-05 10:11:12.500", "x": 0.1, "doc": '{"b": 1, "a": [1.5]}'},
        2: {"v": -1, "d": "0000-00-00 00:00:00.000", "x": 1e300, "doc": None},
    }
    applier.apply_batch([t.write(k, r, types) for k, r in rows.items()])
    assert _stored_hashes(mirror_settings, "t_hash") == _canonical_hashes(t, rows, types)

    types = {**types, "note": "varchar(10)"}  # MySQL added a column
    rows[3] = {**rows[1], "note": "new"}
    applier.apply_batch([t.write(3, rows[3], types)])
    assert _stored_hashes(mirror_settings, "t_hash") == _canonical_hashes(t, rows, types)

    types = {**types, "v": "bigint(20)"}  # and widened one
    rows[4] = {**rows[2], "v": 2**40, "note": None}
    applier.apply_batch([t.write(4, rows[4], types)])
    assert _column(mirror_settings, "t_hash", "v")[0] == "bigint"
    assert _stored_hashes(mirror_settings, "t_hash") == _canonical_hashes(t, rows, types)

    with pg_connect(mirror_settings) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET note = 'drift' WHERE id = 3").format(
                sql.Identifier(mirror_settings.mirror.warehouse_schema, "t_hash")
            )
        )
    stored = _stored_hashes(mirror_settings, "t_hash")
    expected = _canonical_hashes(t, rows, types)
    assert stored[3] != expected[3]
    assert {k: v for k, v in stored.items() if k != 3} == {
        k: v for k, v in expected.items() if k != 3
    }


def test_without_the_row_hash_a_table_has_none_and_a_present_one_is_dropped(
    mirror_settings: Settings, applier
) -> None:
    """``mirror.warehouse_row_hash: false``: a new table gets no hash column, and a table that
    has one loses it when the mirror next writes it (the rows themselves unchanged)."""
    off = mirror_settings.mirror.model_copy(update={"warehouse_row_hash": False})
    types = {"v": "int(11)"}
    new, hashed = Table("t_no_hash"), Table("t_hash_dropped")
    applier.apply_batch([hashed.write(1, {"v": 1}, types)])
    assert _stored_hashes(mirror_settings, "t_hash_dropped")  # made with it

    without = WarehouseApplier(mirror_settings.postgres, off, [])
    try:
        without.apply_batch([new.write(1, {"v": 5}, types), hashed.write(2, {"v": 2}, types)])
    finally:
        without.close()
    for table in ("t_no_hash", "t_hash_dropped"):
        with pg_connect(mirror_settings) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
                "AND NOT attisdropped",
                (
                    sql.Identifier(mirror_settings.mirror.warehouse_schema, table).as_string(conn),
                    "_cdc_row_hash",
                ),
            ).fetchone()
        assert found is None, table
    assert {r["id"]: r["v"] for r in pg_rows(mirror_settings, "t_hash_dropped").values()} == {
        1: 1,
        2: 2,
    }
