"""Exactly once into Kafka across kill -9: no loss, no duplicate, the same binlogOffsets.

A workload of single-row autocommits, multi-row transactions and one transaction larger than
a Kafka transaction runs while the collector is killed with SIGKILL at random moments and
restarted. At the end a read_committed consumer must see exactly the changes a clean read of
the same binlog range yields, in binlog order per table, with identical binlogOffsets.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path

import pymysql
from confluent_kafka import Consumer

from collector.position import parse_gtid
from collector.reader import read_range, server_position
from simple_binlog.config import Settings
from simple_binlog.kafka import consumer_config, topic_name
from simple_binlog.message import decode_message
from simple_binlog.offsets import OffsetGenerator

KILLS = int(os.environ.get("CDC_TEST_COLLECTOR_KILLS", "8"))
ROOT = Path(__file__).resolve().parents[3]
METRICS_PORT = 39121


def _admin(settings: Settings):
    return pymysql.connect(
        host="127.0.0.1",
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
    )


def _workload(settings: Settings, db: str, rng: random.Random, stop: threading.Event) -> None:
    """Runs until ``stop``: autocommits, small transactions, and every 8th round a transaction
    of 20,000 rows, larger than 40 Kafka transactions (max_rows_per_transaction=500)."""
    with _admin(settings) as conn, conn.cursor() as cursor:
        ids: list[int] = []
        next_id = 1
        round_ = 0
        while not stop.is_set():
            round_ += 1
            for _ in range(50):  # single-row autocommits
                action = rng.random()
                if action < 0.6 or not ids:
                    cursor.execute(
                        f"INSERT INTO {db}.a VALUES (%s, %s, NOW(6))", (next_id, f"r{next_id}")
                    )
                    ids.append(next_id)
                    next_id += 1
                elif action < 0.85:
                    cursor.execute(
                        f"UPDATE {db}.a SET v = %s WHERE id = %s", (f"u{round_}", rng.choice(ids))
                    )
                else:
                    cursor.execute(
                        f"DELETE FROM {db}.a WHERE id = %s", (ids.pop(rng.randrange(len(ids))),)
                    )
            conn.begin()  # a multi-row transaction over two tables
            cursor.executemany(
                f"INSERT INTO {db}.b (v) VALUES (%s)", [(f"b{round_}-{i}",) for i in range(40)]
            )
            cursor.execute(f"UPDATE {db}.a SET v = 'tx' WHERE id %% 7 = %s", (round_ % 7,))
            conn.commit()
            if round_ % 8 == 1:
                conn.begin()
                cursor.executemany(
                    f"INSERT INTO {db}.b (v) VALUES (%s)", [(f"big-{i}",) for i in range(20_000)]
                )
                conn.commit()


def _start_collector(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdc_mirror",
            "collector",
            "run",
            "--no-ha",
            "--metrics-port",
            str(METRICS_PORT),
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def _committed() -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/health", timeout=2) as r:
            return json.loads(r.read())["committed"]
    except OSError:
        return None


def _committed_gtid() -> str | None:
    committed = _committed()
    return committed["gtid"] if committed and committed["partial"] is None else None


def _kill_inside_a_split_transaction(deadline_s: float) -> bool:
    """Wait until this collector has itself committed part of a split MySQL transaction
    (not merely resumed from one)."""
    deadline = time.monotonic() + deadline_s
    resumed_at = None
    while time.monotonic() < deadline:
        committed = _committed()
        if committed is not None:
            here = (committed["gtid"], committed["partial"], committed["rowsDone"])
            if resumed_at is None:
                resumed_at = here
            elif committed["partial"] and here != resumed_at:
                return True
        time.sleep(0.02)
    return False


def _reached(gtid_position: str | None, target: str) -> bool:
    if not gtid_position:
        return False
    have = {parse_gtid(g)[0]: parse_gtid(g)[2] for g in gtid_position.split(",")}
    return all(have.get(parse_gtid(g)[0], -1) >= parse_gtid(g)[2] for g in target.split(","))


def test_kill_9_at_random_points_loses_and_duplicates_nothing(
    local_stack: Settings, tmp_path: Path
) -> None:
    db = f"eo_{uuid.uuid4().hex[:8]}"
    prefix = f"eo{uuid.uuid4().hex[:6]}."
    with _admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {db}")
        cursor.execute(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v VARCHAR(20), t DATETIME(6))")
        cursor.execute(f"CREATE TABLE {db}.b (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
        start = server_position(cursor)
    env = {
        **os.environ,
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": prefix,
        "CDC_MIRROR_COLLECTOR__START": start.gtid,
        "CDC_MIRROR_COLLECTOR__INCLUDE": json.dumps([rf"{db}\..*"]),
        "CDC_MIRROR_COLLECTOR__MAX_ROWS_PER_TRANSACTION": "500",
    }
    log = tmp_path / "collector.log"
    rng = random.Random(4242)
    failures: list[BaseException] = []
    stop_workload = threading.Event()

    def run_workload() -> None:
        try:
            _workload(local_stack, db, random.Random(7), stop_workload)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    workload = threading.Thread(target=run_workload)
    workload.start()
    kills = 0
    split_kills = 0
    while kills < KILLS:
        process = _start_collector(env, log)
        if kills % 3 == 2:
            split_kills += _kill_inside_a_split_transaction(20.0)
        else:
            time.sleep(rng.uniform(0.5, 3.0))  # fault injection: the kill lands at random
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
    stop_workload.set()
    workload.join()
    assert failures == []
    with _admin(local_stack) as conn, conn.cursor() as cursor:
        stop = server_position(cursor)
        cursor.execute(f"SELECT count(*) FROM {db}.b")
        b_rows = cursor.fetchone()[0]

    final = _start_collector(env, log)
    try:
        deadline = time.monotonic() + 180
        while not _reached(_committed_gtid(), stop.gtid) and time.monotonic() < deadline:
            assert final.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        assert _reached(_committed_gtid(), stop.gtid), log.read_text()[-3000:]
    finally:
        final.send_signal(signal.SIGTERM)
        final.wait(30)

    expected = list(read_range(local_stack.instances[0], start.gtid, stop, OffsetGenerator(), [db]))
    kafka = local_stack.kafka.model_copy(update={"topic_prefix": prefix})
    consumer = Consumer(consumer_config(kafka, group_id=f"eo-{uuid.uuid4().hex[:8]}"))
    consumer.subscribe([topic_name(kafka, local_stack.instances[0].name)])
    received = []
    deadline = time.monotonic() + 60
    while len(received) < len(expected) and time.monotonic() < deadline:
        received += [
            decode_message(r.value()) for r in consumer.consume(5000, 1.0) if r.error() is None
        ]
    received += [decode_message(r.value()) for r in consumer.consume(100, 3.0) if r.error() is None]
    consumer.close()

    assert b_rows >= 20_000
    assert len(expected) > 20_000
    resumed = [line for line in log.read_text().splitlines() if "resumes after GTID" in line]
    # A collector killed while still fencing its predecessor never gets to resume.
    assert 2 <= len(resumed) <= KILLS + 1
    progress_points = {line.split("resumes after GTID ")[1] for line in resumed}
    assert len(progress_points) >= KILLS // 3, "the killed collectors made too little progress"
    assert split_kills >= 1 and any("rows done 0 " not in line for line in resumed)
    assert len(received) == len(expected), f"{len(received)} received, {len(expected)} expected"

    def identity(message):
        return (
            message.binlog_offset,
            message.table_name,
            message.event_type,
            tuple(sorted(message.content.items())),
        )

    assert sorted(map(identity, received)) == sorted(map(identity, expected))
    per_table_received = defaultdict(list)
    per_table_expected = defaultdict(list)
    for message in received:
        per_table_received[message.table_name].append(message.binlog_offset)
    for message in expected:
        per_table_expected[message.table_name].append(message.binlog_offset)
    assert per_table_received == per_table_expected  # binlog order within each table
    assert kills == KILLS
