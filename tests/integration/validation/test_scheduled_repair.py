"""The scheduler's validation job of a table mirror with ``validation: repair`` (issue 25,
items 3 and 4): the real scheduler loop (``Scheduler.tick``) starts the real ``cdc-mirror
validate`` child (``CommandJobs``) against the real MariaDB, Kafka and Redis mirror, with drift
induced in Redis while a light workload writes on the source.

* Above the mirror's cap (``validation_repair_max_keys``) nothing is published: the run is a
  mismatch that says why, each differing key reported, no MOCK event on the topic.
* With the cap raised, the next run on the cadence re-publishes exactly the differing keys as
  MOCK events through the stream; the mirror applies them, the re-check finds them equal, the
  run succeeds with its repair recorded, and the metrics count the target as equal.

The pipeline's history is an hour old, so the repair's MOCK events win over the drifted copies
(``mock_replay.keys``); the collector's part is the harness's pump."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import orjson
import pytest

from cdc_platform.config import SchedulerSettings, Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.control import MemoryRunStore
from cdc_platform.kafka import read_to_end
from scheduler.jobs import CommandJobs, MemoryLake
from scheduler.service import Scheduler
from tests.integration.validation.harness import (
    BASE,
    Pipeline,
    Workload,
    drift_redis,
    make_pipeline,
    wait_until,
)

TODAY = date(2026, 11, 26)


@pytest.fixture()
def aged(mirror_settings: Settings) -> Iterator[Pipeline]:
    """The pipeline with an hour-old history, pumped continuously."""
    for flow in make_pipeline(mirror_settings, history_age_s=3600):
        flow.pump_continuously()
        yield flow


def _mock_keys(pipeline: Pipeline) -> list[int]:
    return sorted(
        int(orjson.loads(record.value)["content"]["id"])
        for record in read_to_end(pipeline.settings.kafka, pipeline.scene.topic)
        if record.value is not None and b'"source":"MOCK"' in record.value
    )


@pytest.mark.timeout(600)
def test_the_scheduler_repairs_up_to_the_cap_and_only_reports_above_it(
    aged: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = aged.settings
    table = settings.tables[0].name
    # The child `cdc-mirror validate` reads the pipeline's topic, Redis prefix and table.
    env = aged.scene.env(CDC_MIRROR_TABLES=json.dumps([t.model_dump() for t in settings.tables]))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    mirror = TableMirror.model_validate(
        {
            **settings.tables[0].model_dump(),
            "validation": "repair",
            "validation_repair_max_keys": 2,
            "validation_targets": ["redis"],
            "validation_every_h": 1,
        }
    )
    config = {"snapshot": ConfigSnapshot(version=1, tables=(mirror,))}
    jobs = CommandJobs(
        settings.model_copy(update={"stack": settings.stack.model_copy(update={"home": tmp_path})}),
        lambda: config["snapshot"],
        None,
    )
    store = MemoryRunStore()
    clock = {"now": 1_000_000.0}
    scheduler = Scheduler(
        SchedulerSettings(validation=True),
        lambda: list(config["snapshot"].tables),
        MemoryLake(),
        jobs,
        store,
        "test-scheduler",
        clock=lambda: clock["now"],
        today=lambda: TODAY,
    )
    changed, deleted, extra = BASE + 3, BASE + 77, BASE + 10_000
    drift_redis(settings, table, changed, deleted, extra)

    with Workload(aged, rate=5.0) as workload:
        wait_until(lambda: workload.statements >= 3, 30, "the workload did not start")
        # Three keys differ, the cap is two: reported, nothing published.
        assert scheduler.tick(threading.Event()) == 1
        [capped] = store.runs
        log = (tmp_path / "scheduler" / f"validation-{table}-{TODAY}.log").read_text()
        assert capped.state == "mismatch", (capped, log)
        [redis] = capped.validation or []
        assert (redis.missing, redis.extra, redis.different) == (1, 1, 1), log
        assert redis.repaired is None
        assert redis.repair_skipped is not None
        assert "3 keys differ, more than the 2 a repair may re-publish" in redis.repair_skipped
        assert capped.error == f"the validation found a difference; {redis.repair_skipped}"
        assert _mock_keys(aged) == []
        metrics = scheduler.metrics
        labels = {"table": table, "target": "redis"}
        assert metrics.registry.get_sample_value("cdc_validation_repair_skipped", labels) == 1
        assert metrics.registry.get_sample_value("cdc_validation_mismatched_rows", labels) == 3

        # The cap raised in the mirror's settings; the next run on the cadence repairs.
        mirror = mirror.model_copy(update={"validation_repair_max_keys": 10})
        config["snapshot"] = ConfigSnapshot(version=2, tables=(mirror,))
        clock["now"] += 3600
        assert scheduler.tick(threading.Event()) == 1
        repaired = store.runs[-1]
        log = (tmp_path / "scheduler" / f"validation-{table}-{TODAY}.log").read_text()
        assert repaired.state == "succeeded", (repaired, log)
        [redis] = repaired.validation or []
        assert (redis.verdict, redis.repaired, redis.still_differing) == ("differs", 3, 0), log
        assert redis.repair_skipped is None
        assert "3 of 3 keys equal after the repair" in log
    # Exactly the differing keys went through the stream, as MOCK events.
    assert _mock_keys(aged) == sorted([changed, deleted, extra])
    assert metrics.registry.get_sample_value("cdc_validation_mismatched_rows", labels) == 0
    assert metrics.registry.get_sample_value("cdc_validation_repaired_keys_total", labels) == 3
    assert metrics.registry.get_sample_value("cdc_validation_repair_skipped", labels) == 0
    assert (
        metrics.registry.get_sample_value("cdc_validation_last_success_timestamp_seconds", labels)
        == clock["now"]
    )
