"""Governance end to end on real services: planted sensitive values in a randomized workload
on a sharded table, collected by a collector process and replayed by ``cdc-mirror replay``,
both under mask/hash/drop policies from the config file; then the Redis and warehouse mirrors
apply the topic. No planted value may appear in the Kafka topic, Redis or the warehouse; every
planted value is detected and counted (detections topic and /metrics), near-misses are not.

The lake (stream writer) and the Hive snapshot (merge) run Spark:
``test_lake_and_snapshot_hold_no_plaintext`` takes a few minutes, and is part of every run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import redis
import yaml
from confluent_kafka import Consumer
from psycopg import sql

from cdc_platform.config import Settings, TableMirror
from cdc_platform.kafka import consumer_config
from collector.reader import server_position
from governance import DetectionRecord
from simple_binlog.control import is_control
from tests.integration.collector.harness import CollectorProcess, reached
from tests.integration.governance.workload import SALT, PlantedTable, admin
from tests.integration.mirror.harness import MirrorProcess, MirrorScene, free_port, wait_for
from tests.integration.mirror.targets import live_redis_rows, pg_connect, pg_rows

ROOT = Path(__file__).resolve().parents[3]
STEPS = 400


def _read_topic(
    settings: Settings, topic: str, at_least: int, timeout_s: float = 90
) -> list[bytes]:
    """Every record value of ``topic`` (read_committed), waiting for ``at_least``."""
    consumer = Consumer(consumer_config(settings.kafka, group_id=f"gv-{uuid.uuid4().hex[:8]}"))
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < at_least and time.monotonic() < deadline:
            values += [
                r.value()
                for r in consumer.consume(5000, 0.5)
                if r.error() is None and not is_control(r.key())
            ]
        # One more poll: nothing beyond what is expected may arrive.
        values += [
            r.value()
            for r in consumer.consume(1000, 2.0)
            if r.error() is None and not is_control(r.key())
        ]
    finally:
        consumer.close()
    return values


@pytest.fixture
def governed(local_stack: Settings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The planted table, a config file with the policies, and scoped targets."""
    table = PlantedTable(local_stack)
    table.create()
    mirror = TableMirror(
        db_prefix=table.prefix, table_prefix="users", targets=["warehouse", "redis"]
    )
    scoped = local_stack.model_copy(
        update={
            "redis": local_stack.redis.model_copy(update={"key_prefix": f"gv{table.tag}"}),
            "mirror": local_stack.mirror.model_copy(update={"warehouse_schema": f"gv_{table.tag}"}),
            "tables": [mirror],
        }
    )
    scene = MirrorScene(scoped, tag=table.tag)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "governance": {
                    "enabled": True,
                    "hash_salt": SALT,
                    "policies": table.policies(),
                }
            }
        )
    )
    with admin(local_stack) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
    env = scene.env(
        CDC_MIRROR_CONFIG=str(config),
        CDC_MIRROR_COLLECTOR__START=start.gtid,
        CDC_MIRROR_COLLECTOR__INCLUDE=json.dumps([rf"{table.prefix}_\d+\..*"]),
        CDC_MIRROR_COLLECTOR__MAX_ROWS_PER_TRANSACTION="200",
        CDC_MIRROR_ZOOKEEPER__ROOT=f"/cdc-test-{table.tag}",
    )
    processes: list[Any] = []
    yield {
        "table": table,
        "scene": scene,
        "env": env,
        "settings": scoped,
        "tmp": tmp_path,
        "processes": processes,
    }
    for process in processes:
        process.stop()
    table.drop()
    client = redis.Redis.from_url(scoped.redis.url.get_secret_value())
    for key in client.scan_iter(f"{scoped.redis.key_prefix}:*", count=1000):
        client.delete(key)
    client.close()
    with pg_connect(scoped) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(scoped.mirror.warehouse_schema)
            )
        )


def _mac(value: str) -> str:
    return hmac.new(SALT.encode(), value.encode(), hashlib.sha256).hexdigest()


def test_collector_replay_and_mirrors_carry_no_planted_plaintext(governed: dict[str, Any]) -> None:
    table: PlantedTable = governed["table"]
    scene: MirrorScene = governed["scene"]
    settings: Settings = governed["settings"]
    tmp: Path = governed["tmp"]

    port = free_port()
    collector = CollectorProcess(governed["env"], port, tmp / "collector.log").start()
    governed["processes"].append(collector)
    collector.wait_for(lambda: (collector.health() or {}).get("role") == "active", "active")
    table.run(STEPS)
    with admin(settings) as conn, conn.cursor() as cursor:
        end = server_position(cursor)
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "all committed")

    # -- the row topic: everything published, nothing planted ---------------------------------
    published = _read_topic(settings, scene.topic, table.changes)
    assert len(published) == table.changes
    text = b"\n".join(published).decode()
    assert table.leaks(text) == []
    assert all(miss in text for miss in table.misses)  # near-misses pass unmasked
    messages = [orjson.loads(value) for value in published]
    assert all("id_no" not in m["content"] and "id_no" not in m["columnTypes"] for m in messages)
    assert all(m["columnTypes"]["email"] == "char(64)" for m in messages)
    masked_phone = re.compile(r"^\*{7}\d{4}$")
    assert all(masked_phone.match(m["content"]["phone"]) for m in messages)

    # -- detections: every planted value counted, no near-miss ------------------------------
    records = [
        DetectionRecord.decode(value)
        for value in _read_topic(settings, f"{scene.topic}.detections", 1)
    ]
    counted: Counter[tuple[str, str]] = Counter()
    for record in records:
        counted[(record.column, record.detector)] += record.count
        assert record.logical_table == table.logical
    assert counted == table.detections
    assert not any(record.column == "note" for record in records)
    metrics = collector.metrics()
    phone_total = re.search(
        r'cdc_collector_detections_total\{[^}]*column="phone",detector="cn_mobile"[^}]*\} (\S+)',
        metrics,
    )
    assert phone_total is not None
    assert float(phone_total.group(1)) == table.detections[("phone", "cn_mobile")]

    # -- the replay: the live rows again as MOCK rows, through the same policies -------------
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdc_mirror",
            "replay",
            "--instance",
            "local",
            "--db-prefix",
            table.prefix,
            "--table-prefix",
            "users",
            "--no-progress",
        ],
        cwd=ROOT,
        env=governed["env"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    everything = _read_topic(settings, scene.topic, table.changes + len(table.live))
    replayed = [orjson.loads(v) for v in everything if b'"source":"MOCK"' in v]
    assert len(replayed) == len(table.live)
    assert table.leaks(b"\n".join(everything).decode()) == []
    assert all("id_no" not in m["content"] for m in replayed)
    mock_counts: Counter[str] = Counter()
    for value in _read_topic(settings, f"{scene.topic}.detections", len(records) + 1):
        record = DetectionRecord.decode(value)
        if record.source == "MOCK":
            mock_counts[record.column] += record.count
    # Each live row's five planted values detected once more, in the replay's transactions.
    assert mock_counts == dict.fromkeys(("phone", "email", "id_no", "card", "ip"), len(table.live))
    by_id = {int(m["content"]["id"]): m for m in replayed}
    for (_, _, row_id), row in table.live.items():
        assert by_id[row_id]["content"]["email"] == _mac(row["email"])
        assert by_id[row_id]["content"]["phone"] == "*******" + row["phone"][-4:]

    # -- the mirrors: Redis and the warehouse hold no plaintext -----------------------------
    for target in ("redis", "warehouse"):
        process = MirrorProcess(scene.env(), target, tmp / f"mirror-{target}.log").start()
        governed["processes"].append(process)
    # Caught up when both hold every live row at its last amount (the topic's transaction
    # markers keep the consumer groups' lag above zero, so lag says nothing here).
    expected = {str(key[2]): row["amount"] for key, row in table.live.items()}

    def redis_current() -> bool:
        rows = live_redis_rows(settings, table.logical)
        return {k: str(r["amount"]) for k, r in rows.items()} == expected

    def warehouse_current() -> bool:
        try:
            rows = pg_rows(settings, table.logical)
        except psycopg.errors.UndefinedTable:
            return False
        return {k: f"{r['amount']:.2f}" for k, r in rows.items()} == expected

    wait_for(redis_current, 180, "the redis mirror to hold every live row")
    wait_for(warehouse_current, 180, "the warehouse mirror to hold every live row")
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    stored = [
        client.get(key) or b""
        for key in client.scan_iter(f"{settings.redis.key_prefix}:*", count=1000)
    ]
    client.close()
    assert len(stored) >= len(table.live)
    assert table.leaks(b"\n".join(stored).decode()) == []
    with pg_connect(settings) as conn:
        rows = conn.execute(
            sql.SQL("SELECT * FROM {}").format(
                sql.Identifier(settings.mirror.warehouse_schema, table.logical)
            )
        ).fetchall()
    assert len(rows) == len(table.live)
    assert table.leaks("\n".join(map(str, rows))) == []


def test_a_changed_config_file_applies_without_a_restart(governed: dict[str, Any]) -> None:
    """The collector watches its config file: a new policy set applies between transactions,
    with its version logged; rows before it keep the old policy, rows after it the new one."""
    table: PlantedTable = governed["table"]
    scene: MirrorScene = governed["scene"]
    settings: Settings = governed["settings"]
    tmp: Path = governed["tmp"]
    config = Path(governed["env"]["CDC_MIRROR_CONFIG"])
    passing = {
        "enabled": True,
        "version": 1,
        "hash_salt": SALT,
        "webui": {"poll_interval_s": 0.2},
        "policies": [{"table": table.logical, "column": "phone", "action": "pass"}],
    }
    config.write_text(yaml.safe_dump({"governance": passing}))
    log = tmp / "collector.log"
    collector = CollectorProcess(governed["env"], free_port(), log).start()
    governed["processes"].append(collector)
    collector.wait_for(lambda: (collector.health() or {}).get("role") == "active", "active")
    table.run(10)
    with admin(settings) as conn, conn.cursor() as cursor:
        end = server_position(cursor)
    # The policy applies when the collector reads a row, not when MySQL wrote it.
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "10 rows committed")
    masking = {**passing, "version": 2, "policies": [{**passing["policies"][0], "action": "mask"}]}
    config.write_text(yaml.safe_dump({"governance": masking}))
    os.utime(config, (time.time() + 1, time.time() + 1))  # a new mtime even within a second

    def phones() -> list[str]:
        messages = [orjson.loads(v) for v in _read_topic(settings, scene.topic, 1, timeout_s=2)]
        # Binlog order: the two shards' rows sit in different partitions.
        return [m["content"]["phone"] for m in sorted(messages, key=lambda m: m["binlogOffset"])]

    deadline = time.monotonic() + 90
    seen: list[str] = []
    while not any(p.startswith("*") for p in seen):
        assert time.monotonic() < deadline, "the changed policy set was never applied"
        table.run(1)
        seen = phones()
    switch = next(i for i, p in enumerate(seen) if p.startswith("*"))
    assert switch >= 10  # the rows written before the change kept 'pass'
    assert all(not p.startswith("*") for p in seen[:switch])
    assert all(p.startswith("*******") for p in seen[switch:])
    assert "governance policy set version 2 applied" in log.read_text()


def _spark_env(env: dict[str, str], lake: Path, raw: str, snapshot: str) -> dict[str, str]:
    return {
        **env,
        "CDC_MIRROR_SPARK__LAKE_DIR": str(lake),
        "CDC_MIRROR_STREAM_WRITER__DATABASE": raw,
        "CDC_MIRROR_STREAM_WRITER__METRICS_PORT": "0",
        "CDC_MIRROR_STREAM_WRITER__TRIGGER_INTERVAL_S": "2",
        "CDC_MIRROR_MERGE__DATABASE": snapshot,
        "CDC_MIRROR_MERGE__CHECK": "false",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _run(command: list[str], env: dict[str, str], log: Path, timeout_s: float = 900) -> str:
    with log.open("wb") as output:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=output,
            timeout=timeout_s,
            check=False,
        )
    assert done.returncode == 0, (
        f"{' '.join(command[2:5])} failed ({done.returncode})\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    )
    return done.stdout.decode()


def test_lake_and_snapshot_hold_no_plaintext(governed: dict[str, Any]) -> None:
    table: PlantedTable = governed["table"]
    scene: MirrorScene = governed["scene"]
    settings: Settings = governed["settings"]
    tmp: Path = governed["tmp"]
    collector = CollectorProcess(governed["env"], free_port(), tmp / "collector.log").start()
    governed["processes"].append(collector)
    collector.wait_for(lambda: (collector.health() or {}).get("role") == "active", "active")
    table.run(STEPS // 2)
    with admin(settings) as conn, conn.cursor() as cursor:
        end = server_position(cursor)
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "all committed")
    collector.stop()

    lake = tmp / "lake"
    raw, snapshot = f"gv_raw_{table.tag}", f"gv_snap_{table.tag}"
    env = _spark_env(governed["env"], lake, raw, snapshot)
    env["CDC_MIRROR_TABLES"] = json.dumps(
        [
            {
                "db_prefix": table.prefix,
                "table_prefix": "users",
                "targets": ["hive"],
                "check_column": "created_at",
            }
        ]
    )
    try:
        _run(
            [
                sys.executable,
                "-m",
                "cdc_mirror",
                "stream-writer",
                "run",
                "--topic",
                scene.topic,
                "--name",
                f"gv-{table.tag}",
                "--available-now",
            ],
            env,
            tmp / "stream-writer.log",
        )
        files = [p for p in lake.rglob("*.parquet") if raw in str(p)]
        assert files, "the stream writer wrote no files"
        assert table.leaks(b"".join(p.read_bytes() for p in files).decode("latin-1")) == []
        day = time.strftime("%Y-%m-%d", time.gmtime())
        env["CDC_MIRROR_STREAM_WRITER__NAME"] = f"gv-{table.tag}"
        _run(
            [
                sys.executable,
                "-m",
                "cdc_mirror",
                "merge",
                "--dt",
                day,
                "--table",
                table.logical,
                "--skip-readiness",
            ],
            env,
            tmp / "merge.log",
        )
        out = _run(
            [sys.executable, str(Path(__file__).parent / "dump_tables.py"), raw, snapshot],
            env,
            tmp / "dump.log",
        )
    finally:
        subprocess.run(
            [
                sys.executable,
                "-c",
                (
                    "from cdc_platform.config import load_settings;"
                    "from cdc_platform.spark import build_session;"
                    "s = build_session(load_settings(), 'gv-cleanup');"
                    f"s.sql('DROP DATABASE IF EXISTS {raw} CASCADE');"
                    f"s.sql('DROP DATABASE IF EXISTS {snapshot} CASCADE');"
                    "s.stop()"
                ),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=600,
            check=False,
        )
    dumped = json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:])
    raw_rows = [row for name, rows in dumped.items() if name.startswith(raw) for row in rows]
    snapshot_rows = dumped[f"{snapshot}.{table.logical}"]
    assert len(raw_rows) >= table.changes
    assert len(snapshot_rows) == len(table.live)
    everything = "\n".join(raw_rows + snapshot_rows)
    assert table.leaks(everything) == []
    assert all(json.loads(row)["id_no"] is None for row in snapshot_rows)
