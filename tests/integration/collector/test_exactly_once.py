"""Exactly once into Kafka across kill -9: no loss, no duplicate, the same binlogOffsets.

A workload of single-row autocommits, multi-row transactions and transactions larger than 40
Kafka transactions runs while the collector is killed with SIGKILL, at random moments and
right after it committed part of a split transaction, and restarted: 20 kills during a load
of at least 200,000 row changes (CDC_TEST_COLLECTOR_KILLS and CDC_TEST_COLLECTOR_ROWS change
both). At the end a read_committed consumer must see exactly the changes a clean read of the
same binlog range yields, in binlog order per table, with identical binlogOffsets.
"""

from __future__ import annotations

import os
import random
import threading

from tests.integration.collector.harness import CollectorScene, admin, assert_exactly_once, reached

KILLS = int(os.environ.get("CDC_TEST_COLLECTOR_KILLS", "20"))
ROWS = int(os.environ.get("CDC_TEST_COLLECTOR_ROWS", "200000"))
PORT = 29121


def run_workload(
    scene: CollectorScene,
    stop: threading.Event,
    big_every: int = 8,
    pace_s: float = 0.0,
    written: list[int] | None = None,
    limit: int | None = None,
) -> None:
    """Until ``stop`` (or ``limit`` rows changed): autocommits, small transactions over two
    tables, and every ``big_every``-th round a transaction of 20,000 rows; ``pace_s`` between
    rounds. The rows changed so far are kept in ``written[0]``."""
    written = written if written is not None else [0]
    rng = random.Random(7)
    db = scene.db
    with admin(scene.settings) as conn, conn.cursor() as cursor:
        ids: list[int] = []
        next_id = 1
        round_ = 0
        while not stop.is_set() and (limit is None or written[0] < limit):
            round_ += 1
            for _ in range(50):
                action = rng.random()
                if action < 0.6 or not ids:
                    written[0] += cursor.execute(
                        f"INSERT INTO {db}.a VALUES (%s, %s, NOW(6))", (next_id, f"r{next_id}")
                    )
                    ids.append(next_id)
                    next_id += 1
                elif action < 0.85:
                    written[0] += cursor.execute(
                        f"UPDATE {db}.a SET v = %s WHERE id = %s", (f"u{round_}", rng.choice(ids))
                    )
                else:
                    written[0] += cursor.execute(
                        f"DELETE FROM {db}.a WHERE id = %s", (ids.pop(rng.randrange(len(ids))),)
                    )
            conn.begin()
            changed = cursor.executemany(
                f"INSERT INTO {db}.b (v) VALUES (%s)", [(f"b{round_}-{i}",) for i in range(40)]
            )
            changed += cursor.execute(
                f"UPDATE {db}.a SET v = 'tx' WHERE id %% 7 = %s", (round_ % 7,)
            )
            conn.commit()
            written[0] += changed
            stop.wait(pace_s)
            if big_every and round_ % big_every == 1:
                conn.begin()
                changed = cursor.executemany(
                    f"INSERT INTO {db}.b (v) VALUES (%s)", [(f"big-{i}",) for i in range(20_000)]
                )
                conn.commit()
                written[0] += changed


def background(
    scene: CollectorScene, written: list[int] | None = None, **options
) -> tuple[threading.Thread, threading.Event, list]:
    stop = threading.Event()
    failures: list[BaseException] = []

    def target() -> None:
        try:
            run_workload(scene, stop, written=written, **options)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's assertion
            failures.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, stop, failures


def _committed_part_of_a_split_transaction(process, timeout_s: float) -> bool:
    """Whether this collector itself committed part of a split transaction (not merely
    resumed from one) before the time is up."""
    resumed_at = None
    outcome = False

    def condition() -> bool:
        nonlocal resumed_at, outcome
        health = process.health()
        committed = health and health["committed"]
        if not committed:
            return False
        here = (committed["gtid"], committed["partial"], committed["rowsDone"])
        if resumed_at is None:
            resumed_at = here
            return False
        outcome = bool(committed["partial"]) and here != resumed_at
        return outcome

    try:
        process.wait_for(condition, "a split transaction", timeout_s)
    except AssertionError:
        return False
    return outcome


def test_kill_9_at_random_points_loses_and_duplicates_nothing(scene: CollectorScene) -> None:
    rng = random.Random(4242)
    written = [0]
    thread, stop, failures = background(scene, written, limit=ROWS)
    split_kills = 0
    for kill in range(KILLS):
        collector = scene.collector(PORT).start()
        if kill % 3 == 2:
            split_kills += _committed_part_of_a_split_transaction(collector, 20.0)
        else:
            threading.Event().wait(rng.uniform(0.5, 3.0))  # fault injection: a random moment
        collector.kill()
    stop.set()
    thread.join()
    assert failures == []
    end = scene.position_now()

    final = scene.collector(PORT).start()
    final.wait_for(
        lambda: reached(final.committed_gtid(), end.gtid), "the final collector to catch up", 300
    )
    final.stop()

    expected = scene.expected(end)
    # The load stops by itself after ROWS rows; the kills fall while the collector works
    # through it (much of it arrives faster than one collector publishes).
    assert len(expected) == written[0] >= ROWS
    assert_exactly_once(scene.received(len(expected)), expected)
    resumed = [
        line
        for line in scene.processes[0].log.read_text().splitlines()
        if "resumes after GTID" in line
    ]
    # A collector killed while still fencing its predecessor never gets to resume.
    assert 2 <= len(resumed) <= KILLS + 1
    assert split_kills >= 1 and any("rows done 0 " not in line for line in resumed)
