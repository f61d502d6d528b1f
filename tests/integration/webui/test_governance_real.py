"""Governance in the web admin against real services: the admin store on PostgreSQL with the
live schema of a sharded table in MariaDB (lineage both ways, policies validated against it,
the policy set in the collector config with its etag), and the detections consumer reading a
real Kafka topic, counting every record once across a restart and never an aborted one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from cdc_platform.config import Settings, StackSettings, WebUISettings
from cdc_platform.kafka import ensure_topic, producer_config
from governance import DetectionRecord, PolicyAction, detections_topic
from tests.integration.webui.harness import ShardedTable, sharded_table, wait_for
from tests.unit.webui.harness import ADMIN_PASSWORD, login, make_token
from webui.admin import now
from webui.app import create_app
from webui.db import make_engine, migrate, session_factory
from webui.detections import DetectionConsumer
from webui.models import DetectionCount, DetectionOffset, Instance
from webui.provisioning import RecordingProvisioner
from webui.replay import SimulatedReplayService


@pytest.fixture()
def pg_admin_url(postgres: Settings) -> Iterator[str]:
    """A PostgreSQL schema of its own for the admin database (dropped afterwards)."""
    pg = postgres.postgres
    password = pg.password.get_secret_value()
    schema = f"webui_gov_{uuid.uuid4().hex[:8]}"
    dsn = (
        f"host={pg.host} port={pg.port} user={pg.user} password={password} dbname={pg.warehouse_db}"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield (
            f"postgresql+psycopg://{pg.user}:{password}@{pg.host}:{pg.port}/{pg.warehouse_db}"
            f"?options=-csearch_path%3D{schema}"
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _shards(table: ShardedTable) -> list[str]:
    return [f"{schema}.orders_{i:02d}" for schema in table.schemas for i in range(2)]


def test_lineage_and_policies_of_a_sharded_table_on_the_real_store(
    mariadb: Settings, pg_admin_url: str, tmp_path: Path
):
    local = mariadb.instances[0]
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {
                "database_url": pg_admin_url,
                "initial_admin_password": ADMIN_PASSWORD,
                "scrape_targets": [],
                "count_detections": False,
            }
        ),
    )
    app = create_app(
        settings,
        replays=SimulatedReplayService(),
        provisioner=RecordingProvisioner(settings),  # no topic or warehouse table made
    )  # the real schema source
    with sharded_table(mariadb) as table, TestClient(app) as client:
        csrf = login(client)
        h = {"X-CSRF-Token": csrf}
        instance = {
            "name": "govlive",
            "host": "127.0.0.1",
            "port": local.port,
            "user": local.user,
            "password": local.password.get_secret_value(),
        }
        assert client.post("/api/instances", json=instance, headers=h).status_code == 201
        mirror = {
            "instance": "govlive",
            "db_prefix": table.db_prefix,
            "table_prefix": "orders",
            "redis_columns": ["id", "amount"],
        }
        assert client.post("/api/table-mirrors", json=mirror, headers=h).status_code == 201
        logical = table.logical_name
        collector = TestClient(app)
        token = {
            "Authorization": f"Bearer {make_token(client, csrf, 'collector', instance='govlive')}"
        }
        before = collector.get("/api/collector-config/govlive", headers=token)
        etag = before.headers["ETag"]

        # Policies are checked against the live schema of the shards in MariaDB.
        wrong = client.put(
            "/api/governance/policies",
            json={"table": logical, "column": "phone", "action": "mask"},
            headers=h,
        )
        assert wrong.json()["detail"] == [
            f"column phone does not exist in {table.schemas[0]}.orders_00 "
            "(columns: id, user_id, amount, created_at)."
        ]
        for column, action in (("user_id", "hash"), ("amount", "drop")):
            saved = client.put(
                "/api/governance/policies",
                json={"table": logical, "column": column, "action": action},
                headers=h,
            )
            assert saved.status_code == 200, saved.text
        after = collector.get(
            "/api/collector-config/govlive", headers={**token, "If-None-Match": etag}
        )
        assert after.status_code == 200
        assert after.headers["ETag"] != etag
        assert {(p["column"], p["action"]) for p in after.json()["governance"]["policies"]} == {
            ("user_id", "hash"),
            ("amount", "drop"),
        }

        # From a MySQL column of one shard downstream …
        [down] = client.get(
            "/api/lineage/search", params={"q": f"govlive/{table.schemas[1]}.orders_01.user_id"}
        ).json()
        assert down["direction"] == "downstream"
        assert {t["name"] for t in down["targets"]} == {
            f"ods_binlog_source.{logical}.content.user_id",
            f"ods_snapshot.{logical}.user_id",
            f"cdc_warehouse.cdc_mirror.{logical}.user_id",
        }
        assert "salted hash" in down["note"]
        # … and back from the snapshot column, the warehouse table and a Redis key: every shard.
        [up] = client.get(
            "/api/lineage/search", params={"q": f"ods_snapshot.{logical}.user_id"}
        ).json()
        assert up["sources"] == [f"govlive/{shard}.user_id" for shard in _shards(table)]
        for query in (f"cdc_mirror.{logical}", f"cdc:{logical}:42"):
            [hit] = client.get("/api/lineage/search", params={"q": query}).json()
            assert hit["sources"] == [f"govlive/{shard}" for shard in _shards(table)]
        # The dropped column has no downstream name.
        [dropped] = client.get(
            "/api/lineage/search", params={"q": f"{table.schemas[0]}.orders_00.amount"}
        ).json()
        assert dropped["targets"] == []
        assert (
            client.get("/api/lineage/search", params={"q": f"ods_snapshot.{logical}.amount"}).json()
            == []
        )

        [event] = [
            e
            for e in client.get("/api/lineage/openlineage").json()
            if e["job"]["name"] == f"govlive.{logical}"
        ]
        assert [d["name"] for d in event["inputs"]] == _shards(table)
        assert {d["namespace"] for d in event["inputs"]} == {f"mysql://127.0.0.1:{local.port}"}
        page = client.get("/lineage", params={"q": f"ods_snapshot.{logical}.user_id"})
        assert page.status_code == 200
        for shard in _shards(table):
            assert f"govlive/{shard}.user_id" in page.text


# --- detections from a real Kafka topic ---------------------------------------------------


def _publish(
    settings: Settings, topic: str, records: list[tuple[int, DetectionRecord]], commit: bool = True
) -> None:
    """One Kafka transaction of detection records (partition, record), committed or aborted."""
    producer = Producer(
        producer_config(settings.kafka, "webui-test", transactional_id=f"webui-test-{uuid.uuid4()}")
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition, record in records:
        producer.produce(
            topic,
            key=f"{record.schema_name}.{record.table_name}",
            value=record.encode(),
            partition=partition,
        )
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def _record(instance: str, column: str, count: int, at_ms: int) -> DetectionRecord:
    return DetectionRecord(
        instance=instance,
        logical_table="ordercenter_orderinfo",
        schema_name="ordercenter_00",
        table_name="orderinfo_00",
        column=column,
        detector="cn_mobile",
        count=count,
        first_offset=1,
        last_offset=9,
        detected_at_ms=at_ms,
        action=PolicyAction.MASK,
    )


def test_detections_consumer_counts_each_record_once_across_a_restart(
    replay_stack: Settings, tmp_path: Path
):
    instance = f"det{uuid.uuid4().hex[:8]}"
    topic = detections_topic(f"cdc.binlog.{instance}")
    ensure_topic(replay_stack.kafka, topic, partitions=2)
    engine = make_engine(f"sqlite:///{tmp_path / 'admin.sqlite'}")
    migrate(engine)
    sessions = session_factory(engine)
    with sessions.begin() as db:
        db.add(
            Instance(
                name=instance,
                host="127.0.0.1",
                port=1,
                user="cdc",
                password_encrypted="-",
                gtid_start="current",
                include=[],
                exclude=[],
                shard_rules=[],
                collector_group="default",
                topic=f"cdc.binlog.{instance}",
                version=1,
                updated_at=now(),
            )
        )

    def total() -> int:
        with sessions() as db:
            return int(
                db.scalar(
                    select(func.coalesce(func.sum(DetectionCount.count), 0)).where(
                        DetectionCount.instance == instance
                    )
                )
            )

    hour_ms = 1_790_000_000_000 // 3_600_000 * 3_600_000
    first = [(i % 2, _record(instance, "phone", i + 1, hour_ms + i)) for i in range(20)]
    _publish(replay_stack, topic, first)
    _publish(replay_stack, topic, [(0, _record(instance, "phone", 1000, hour_ms))], commit=False)
    expected = sum(r.count for _, r in first)

    consumer = DetectionConsumer(sessions, replay_stack.kafka, refresh_s=0.5)
    consumer.start()
    try:
        wait_for(lambda: total() >= expected, 60, "the first detections to be counted")
    finally:
        consumer.stop()
    assert total() == expected, "the aborted transaction is never counted"

    # More records while no consumer runs; a new one resumes at the stored offsets.
    second = [(i % 2, _record(instance, "email", 7, hour_ms + 3_600_000 + i)) for i in range(6)]
    _publish(replay_stack, topic, second)
    restarted = DetectionConsumer(sessions, replay_stack.kafka, refresh_s=0.5)
    restarted.start()
    try:
        # Records of a partition are read in offset order from the stored offset, so a record
        # read twice would be counted before the new ones are complete.
        wait_for(lambda: total() >= expected + 42, 60, "the new detections to be counted")
    finally:
        restarted.stop()
    assert total() == expected + 42
    assert restarted.counted == len(second)
    with sessions() as db:
        by_column = dict(
            db.execute(
                select(DetectionCount.column_name, func.sum(DetectionCount.count))
                .where(DetectionCount.instance == instance)
                .group_by(DetectionCount.column_name)
            ).all()
        )
        offsets = {
            o.partition: o.next_offset
            for o in db.scalars(select(DetectionOffset).where(DetectionOffset.topic == topic))
        }
    assert by_column == {"phone": expected, "email": 42}
    assert set(offsets) == {0, 1}
    engine.dispose()


def test_a_recreated_detection_topic_is_counted_from_its_start(
    replay_stack: Settings, tmp_path: Path
):
    instance = f"rec{uuid.uuid4().hex[:8]}"
    topic = detections_topic(f"cdc.binlog.{instance}")
    ensure_topic(replay_stack.kafka, topic, partitions=1)
    engine = make_engine(f"sqlite:///{tmp_path / 'admin.sqlite'}")
    migrate(engine)
    sessions = session_factory(engine)
    with sessions.begin() as db:
        db.add(
            Instance(
                name=instance,
                host="127.0.0.1",
                port=1,
                user="cdc",
                password_encrypted="-",
                gtid_start="current",
                include=[],
                exclude=[],
                shard_rules=[],
                collector_group="default",
                topic=f"cdc.binlog.{instance}",
                version=1,
                updated_at=now(),
            )
        )
        # Counted up to offset 50 before the topic was deleted and created again.
        db.add(DetectionOffset(topic=topic, partition=0, next_offset=50))
    _publish(replay_stack, topic, [(0, _record(instance, "phone", 4, 3_600_000))])
    consumer = DetectionConsumer(sessions, replay_stack.kafka, refresh_s=0.5)
    consumer.start()
    try:

        def counted() -> int:
            with sessions() as db:
                return int(db.scalar(select(func.coalesce(func.sum(DetectionCount.count), 0))) or 0)

        wait_for(lambda: counted() == 4, 60, "the record of the recreated topic to be counted")
    finally:
        consumer.stop()
    with sessions() as db:
        stored = db.get(DetectionOffset, (topic, 0))
        assert stored is not None and stored.next_offset < 50
    engine.dispose()
