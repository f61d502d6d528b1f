"""Validation and repair while the source keeps changing (issue 25, items 2, 3 and 6).

The sharded table's history is an hour old in the binlog; the collector's part is a thread
pumping the binlog into Kafka and committing its position, the mirror's consumers apply it
to the warehouse and Redis, and a live workload writes on the source the whole time. Drift
is induced in each target: a value changed, a row deleted (a missing key), an extra row. The
production watermark is used (``PositionWatermark``: MySQL's position → the collector's
committed position → the mirror's group offsets).

* Every induced difference is found with its key and kind, and nothing else is reported
  although the workload's keys keep changing under the scan (no false positive).
* ``--repair`` re-publishes exactly those keys as MOCK events through Kafka (nothing is
  written to a target directly; the test asserts the events on the topic), both mirrors
  apply them under their version guard, and the re-check finds every key equal.
* Further full validations with the workload still running report every target equal.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from cdc_mirror.validate import exit_code, outcome_lines, replay_repairer
from cdc_platform.config import Settings
from cdc_platform.kafka import read_to_end
from simple_binlog.errors import ExitCode
from tests.integration.validation.harness import (
    BASE,
    Pipeline,
    Workload,
    drift_redis,
    drift_warehouse,
    make_pipeline,
    wait_until,
)
from validation.plan import Difference
from validation.progress import MemoryProgress
from validation.run import Options, validate_table


@pytest.fixture()
def aged(mirror_settings: Settings) -> Iterator[Pipeline]:
    """The pipeline with an hour-old history, pumped continuously."""
    for flow in make_pipeline(mirror_settings, history_age_s=3600):
        flow.pump_continuously()
        yield flow


def _repair_events(pipeline: Pipeline) -> list[dict[str, object]]:
    return [
        orjson.loads(record.value)
        for record in read_to_end(pipeline.settings.kafka, pipeline.scene.topic)
        if record.value is not None and b'"source":"MOCK"' in record.value
    ]


@pytest.mark.timeout(600)
def test_drift_is_found_and_repaired_through_the_stream_while_writes_continue(
    aged: Pipeline,
) -> None:
    settings = aged.settings
    table = settings.tables[0].name
    options = Options.from_settings(settings, chunk_rows=25, leaf_rows=8, window_s=0.5)
    warehouse_keys = (BASE + 3, BASE + 77, BASE + 10_000)  # changed, deleted, extra
    redis_keys = (BASE + 103, BASE + 78, BASE + 10_001)
    store = MemoryProgress()

    with Workload(aged) as workload:
        wait_until(lambda: workload.statements >= 20, 30, "the workload did not start")
        drift_warehouse(settings, table, *warehouse_keys)
        drift_redis(settings, table, *redis_keys)

        result = validate_table(
            settings,
            table,
            ["warehouse", "redis"],
            options,
            repair=replay_repairer(settings),
            store=store,
        )
        text = "\n".join(outcome_lines(result))
        found = {
            r.target: {(k.key[0], k.difference) for k in r.differences} for r in result.reports
        }
        assert found == {
            "warehouse": {
                (warehouse_keys[0], Difference.DIFFERENT),
                (warehouse_keys[1], Difference.MISSING),
                (warehouse_keys[2], Difference.EXTRA),
            },
            "redis": {
                (redis_keys[0], Difference.DIFFERENT),
                (redis_keys[1], Difference.MISSING),
                (redis_keys[2], Difference.EXTRA),
            },
        }, text
        assert all(not r.unsettled for r in result.reports), text
        # The repair went through the stream: exactly the six keys, as MOCK events.
        assert result.repair is not None
        assert sorted(int(str(k[0])) for k in result.repair.keys) == sorted(
            warehouse_keys + redis_keys
        )
        events = _repair_events(aged)
        assert sorted(int(str(e["content"]["id"])) for e in events) == sorted(  # type: ignore[index]
            warehouse_keys + redis_keys
        ), events
        deletes = {int(str(e["content"]["id"])) for e in events if e["eventType"] == "DELETE"}  # type: ignore[index]
        assert deletes == {warehouse_keys[2], redis_keys[2]}
        # Both mirrors applied them: every key equal in every target afterwards.
        assert [r.target for r in result.after_repair] == ["warehouse", "redis"]
        assert all(r.equal for r in result.after_repair), text
        assert result.converged and exit_code(result) == ExitCode.OK, text
        assert "6 of 6 keys equal after the repair" in text

        # Longer under the workload: whole validations find nothing (no false positive).
        rounds = 0
        while rounds < 3:
            again = validate_table(settings, table, ["warehouse", "redis"], options)
            assert again.equal, "\n".join(outcome_lines(again))
            rounds += 1
        assert workload.statements > 100
        in_flight = sum(r.in_flight for r in again.reports)
    assert store.saves >= 2 and all(p.done for p in store.records.values())
    print(f"workload statements: {workload.statements}; last round in flight: {in_flight}")
