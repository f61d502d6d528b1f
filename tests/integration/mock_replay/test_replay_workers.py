"""Several reader processes share a run's tables; a run of the CLI is cancelled from another
process (the web admin's API) through the progress topic."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from cdc_platform.config import Settings
from mock_replay.api import ReplayService
from mock_replay.runner import ReplayRequest
from simple_binlog.naming import topic_name
from tests.integration.mock_replay.helpers import Shards, end_offsets, read_topic

ROOT = Path(__file__).resolve().parents[3]
COLUMNS = "id INT NOT NULL PRIMARY KEY, v VARCHAR(20)"
VALUES = "SELECT s.seq, CONCAT('v', s.seq)"


def test_two_reader_processes_replay_every_table_once(
    kafka_settings: Settings, shards: Shards
) -> None:
    tables = shards.create(2, 3, COLUMNS, 300, VALUES)
    service = ReplayService(kafka_settings)

    run_id = service.start(ReplayRequest("local", shards.db, "orders", batch_size=70, workers=2))
    outcome = service.wait(run_id, timeout_s=240)

    assert outcome is not None and outcome.state == "done" and outcome.rows == 1800
    status = service.status(run_id)
    assert status.spec.workers == 2
    assert {name: t.rows_done for name, t in status.tables.items()} == dict.fromkeys(tables, 300)
    messages = read_topic(kafka_settings, topic_name(kafka_settings.kafka, "local"))
    keys = Counter((m.schema_name, m.table_name, m.content["id"]) for _, m in messages)
    assert len(keys) == 1800 and set(keys.values()) == {1}


def test_a_cli_run_is_cancelled_by_the_api_of_another_process(
    kafka_settings: Settings, shards: Shards, tmp_path: Path
) -> None:
    shards.create(1, 2, COLUMNS, 500, VALUES)
    log = tmp_path / "replay.log"
    env = {
        **os.environ,
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": kafka_settings.kafka.topic_prefix,
        "COLUMNS": "200",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "cdc_mirror", "replay", "--db-prefix", shards.db, "--table-prefix",
         "orders", "--batch-size", "20", "--rate-limit", "100", "--no-progress"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        topic = topic_name(kafka_settings.kafka, "local")
        deadline = time.monotonic() + 120
        while sum(end_offsets(kafka_settings, [topic]).values()) == 0:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        run_id = re.search(r"replay run (\S+):", log.read_text()).group(1)

        ReplayService(kafka_settings).cancel(run_id)

        assert process.wait(60) == 130, log.read_text()  # cancelled (ExitCode.INTERRUPTED)
    finally:
        if process.poll() is None:
            process.kill()
    assert f"replay run {run_id} cancelled" in log.read_text()
    status = ReplayService(kafka_settings).status(run_id)
    assert status.state_name == "cancelled" and status.cancel_requested
    assert 0 < status.rows_done < 1000
    assert len(read_topic(kafka_settings, topic)) == status.rows_done
