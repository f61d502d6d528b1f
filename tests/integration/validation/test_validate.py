"""``validation`` against the real mirror: a table sharded over 2 MariaDB databases × 2
tables, read from the real binlog (``collector.reader.read_range``), published to Kafka and
applied by the mirror's consumer loop to the warehouse and to Redis. Validation finds both
equal; after drift induced in each target (a value changed, a row deleted, an extra row) it
names exactly those keys with their rows side by side; a source write made while it runs is
not reported, because the watermark lets the mirror apply it before the key is judged.

The warehouse's chunks are summed from its stored row hash (the generated column the mirror's
tables have): the value changed there behind the mirror's back is found all the same, since
PostgreSQL recomputes the column on that UPDATE too. Against the warehouse MySQL's chunks
are hashed in two parts on two connections at once (parts of at least 5 rows here), their sums
added; against Redis on one connection."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from psycopg import sql

from tests.integration.mirror.targets import pg_connect
from tests.integration.validation.harness import (
    BASE,
    ROWS_PER_SHARD,
    Pipeline,
    PumpedWatermark,
    drift_redis,
    drift_warehouse,
)
from validation import mysql as mysql_side
from validation.mysql import MySqlSide
from validation.plan import Chunk, Difference
from validation.run import Options, describe, validate


@pytest.mark.timeout(300)
def test_validate_finds_exactly_the_drifted_keys_and_not_a_write_in_flight(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="validation.warehouse")
    monkeypatch.setattr(mysql_side, "MIN_PART_ROWS", 5)
    split: list[int] = []
    parts_of = MySqlSide._parts

    def recorded(self: MySqlSide, chunk: Chunk) -> list[Chunk]:
        parts = parts_of(self, chunk)
        split.append(len(parts))
        return parts

    monkeypatch.setattr(MySqlSide, "_parts", recorded)
    settings = pipeline.settings
    table = settings.tables[0].name
    options = Options(chunk_rows=25, leaf_rows=8, chunk_time_s=None, source_connections=2)
    watermarks = {t: PumpedWatermark(pipeline, t) for t in ("warehouse", "redis")}
    total = 4 * ROWS_PER_SHARD
    for target in ("warehouse", "redis"):
        report = validate(settings, table, target, options, watermarks[target])  # type: ignore[arg-type]
        assert report.equal, describe(report)
        assert report.rows == total
        assert report.chunks == total // 25 + 1
    # Against the warehouse every full chunk of 25 rows was hashed in two parts on two
    # connections; against Redis on one (the Redis side bounds the run), each chunk whole.
    assert split.count(2) == total // 25

    changed, deleted, extra = BASE + 3, BASE + 77, BASE + 10_000
    drift_warehouse(settings, table, changed, deleted, extra)
    drift_redis(settings, table, changed + 100, deleted + 1, extra + 1)

    # A source write while validating: after MySQL's first chunk is read, a row changes.
    in_flight = BASE + 120
    db = pipeline.dbs[1]
    original_digest = MySqlSide.digest
    written: list[int] = []

    def digest_then_write(self: Any, chunk: Chunk) -> Any:
        result = original_digest(self, chunk)
        if not written:
            with pipeline.conn.cursor() as cur:
                for shard in ("orders_00", "orders_01"):
                    written.append(
                        cur.execute(
                            f"UPDATE {db}.{shard} SET note = 'moved on' WHERE id = %s", (in_flight,)
                        )
                    )
        return result

    with pytest.MonkeyPatch.context() as monkey:
        monkey.setattr(MySqlSide, "digest", digest_then_write)
        found = {
            target: validate(settings, table, target, options, watermarks[target])  # type: ignore[arg-type]
            for target in ("warehouse", "redis")
        }
    assert sum(written) == 1  # the in-flight row exists in exactly one shard

    warehouse = found["warehouse"]
    # Every warehouse run summed the stored row hash, none hashed the rows.
    assert caplog.text.count("chunks sum its stored row hash") == 2, caplog.text
    assert "rows are hashed" not in caplog.text
    assert {(r.key, r.difference) for r in warehouse.differences} == {
        ((changed,), Difference.DIFFERENT),
        ((deleted,), Difference.MISSING),
        ((extra,), Difference.EXTRA),
    }, describe(warehouse)
    assert warehouse.unsettled == []
    redis_report = found["redis"]
    assert {(r.key, r.difference) for r in redis_report.differences} == {
        ((changed + 100,), Difference.DIFFERENT),
        ((deleted + 1,), Difference.MISSING),
        ((extra + 1,), Difference.EXTRA),
    }, describe(redis_report)
    # The write was made after MySQL's first chunk was read: its own chunk was read after
    # it, and the window's watermark let the mirror apply it before the target was read, so
    # it never even became a candidate (in_flight counts those dropped when settling).
    with pg_connect(settings) as conn:
        note = conn.execute(
            sql.SQL("SELECT note FROM {} WHERE id = %s").format(
                sql.Identifier(settings.mirror.warehouse_schema, table)
            ),
            (in_flight,),
        ).fetchone()
    assert note == ("moved on",)
    # Side by side: the changed column, MySQL's value against the target's.
    [row] = [r for r in warehouse.differences if r.difference is Difference.DIFFERENT]
    assert row.differing_columns() == ["note"]
    assert row.target is not None and row.target["note"] == "drift"
    [row] = [r for r in redis_report.differences if r.difference is Difference.DIFFERENT]
    assert row.differing_columns() == ["amount"]
    assert row.source is not None and row.target is not None
    assert (row.source["amount"], row.target["amount"]) == (f"{(changed + 100) % 1000}.50", "0.01")
    text = "\n".join(describe(warehouse))
    assert f"key {changed}: different" in text and "drift *" in text
