"""The validation bench's fast set-up (``fill_fast``) writes the same target rows as the
mirror's appliers: the warehouse rows' text and the Redis documents' bytes of one table
written both ways are equal, and the wire values it computes from the key are those
``encode`` gives MySQL's rows. Real MariaDB, PostgreSQL and Redis, under a name of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql.cursors
import pytest
import redis
from psycopg import sql

from bench.validation_bench import (
    TYPES,
    Names,
    _wire,
    drop_all,
    mysql,
    prepare,
    scoped,
    wire_row,
)
from cdc_platform.config import Settings
from mirror.warehouse import connect_warehouse
from simple_binlog.naming import redis_key
from simple_binlog.values import parse_column_type

ROWS = 12_000  # every remainder of FILL's moduli (7, 11, 1000, …) many times over
BATCH = 1_000  # the fast path's first batch goes through the appliers, the rest is filled


@pytest.fixture()
def bench_settings(local_stack: Settings) -> Iterator[Settings]:
    settings = scoped(local_stack, Names("vbfilltest"))
    yield settings
    drop_all(settings, ["warehouse", "redis"])


def _warehouse_rows(settings: Settings) -> list[str]:
    table = sql.Identifier(settings.mirror.warehouse_schema, settings.tables[0].name)
    with connect_warehouse(settings.postgres) as pg:
        query = sql.SQL("SELECT t::text FROM {} AS t ORDER BY id").format(table)
        return [row[0] for row in pg.execute(query).fetchall()]


def _redis_documents(settings: Settings) -> list[bytes | None]:
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    table, prefix = settings.tables[0].name, settings.redis.key_prefix
    names = [redis_key(prefix, table, [str(seq)]) for seq in range(1, ROWS + 1)]
    documents = [
        value
        for start in range(0, ROWS, 1000)
        for value in client.mget(names[start : start + 1000])
    ]
    extra = sum(1 for _ in client.scan_iter(f"{prefix}:{table}:*", count=5000)) - ROWS
    client.close()
    assert extra == 0
    return documents


def test_the_fast_path_writes_the_appliers_rows(bench_settings: Settings) -> None:
    prepare(bench_settings, ROWS, BATCH, ["warehouse", "redis"], fast=False)
    by_appliers = (_warehouse_rows(bench_settings), _redis_documents(bench_settings))
    assert len(by_appliers[0]) == ROWS and None not in by_appliers[1]

    prepare(bench_settings, ROWS, BATCH, ["warehouse", "redis"], fast=True)
    fast = (_warehouse_rows(bench_settings), _redis_documents(bench_settings))

    assert fast[0] == by_appliers[0]
    assert fast[1] == by_appliers[1]


def test_the_wire_values_computed_from_the_key_are_those_of_mysql_s_rows(
    bench_settings: Settings,
) -> None:
    prepare(bench_settings, ROWS, BATCH, [])
    types = {name: parse_column_type(spec) for name, spec in TYPES.items()}
    conn = mysql(bench_settings, cursorclass=pymysql.cursors.SSCursor)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {Names('vbfilltest').table} ORDER BY id")
            differing = [row[0] for row in cur.fetchall() if wire_row(row[0]) != _wire(types, row)]
    finally:
        conn.close()
    assert differing == []
