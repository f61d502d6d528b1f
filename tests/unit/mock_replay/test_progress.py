"""Progress records: JSON round trips, the fold from topic records to run status, the
memory fakes, the pure parts of the MySQL side (load decisions, LIKE prefixes, HOST:PORT)."""

from __future__ import annotations

import pytest

from cdc_platform.load_guard import LoadSample, overload_reason
from mock_replay.progress import RunSpec, RunState, TableProgress, cancel_key, fold
from mock_replay.publish import MemoryChunkPublisher, MemoryProgressStore, transactional_id
from mock_replay.source import like_prefix, parse_host_port
from simple_binlog.errors import ConfigError, ContractError, ServiceUnavailableError

SPEC = RunSpec(
    run_id="r1",
    instance="local",
    db_prefix="ordercenter",
    table_prefix="orderinfo",
    condition="id > 5",
    execute_day="2026-11-21",
    query_start=1_795_340_000,
    batch_size=100,
    workers=2,
    tables=(
        "ordercenter_00.orderinfo_00",
        "ordercenter_00.orderinfo_01",
        "ordercenter_01.orderinfo_00",
    ),
    created_ms=5,
)


def _json(record):
    return record.key, record.to_json()


def test_records_round_trip_through_json() -> None:
    progress = TableProgress("r1", "a.b", ("id", "k"), ("7", 3), 10, 20, "running", 9)
    assert RunSpec.from_json(SPEC.to_json()) == SPEC
    assert TableProgress.from_json(progress.to_json()) == progress
    state = RunState("r1", "failed", 3, "Kafka failed.")
    assert RunState.from_json(state.to_json()) == state


def test_tables_are_dealt_to_workers_round_robin() -> None:
    assert SPEC.worker_tables(0) == ("ordercenter_00.orderinfo_00", "ordercenter_01.orderinfo_00")
    assert SPEC.worker_tables(1) == ("ordercenter_00.orderinfo_01",)


def test_fold_keeps_the_latest_record_of_each_key() -> None:
    first = TableProgress("r1", "a.b", ("id",), (10,), 10, 100, "running")
    later = first.advanced((20,), 10)
    other_spec = RunSpec.from_json({**SPEC.to_json(), "runId": "r2"})
    records = [
        _json(SPEC),
        _json(first),
        _json(RunState("r1", "running")),
        _json(other_spec),
        _json(later),
        (cancel_key("r2"), {"runId": "r2"}),
        _json(RunState("r1", "done")),
        (b"table/orphan/x.y", TableProgress("orphan", "x.y", ("id",)).to_json()),
        (b"state/r2", None),  # a tombstone
    ]
    runs = fold(records)
    assert set(runs) == {"r1", "r2"}  # progress without a spec is not a run
    r1 = runs["r1"]
    assert r1.tables["a.b"].last_key == (20,)
    assert r1.rows_done == 20 and r1.estimated_rows == 100
    assert r1.state_name == "done" and not r1.cancel_requested
    assert runs["r2"].cancel_requested and runs["r2"].state_name == "running"
    document = r1.to_json()
    assert document["rowsDone"] == 20 and document["tableProgress"][0]["lastKey"] == [20]


def test_a_malformed_record_is_named() -> None:
    with pytest.raises(ContractError, match="'run/r9' is malformed"):
        fold([(b"run/r9", {"runId": "r9"})])


def test_memory_publisher_commits_rows_with_progress_or_nothing() -> None:
    store = MemoryProgressStore()
    store.write(SPEC.key, SPEC.to_json())
    publisher = MemoryChunkPublisher(store)
    progress = TableProgress("r1", "a.b", ("id",))
    publisher.publish(b"a.b", [b"{}"], progress.advanced((1,), 1))
    publisher.fail_after = 1
    with pytest.raises(ServiceUnavailableError):
        publisher.publish(b"a.b", [b"{}"], progress.advanced((2,), 2))
    assert publisher.rows == [(b"a.b", b"{}")]
    assert store.run("r1").tables["a.b"].last_key == (1,)


def test_transactional_id_is_fixed_per_run_and_worker() -> None:
    assert transactional_id("local", "r1", 3) == "cdc-replay.local.r1.3"


def test_overload_reasons() -> None:
    assert overload_reason(LoadSample(5), 32, 30) is None
    assert "runs 40 threads, more than the limit of 32" in str(
        overload_reason(LoadSample(40), 32, 30)
    )
    assert overload_reason(LoadSample(40), 0, 30) is None  # 0: no load limit
    assert overload_reason(LoadSample(1, 10), 32, 30) is None
    assert "120 s behind its primary" in str(overload_reason(LoadSample(1, 120), 32, 30))
    assert "replication is not running" in str(overload_reason(LoadSample(1, -1), 32, 30))


def test_like_prefix_matches_the_prefix_literally() -> None:
    assert like_prefix("order_center%") == "order\\_center\\%%"
    assert like_prefix("a\\b") == "a\\\\b%"


def test_replica_address_is_host_and_port() -> None:
    assert parse_host_port("10.0.0.5:3306") == ("10.0.0.5", 3306)
    assert parse_host_port("[::1]:3307") == ("::1", 3307)
    for bad in ("db", "db:", ":3306", "db:99999", "db:x"):
        with pytest.raises(ConfigError, match="is not in the form HOST:PORT"):
            parse_host_port(bad)
