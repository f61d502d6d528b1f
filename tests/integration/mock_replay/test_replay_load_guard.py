"""The replay pauses while the server is busy (Threads_running above the limit), says so in
the log, and goes on when the load is gone. Busy threads are real: connections running
SELECT SLEEP(). (Replica lag is decided by the same guard; the local stack has no replica,
so that branch is covered by the unit tests of ``overload_reason``.)"""

from __future__ import annotations

import logging
import threading
import time

from cdc_platform.config import Settings
from mock_replay.runner import ReplayRequest
from tests.integration.mock_replay.helpers import Shards, admin, replay_to_memory

BUSY = 6
SLEEP_S = 3


def _threads_running(settings: Settings) -> int:
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Threads_running'")
        return int(cursor.fetchone()[1])


def test_replay_pauses_while_the_server_is_busy(
    local_stack: Settings, shards: Shards, caplog
) -> None:
    shards.create(1, 1, "id INT PRIMARY KEY", 50, "SELECT s.seq")
    replay = local_stack.replay.model_copy(
        update={"max_threads_running": BUSY - 2, "pause_poll_s": 0.2}
    )
    settings = local_stack.model_copy(update={"replay": replay})

    def sleeper() -> None:
        with admin(local_stack) as conn, conn.cursor() as cursor:
            cursor.execute(f"SELECT SLEEP({SLEEP_S})")

    sleepers = [threading.Thread(target=sleeper) for _ in range(BUSY)]
    for thread in sleepers:
        thread.start()
    deadline = time.monotonic() + 10
    while _threads_running(local_stack) < BUSY:
        assert time.monotonic() < deadline, "the busy connections did not start"
        time.sleep(0.05)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="cdc_platform.load_guard"):
        messages, _, _ = replay_to_memory(
            settings, ReplayRequest("local", shards.db, "orders", batch_size=10)
        )
    elapsed = time.monotonic() - started
    for thread in sleepers:
        thread.join()

    assert len(messages) == 50
    paused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("replay paused")]
    assert paused and f"more than the limit of {BUSY - 2}" in paused[0]
    assert any(r.getMessage().startswith("replay resumed after a pause") for r in caplog.records)
    assert elapsed >= 1.0  # it waited for the sleepers rather than reading through them
