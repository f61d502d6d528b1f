"""The appliers against the real Redis, PostgreSQL and Kudu (the local stack's cluster, one per
session): out-of-order and duplicated batches end equal to the reference; tombstones stop older
writes; replays are no-ops; schema evolution; projection and TTLs; NOSCRIPT recovery."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
import redis

from cdc_platform.config import Settings
from mirror.applier import MemoryApplier
from mirror.plan import ChangeRouter
from mirror.redis_applier import RedisApplier, redis_key
from mirror.warehouse import WarehouseApplier
from simple_binlog.message import EventType, SimpleBinlog
from simple_binlog.routing import ShardRouter
from simple_binlog.values import decode, parse_column_type
from tests.integration.mirror.targets import as_pg, live_redis_rows, pg_connect, pg_rows, redis_rows
from tests.unit.mirror.workload import (
    BASE_TYPES,
    EXTRA_TYPES,
    LOGICAL,
    Workload,
    shuffled_batches,
    table_mirror,
)


def _router(settings: Settings, target: str) -> ChangeRouter:
    return ChangeRouter(settings.tables, ShardRouter(list(settings.shard_rules)), target)  # type: ignore[arg-type]


def _changes(router: ChangeRouter, messages: list[SimpleBinlog]) -> list:
    return [c for m in messages for c in router.route("local", m).changes]


# Each test runs against every target; Kudu's under a table prefix of the test's own, on the
# session's Kudu cluster (started once, by the kudu_settings fixture).
TARGETS = ["redis", "warehouse", "kudu"]


@pytest.fixture()
def target_settings(
    mirror_settings: Settings, target: str, request: pytest.FixtureRequest
) -> Settings:
    """``mirror_settings``, or for Kudu the table mirrored to Kudu under a prefix of its own."""
    if target == "kudu":
        kudu: Settings = request.getfixturevalue("kudu_settings")
        return kudu
    return mirror_settings


def _applier(settings: Settings, target: str):
    if target == "redis":
        return RedisApplier(settings.redis, settings.mirror, settings.tables)
    if target == "kudu":
        from tests.integration.mirror.kudu_store import kudu_applier

        return kudu_applier(settings)
    return WarehouseApplier(settings.postgres, settings.mirror, settings.tables)


def _kudu_stored(settings: Settings) -> dict:
    from tests.integration.mirror.kudu_store import kudu_rows

    return kudu_rows(settings, LOGICAL)


def _canonical(row: dict, types: dict[str, str]) -> dict:
    return {
        name: decode(parse_column_type(types[name]), value, name) for name, value in row.items()
    }


def _reference(router: ChangeRouter, messages: list[SimpleBinlog]) -> MemoryApplier:
    reference = MemoryApplier()
    reference.apply_batch(_changes(router, messages))
    return reference


def _assert_equal(settings: Settings, target: str, reference: MemoryApplier) -> None:
    expected = {key[0]: row for key, row in reference.rows(LOGICAL).items()}
    if target == "redis":
        assert live_redis_rows(settings, LOGICAL) == expected
    elif target == "kudu":
        stored = _kudu_stored(settings)
        live = {key: row for key, row in stored.items() if not row["_deleted"]}
        assert set(live) == set(expected)
        entries = reference.tables[LOGICAL]
        for key, row in expected.items():
            types = EXTRA_TYPES if "extra" in row else BASE_TYPES
            assert {name: live[key][name] for name in row} == _canonical(row, types), key
            assert live[key]["_binlog_offset"] == entries[(key,)].offset
        # Every delete the reference holds is a tombstone row at the delete's offset.
        for (key,), entry in entries.items():
            if entry.row is None:
                assert (stored[key]["_deleted"], stored[key]["_binlog_offset"]) == (
                    True,
                    entry.offset,
                )
    else:
        stored = pg_rows(settings, LOGICAL)
        assert set(stored) == set(expected)
        for key, row in expected.items():
            types = EXTRA_TYPES if "extra" in row else BASE_TYPES
            got = {name: stored[key][name] for name in row}
            assert got == as_pg(row, types), key
            assert stored[key]["_binlog_offset"] == reference.tables[LOGICAL][(key,)].offset


@pytest.mark.parametrize("target", TARGETS)
def test_out_of_order_duplicated_batches_with_schema_evolution_equal_reference(
    target_settings: Settings, target: str
) -> None:
    mirror_settings = target_settings
    rng = random.Random(11)
    workload = Workload(rng)
    messages = workload.messages(1500)
    workload.evolve()  # a column appears mid-stream: ALTER TABLE … ADD, no restart
    messages += workload.messages(1500)
    router = _router(mirror_settings, target)
    applier = _applier(mirror_settings, target)
    try:
        totals = [applier.apply_batch(_changes(router, b)) for b in shuffled_batches(messages, rng)]
        reference = _reference(router, messages)
        _assert_equal(mirror_settings, target, reference)
        assert sum(r.stale for r in totals) > 0  # out-of-order input did hit the guard
        # A second full replay changes nothing.
        replay = applier.apply_batch(_changes(router, messages))
        assert replay.applied == 0
        _assert_equal(mirror_settings, target, reference)
    finally:
        applier.close()
    live = {k: r for k, (_, r) in workload.live.items()}
    assert {k: r for k, r in live.items()} == {k[0]: r for k, r in reference.rows(LOGICAL).items()}
    assert any("extra" in row for row in live.values())


@pytest.mark.parametrize("target", TARGETS)
def test_tombstone_stops_an_older_insert(target_settings: Settings, target: str) -> None:
    mirror_settings = target_settings
    workload = Workload(random.Random(5))
    insert = workload.step()
    assert insert.event_type is EventType.INSERT
    key = insert.content["id"]
    delete = workload._message(
        (insert.schema_name, insert.table_name), EventType.DELETE, dict(insert.content)
    )
    router = _router(mirror_settings, target)
    applier = _applier(mirror_settings, target)
    try:
        assert applier.apply_batch(_changes(router, [delete])).applied == 1
        result = applier.apply_batch(_changes(router, [insert]))  # the older insert, replayed
        assert (result.applied, result.stale) == (0, 1)
        if target == "redis":
            assert redis_rows(mirror_settings, LOGICAL)[key] == (delete.binlog_offset, None)
        elif target == "kudu":
            tombstone = _kudu_stored(mirror_settings)[key]
            assert (tombstone["_deleted"], tombstone["_binlog_offset"]) == (
                True,
                delete.binlog_offset,
            )
        else:
            assert pg_rows(mirror_settings, LOGICAL) == {}
            with pg_connect(mirror_settings) as conn:
                stored = conn.execute(
                    f'SELECT _binlog_offset FROM "{mirror_settings.mirror.warehouse_schema}".'
                    f'"{LOGICAL}__tombstone"'
                ).fetchall()
            assert stored == [(delete.binlog_offset,)]
        newer = workload._message(
            (insert.schema_name, insert.table_name), EventType.INSERT, dict(insert.content)
        )
        assert applier.apply_batch(_changes(router, [newer])).applied == 1
    finally:
        applier.close()
    if target == "redis":
        assert redis_rows(mirror_settings, LOGICAL)[key][0] == newer.binlog_offset
    elif target == "kudu":
        revived = _kudu_stored(mirror_settings)[key]
        assert (revived["_deleted"], revived["_binlog_offset"]) == (False, newer.binlog_offset)
    else:
        assert pg_rows(mirror_settings, LOGICAL)[key]["_binlog_offset"] == newer.binlog_offset


@pytest.mark.parametrize("target", TARGETS)
def test_one_batch_with_a_key_many_times_a_delete_then_reinsert_and_stale_replays(
    target_settings: Settings, target: str
) -> None:
    """Within one batch: a key inserted, updated many times, deleted and inserted again
    (the re-insert wins), another key inserted then deleted (a tombstone); the whole batch
    replayed, and an older part of it replayed alone, are no-ops."""
    mirror_settings = target_settings
    workload = Workload(random.Random(12))
    shard = ("shop_01", "orders_00")
    kept = workload._fresh_key()
    rows = [workload._row(kept) for _ in range(8)]
    batch = [workload._message(shard, EventType.INSERT, rows[0])]
    batch += [
        workload._message(shard, EventType.UPDATE, rows[n], dict(rows[n - 1])) for n in range(1, 7)
    ]
    batch.append(workload._message(shard, EventType.DELETE, dict(rows[6])))
    batch.append(workload._message(shard, EventType.INSERT, rows[7]))
    gone = workload._fresh_key()
    gone_row = workload._row(gone)
    batch.append(workload._message(shard, EventType.INSERT, gone_row))
    batch.append(workload._message(shard, EventType.DELETE, dict(gone_row)))
    router = _router(mirror_settings, target)
    applier = _applier(mirror_settings, target)
    try:
        first = applier.apply_batch(_changes(router, batch))
        assert (first.applied, first.stale, first.superseded) == (2, 0, len(batch) - 2)
        _assert_equal(mirror_settings, target, _reference(router, batch))
        replay = applier.apply_batch(_changes(router, batch))
        assert (replay.applied, replay.stale) == (0, 2)
        older = applier.apply_batch(_changes(router, [batch[3], batch[0], batch[-2]]))
        assert (older.applied, older.stale) == (0, 2)
    finally:
        applier.close()
    _assert_equal(mirror_settings, target, _reference(router, batch))
    if target == "redis":
        stored = redis_rows(mirror_settings, LOGICAL)
        assert stored[kept] == (batch[8].binlog_offset, rows[7])
        assert stored[gone] == (batch[-1].binlog_offset, None)
    elif target == "kudu":
        stored_kudu = _kudu_stored(mirror_settings)
        assert stored_kudu[kept]["_binlog_offset"] == batch[8].binlog_offset
        assert (stored_kudu[gone]["_deleted"], stored_kudu[gone]["_binlog_offset"]) == (
            True,
            batch[-1].binlog_offset,
        )
    else:
        assert pg_rows(mirror_settings, LOGICAL)[kept]["_binlog_offset"] == batch[8].binlog_offset
        with pg_connect(mirror_settings) as conn:
            tombstones = conn.execute(
                f'SELECT id::text, _binlog_offset FROM "{mirror_settings.mirror.warehouse_schema}".'
                f'"{LOGICAL}__tombstone"'
            ).fetchall()
        assert tombstones == [(gone, batch[-1].binlog_offset)]


def test_redis_a_refused_call_fails_the_batch_and_the_connection_stays_usable(
    mirror_settings: Settings,
) -> None:
    """One call of a batch's pipelined calls fails (a key of another type makes the script
    fail): the batch raises one sentence, the other calls' keys are applied, and the next
    batch on the same applier applies (the replies were all read)."""
    from simple_binlog.errors import ServiceUnavailableError

    workload = Workload(random.Random(13))
    messages = workload.messages(400)  # several calls of 50 keys (the fixture's setting)
    router = _router(mirror_settings, "redis")
    changes = _changes(router, messages)
    blocker = changes[len(changes) // 2]
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    blocked_key = redis_key(mirror_settings.redis.key_prefix, LOGICAL, blocker.key)
    client.hset(blocked_key, "not", "a string")
    applier = RedisApplier(mirror_settings.redis, mirror_settings.mirror, mirror_settings.tables)
    try:
        with pytest.raises(ServiceUnavailableError, match=r"^Redis refused a mirror batch \("):
            applier.apply_batch(changes)
        client.delete(blocked_key)
        assert len(redis_rows(mirror_settings, LOGICAL)) > 50  # the other calls did apply
        applier.apply_batch(changes)  # the same batch again: the guard makes it safe
        later = workload.messages(50)
        assert applier.apply_batch(_changes(router, later)).applied > 0
    finally:
        applier.close()
        client.close()
    reference = _reference(router, messages + later)
    _assert_equal(mirror_settings, "redis", reference)


def test_warehouse_soft_delete_flags_the_row(mirror_settings: Settings) -> None:
    settings = mirror_settings.model_copy(
        update={"tables": [table_mirror(warehouse_delete="soft")]}
    )
    workload = Workload(random.Random(8))
    insert = workload.step()
    delete = workload._message(
        (insert.schema_name, insert.table_name), EventType.DELETE, dict(insert.content)
    )
    router = _router(settings, "warehouse")
    applier = _applier(settings, "warehouse")
    try:
        applier.apply_batch(_changes(router, [insert, delete]))
        assert applier.apply_batch(_changes(router, [insert])).stale == 1
    finally:
        applier.close()
    row = pg_rows(settings, LOGICAL)[insert.content["id"]]
    assert row["_deleted"] is True and row["_binlog_offset"] == delete.binlog_offset
    assert row["amount"] == Decimal(insert.content["amount"])  # the last values are kept


def test_redis_projection_ttl_and_tombstone_ttl(mirror_settings: Settings) -> None:
    settings = mirror_settings.model_copy(
        update={
            "tables": [table_mirror(redis_columns=["amount", "note"], redis_ttl_s=3600)],
            "mirror": mirror_settings.mirror.model_copy(update={"tombstone_ttl_s": 60}),
        }
    )
    workload = Workload(random.Random(9))
    first, second = workload.step(), workload.step()
    while second.event_type is not EventType.INSERT:
        second = workload.step()
    delete = workload._message(
        (second.schema_name, second.table_name), EventType.DELETE, dict(second.content)
    )
    router = _router(settings, "redis")
    applier = _applier(settings, "redis")
    try:
        applier.apply_batch(_changes(router, [first, second, delete]))
    finally:
        applier.close()
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    live_key = redis_key(settings.redis.key_prefix, LOGICAL, [first.content["id"]])
    dead_key = redis_key(settings.redis.key_prefix, LOGICAL, [second.content["id"]])
    assert 3500 < client.ttl(live_key) <= 3600
    assert 0 < client.ttl(dead_key) <= 60
    client.close()
    assert live_redis_rows(settings, LOGICAL)[first.content["id"]] == {
        "amount": first.content["amount"],
        "note": first.content["note"],
    }


def test_redis_reloads_the_script_after_noscript(mirror_settings: Settings) -> None:
    workload = Workload(random.Random(4))
    router = _router(mirror_settings, "redis")
    applier = RedisApplier(mirror_settings.redis, mirror_settings.mirror, mirror_settings.tables)
    try:
        # As after a Redis restart: the SHA the applier holds is unknown to the server.
        applier._sha = "0" * 40
        messages = workload.messages(300)  # several calls of 50 keys, all sent again
        assert applier.apply_batch(_changes(router, messages)).applied > 0
        assert applier._sha != "0" * 40
    finally:
        applier.close()
    _assert_equal(mirror_settings, "redis", _reference(router, messages))


def test_unreachable_targets_fail_with_one_sentence(mirror_settings: Settings) -> None:
    from pydantic import SecretStr

    from simple_binlog.errors import ConfigError, ServiceUnavailableError

    redis_settings = mirror_settings.redis.model_copy(
        update={"url": SecretStr("redis://127.0.0.1:1/0")}
    )
    with pytest.raises(
        ServiceUnavailableError, match=r"^Redis at 127\.0\.0\.1:1 cannot be reached \(Error 111"
    ):
        RedisApplier(redis_settings, mirror_settings.mirror, mirror_settings.tables)
    wrong = mirror_settings.postgres.model_copy(update={"password": SecretStr("not-the-password")})
    with pytest.raises(
        ConfigError, match=r"PostgreSQL refused user 'cdc'; check postgres\.user"
    ) as info:
        WarehouseApplier(wrong, mirror_settings.mirror, mirror_settings.tables)
    assert "not-the-password" not in str(info.value)


def test_a_refused_batch_names_no_values_and_the_next_batch_applies(
    mirror_settings: Settings,
) -> None:
    from simple_binlog.errors import ServiceUnavailableError

    workload = Workload(random.Random(6))
    good = workload.messages(5)
    bad = workload._message(
        ("shop_00", "orders_00"),
        EventType.INSERT,
        {**good[0].content, "id": "18446744073709999999", "amount": "secret-ish"},
    )
    router = _router(mirror_settings, "warehouse")
    applier = _applier(mirror_settings, "warehouse")
    try:
        applier.apply_batch(_changes(router, good))
        with pytest.raises(
            ServiceUnavailableError, match=r"^the warehouse refused a batch \("
        ) as info:
            applier.apply_batch(_changes(router, [bad]))
        assert "secret-ish" not in str(info.value)
        assert "numeric, column amount" in str(info.value)
        later = workload.messages(5)
        assert applier.apply_batch(_changes(router, later)).applied > 0
    finally:
        applier.close()
    assert "18446744073709999999" not in pg_rows(mirror_settings, LOGICAL)
