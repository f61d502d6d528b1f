"""`stack up`, `stack up`, `stack down`, `stack up` through the CLI: healthy each time, data kept.

Runs on the session's stack and leaves it up; it runs after every other test (marker
``restarts_stack``, tests/conftest.py), since clients held for the life of the process (Spark's
metastore connections) do not survive the restart.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
import pymysql
import pytest
import redis
from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient

from cdc_platform.config import LOCAL_PORTS, Settings
from cdc_platform.kafka import consumer_config, ensure_topic, producer_config

pytestmark = pytest.mark.restarts_stack

CLI = [sys.executable, "-m", "cdc_mirror", "stack"]
SERVICES = ("mariadb", "postgresql", "redis", "zookeeper", "kafka", "spark")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900, check=False)


def _healthy_rows(output: str) -> set[str]:
    return {
        name
        for name in SERVICES
        for line in output.splitlines()
        if line.strip("│ ").startswith(name) and "healthy" in line
    }


def _mariadb(settings: Settings) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=LOCAL_PORTS["mariadb"],
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
    )


def _warehouse(settings: Settings) -> psycopg.Connection:
    pg = settings.postgres
    return psycopg.connect(
        host=pg.host,
        port=pg.port,
        user=pg.user,
        dbname=pg.warehouse_db,
        password=pg.password.get_secret_value(),
        autocommit=True,
    )


def _write_marks(settings: Settings, mark: str) -> None:
    with _mariadb(settings) as db, db.cursor() as cursor:
        cursor.execute("CREATE DATABASE IF NOT EXISTS cdc_lifecycle")
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS cdc_lifecycle.marks (mark VARCHAR(64) PRIMARY KEY)"
        )
        cursor.execute("INSERT INTO cdc_lifecycle.marks VALUES (%s)", (mark,))
    with _warehouse(settings) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS cdc_lifecycle_marks (mark text PRIMARY KEY)")
        conn.execute("INSERT INTO cdc_lifecycle_marks VALUES (%s)", (mark,))
    client = redis.Redis(port=LOCAL_PORTS["redis"])
    client.set(f"cdc-lifecycle:{mark}", mark)
    client.close()
    zk = KazooClient(hosts=settings.zookeeper.hosts)
    zk.start(timeout=30)
    zk.create(f"/cdc-lifecycle/{mark}", mark.encode(), makepath=True)
    zk.stop()
    topic = f"cdc.lifecycle.{mark}"
    ensure_topic(settings.kafka, topic)
    producer = Producer(producer_config(settings.kafka, client_id="lifecycle"))
    producer.produce(topic, key=b"k", value=mark.encode())
    assert producer.flush(30) == 0


def _read_marks(settings: Settings, mark: str) -> dict[str, bool]:
    found: dict[str, bool] = {}
    with _mariadb(settings) as db, db.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM cdc_lifecycle.marks WHERE mark = %s", (mark,))
        found["mariadb"] = cursor.fetchone()[0] == 1
    with _warehouse(settings) as conn:
        row = conn.execute("SELECT count(*) FROM cdc_lifecycle_marks WHERE mark = %s", (mark,))
        found["postgresql"] = row.fetchone()[0] == 1
    client = redis.Redis(port=LOCAL_PORTS["redis"])
    found["redis"] = client.get(f"cdc-lifecycle:{mark}") == mark.encode()
    client.close()
    zk = KazooClient(hosts=settings.zookeeper.hosts)
    zk.start(timeout=30)
    found["zookeeper"] = zk.get(f"/cdc-lifecycle/{mark}")[0] == mark.encode()
    zk.stop()
    consumer = Consumer(consumer_config(settings.kafka, group_id=f"lifecycle-{mark}"))
    consumer.subscribe([f"cdc.lifecycle.{mark}"])
    records = []
    for _ in range(30):
        records += [r for r in consumer.consume(num_messages=10, timeout=1.0) if r.error() is None]
        if records:
            break
    consumer.close()
    found["kafka"] = [r.value() for r in records] == [mark.encode()]
    return found


def test_up_up_down_up_keeps_everything_healthy_and_the_data(local_stack: Settings) -> None:
    mark = uuid.uuid4().hex[:12]

    first = _cli("up")
    assert first.returncode == 0, first.stderr
    assert _healthy_rows(first.stdout) == set(SERVICES)
    _write_marks(local_stack, mark)

    second = _cli("up")
    assert second.returncode == 0, second.stderr
    assert "started" not in second.stdout.replace("started by stack", "")
    assert _healthy_rows(second.stdout) == set(SERVICES)

    down = _cli("down")
    assert down.returncode == 0, down.stderr
    status = _cli("status")
    assert status.returncode == 3  # unhealthy: a service is unavailable
    assert _healthy_rows(status.stdout) == set()

    third = _cli("up")
    assert third.returncode == 0, third.stderr
    assert _healthy_rows(third.stdout) == set(SERVICES)
    assert _cli("status").returncode == 0

    assert _read_marks(local_stack, mark) == dict.fromkeys(
        ("mariadb", "postgresql", "redis", "zookeeper", "kafka"), True
    )
