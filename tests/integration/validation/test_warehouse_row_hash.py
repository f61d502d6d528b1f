"""Validation's use of the warehouse's stored row hash on the real PostgreSQL, with a table
the real warehouse applier made: a chunk's digest summed from ``_cdc_row_hash`` equals the one
hashed row by row (and Python's reference), follows a value changed behind the mirror's back,
and validation hashes the rows instead when the column is missing, stale (another
expression) or does not cover a column MySQL has."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from cdc_platform.config import Settings
from mirror.plan import RowChange
from mirror.warehouse import WarehouseApplier
from simple_binlog.values import parse_column_type
from tests.integration.mirror.targets import pg_connect
from validation.canonical import ChunkDigest, python_row_hash
from validation.plan import Chunk
from validation.table import TableShape
from validation.warehouse import WarehouseSide

TABLE = "t_row_hash"
SHARD = ("shop_00", TABLE)
TYPES = {
    "id": "bigint(20)",
    "amount": "decimal(12,2)",
    "note": "varchar(64)",
    "created": "datetime(3)",
    "stamp": "timestamp(6)",
    "ratio": "double",
    "doc": "json",
}
ROWS: dict[int, dict[str, Any]] = {
    key: {
        "id": key,
        "amount": f"{key}.50",
        "note": None if key % 3 == 0 else f"n{key}",
        "created": f"2024-01-{1 + key % 28:02d} 10:11:12.{key % 1000:03d}",
        "stamp": f"2023-06-0{1 + key % 9} 00:00:0{key % 10}.000001",
        "ratio": key / 7,
        "doc": f'{{"k": {key}, "a": [1.5, null]}}',
    }
    for key in range(1, 41)
}


def _python_digest(rows: dict[int, dict[str, Any]], types: dict[str, str]) -> ChunkDigest:
    columns = [parse_column_type(spec) for spec in types.values()]
    return ChunkDigest.of_rows(
        [
            python_row_hash(".".join(SHARD), columns, [row.get(n) for n in types])
            for row in rows.values()
        ]
    )


def _side(settings: Settings, types: dict[str, str]) -> WarehouseSide:
    shape = TableShape(TABLE, (SHARD,), tuple(types.items()), ("id",))
    return WarehouseSide(settings.postgres, settings.mirror.warehouse_schema, shape)


def _digests(settings: Settings, types: dict[str, str] = TYPES) -> tuple[bool | None, ChunkDigest]:
    side = _side(settings, types)
    try:
        digest = side.digest(Chunk())
        return side.stored_row_hash, digest
    finally:
        side.close()


def _execute(settings: Settings, statement: str) -> None:
    target = sql.Identifier(settings.mirror.warehouse_schema, TABLE)
    with pg_connect(settings) as conn:
        conn.execute(sql.SQL(statement).format(target))


def test_chunks_sum_the_stored_row_hash_only_while_it_is_the_current_one(
    mirror_settings: Settings,
) -> None:
    applier = WarehouseApplier(mirror_settings.postgres, mirror_settings.mirror, [])
    try:
        applier.apply_batch(
            [
                RowChange(
                    table=TABLE,
                    key=(key,),
                    offset=1000 + key,
                    deleted=False,
                    row=row,
                    column_types=TYPES,
                    key_columns=("id",),
                    shard=".".join(SHARD),
                    execute_time_ms=0,
                )
                for key, row in ROWS.items()
            ]
        )
    finally:
        applier.close()
    expected = _python_digest(ROWS, TYPES)
    assert expected.count == len(ROWS)
    assert _digests(mirror_settings) == (True, expected)

    # A value changed behind the mirror's back: PostgreSQL recomputed the stored hash.
    _execute(mirror_settings, "UPDATE {} SET note = 'drift' WHERE id = 5")
    drifted = _python_digest({**ROWS, 5: {**ROWS[5], "note": "drift"}}, TYPES)
    assert drifted != expected
    assert _digests(mirror_settings) == (True, drifted)

    # MySQL has a column the table does not cover yet: its rows are hashed (the column NULL).
    wider = {**TYPES, "extra": "int(11)"}
    assert _digests(mirror_settings, wider) == (
        False,
        _python_digest({**ROWS, 5: {**ROWS[5], "note": "drift"}}, wider),
    )

    # A stale definition (here a constant) is not trusted: the rows are hashed.
    _execute(
        mirror_settings,
        "ALTER TABLE {} DROP COLUMN _cdc_row_hash, "
        "ADD COLUMN _cdc_row_hash bigint GENERATED ALWAYS AS (0) STORED",
    )
    assert _digests(mirror_settings) == (False, drifted)

    # No column at all (a table of an older version): the rows are hashed.
    _execute(mirror_settings, "ALTER TABLE {} DROP COLUMN _cdc_row_hash")
    assert _digests(mirror_settings) == (False, drifted)
