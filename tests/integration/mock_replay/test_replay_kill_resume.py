"""``cdc-mirror replay`` killed with SIGKILL at random points and resumed with ``--resume``:
a read_committed consumer sees every row exactly once (no duplicates, no gaps).

The CI run kills 3 times (``CDC_TEST_MOCK_REPLAY_KILLS`` sets another number; with
``CDC_TEST_MOCK_REPLAY_FULL=1`` it kills 8 times on a larger table set). Kill points are
random times after the process has started publishing (the topic's end offsets grew), so
they land between and inside its chunk transactions; the rate limit stretches the run so
that every kill lands before its end. The kill points are printed in the test's output; a
failure can be replayed with ``CDC_TEST_MOCK_REPLAY_SEED``. Each case runs once with one
reader and once with two reader processes.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from simple_binlog.naming import topic_name
from tests.integration.mock_replay.helpers import Shards, end_offsets, read_topic

ROOT = Path(__file__).resolve().parents[3]
FULL = os.environ.get("CDC_TEST_MOCK_REPLAY_FULL") == "1"
KILLS = int(os.environ.get("CDC_TEST_MOCK_REPLAY_KILLS", "8" if FULL else "3"))
ROWS = 2000 if FULL else 500
COLUMNS = "id INT NOT NULL PRIMARY KEY, v VARCHAR(40), d DECIMAL(10,2)"
VALUES = "SELECT s.seq, CONCAT('v', s.seq, '-', {shard}), s.seq / 4"


def _start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "cdc_mirror", "replay", "--no-progress", *args]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


def _wait_for_text(
    process, log: Path, pattern: str, timeout_s: float = 120.0
) -> re.Match[str] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text())
        if found:
            return found
        if process.poll() is not None:
            return None
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {pattern!r}; log:\n{log.read_text()[-4000:]}")


def _wait_until_publishing(process, settings: Settings, topic: str, baseline: int) -> bool:
    """Until the topic's end offsets grow past ``baseline``: the process is producing rows."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if sum(end_offsets(settings, [topic]).values()) > baseline:
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.05)
    raise AssertionError("the replay did not start publishing within 120 s")


def _kill_at(process: subprocess.Popen[bytes], delay_s: float) -> bool:
    """SIGKILL after ``delay_s`` unless the process ends first; True if it was killed."""
    deadline = time.monotonic() + delay_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    # It may have ended by itself just before the signal.
    return process.wait() == -signal.SIGKILL


@pytest.mark.parametrize("workers", [1, 2], ids=["one-reader", "two-reader-processes"])
def test_killed_and_resumed_replay_publishes_each_row_once(
    kafka_settings: Settings, shards: Shards, tmp_path: Path, workers: int
) -> None:
    seed = int(os.environ.get("CDC_TEST_MOCK_REPLAY_SEED", str(random.randrange(10**6))))
    chooser = random.Random(seed)
    tables = shards.create(3, 2, COLUMNS, ROWS, VALUES)
    total = len(tables) * ROWS
    env = {
        **os.environ,
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": kafka_settings.kafka.topic_prefix,
        "COLUMNS": "200",  # one line per message in the log
    }
    common = [
        "--batch-size",
        "40",
        "--rate-limit",
        str(max(200, total // (2 * KILLS))),
        "--workers",
        str(workers),
    ]
    log = tmp_path / "replay.log"

    process = _start(env, log, "--db-prefix", shards.db, "--table-prefix", "orders", *common)
    started = _wait_for_text(process, log, r"replay run (\S+):")
    assert started is not None, log.read_text()
    run_id = started.group(1)
    topic = topic_name(kafka_settings.kafka, "local")
    kills = []
    for attempt in range(KILLS):
        if attempt:
            process = _start(env, log, "--resume", run_id, *common)
        baseline = sum(end_offsets(kafka_settings, [topic]).values())
        if not _wait_until_publishing(process, kafka_settings, topic, baseline):
            break
        delay = round(chooser.uniform(0.0, 1.0), 3)
        if not _kill_at(process, delay):
            break  # it finished first
        kills.append(delay)
    # A kill may also land after the run finished (while the process shut down).
    if f"replay run {run_id} done:" not in log.read_text():
        process = _start(env, log, "--resume", run_id)
        assert process.wait(240) == 0, log.read_text()[-4000:]
    print(f"seed {seed}: killed at {kills} s after publishing began")

    output = log.read_text()
    published_last = re.findall(rf"replay run {run_id} done: ([\d,]+) rows published", output)
    assert published_last, output[-4000:]
    assert len(kills) >= 1, "no kill landed while the replay ran"
    messages = read_topic(kafka_settings, topic_name(kafka_settings.kafka, "local"))
    keys = [(m.schema_name, m.table_name, m.content["id"]) for _, m in messages]
    duplicates = {k for k, n in Counter(keys).items() if n > 1}
    assert not duplicates, f"seed {seed}: published more than once: {sorted(duplicates)[:5]}"
    expected = {(t.split(".")[0], t.split(".")[1], i) for t in tables for i in range(1, ROWS + 1)}
    assert set(keys) == expected, f"seed {seed}: missing {sorted(expected - set(keys))[:5]}"
