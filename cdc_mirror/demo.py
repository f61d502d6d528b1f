"""The live demo: the whole pipeline on the local stack, as an operator would run it.

1. Starts the local stack (installing what is missing).
2. Clears what an earlier demo left (its topics, consumer groups, Redis keys, warehouse schema,
   Hive databases and files: everything named ``demo``), then creates a sharded sample schema
   (``ordercenter_00..03`` × ``orderinfo_00..03``) with history rows.
3. Starts the long-running components as processes: the web admin, two collectors of the
   instance ``demo`` (ZooKeeper elects one, the other stands by), the stream writer, and the
   mirror for Redis and for the warehouse.
4. Replays the history into the stream (``source=MOCK``, executeTime yesterday).
5. Runs a live workload (inserts, updates including key changes, deletes) while a status line
   shows the changes flowing; half-way through it ``kill -9``s the active collector and
   the standby takes over.
6. Waits until every component has caught up, merges yesterday (the history) and today into
   Hive snapshots, and prints whether MySQL, the Hive snapshot, the warehouse and Redis agree,
   row for row, and where to look.

Everything the demo creates is named ``demo`` and lives beside the user's own data, so it can
run on a stack that also serves other work; a second run starts from scratch.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cdc_mirror.processes import (
    DEFAULT_LAUNCHER,
    SYSTEM_CLOCK,
    Clock,
    Component,
    ComponentError,
    Launcher,
    Supervisor,
    config_env,
    free_port,
    http_json,
    http_ok,
    port_free,
    wait_until,
)
from cdc_platform.config import ALL_TARGETS, Settings, load_settings
from cdc_platform.kafka import admin_config, consumer_config
from collector.reader import connect
from simple_binlog.errors import CdcMirrorError
from simple_binlog.naming import topic_name
from stack.manager import LocalStack

if TYPE_CHECKING:
    from cdc_mirror.verify import RawLayerCheck, TableAgreement

SHARDS = 4
DATABASES = [f"ordercenter_{i:02d}" for i in range(SHARDS)]
TABLES = [f"orderinfo_{i:02d}" for i in range(SHARDS)]
LOGICAL_TABLE = "ordercenter_orderinfo"
STATUSES = ("NEW", "PAID", "SHIPPED", "CANCELLED")
INSTANCE = "demo"

_DDL = """
CREATE TABLE {db}.{table} (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  user_id INT UNSIGNED NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  status ENUM('NEW','PAID','SHIPPED','CANCELLED') NOT NULL,
  note VARCHAR(64) NULL,
  created_at DATETIME(3) NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
)
"""


@dataclass(frozen=True)
class DemoOptions:
    history_rows: int = 200  # per shard table
    live_seconds: float = 60.0
    live_rate: float = 100.0  # MySQL transactions per second, each of 1..20 rows
    failover: bool = True
    keep_running: bool = False


@dataclass(frozen=True)
class DemoNames:
    """Everything the demo creates, in one place, so a rerun can clear it."""

    home: Path
    webui_port: int
    collector_ports: tuple[int, int]
    writer_port: int
    mirror_ports: dict[str, int]
    admin_password: str
    group_prefix: str = "cdc-mirror-demo"
    redis_prefix: str = "cdcdemo"
    warehouse_schema: str = "cdc_demo"
    kudu_prefix: str = "cdc_demo."  # the demo's Kudu tables, when Kudu is configured
    raw_database: str = "demo_ods_binlog_source"
    snapshot_database: str = "demo_ods_snapshot"
    writer: str = "demo"

    @property
    def lake(self) -> Path:
        return self.home / "lake"

    @property
    def logs(self) -> Path:
        return self.home / "logs"


def kudu_configured(settings: Settings) -> bool:
    """A table mirror of the user's configuration targets Kudu (the rule ``stack up`` starts
    the local Kudu cluster by): the demo then mirrors its table to Kudu too."""
    return any("kudu" in table.targets for table in settings.tables)


def demo_names(settings: Settings) -> DemoNames:
    mirror_ports = {"redis": free_port(), "warehouse": free_port()}
    if kudu_configured(settings):
        mirror_ports["kudu"] = free_port()
    return DemoNames(
        home=(settings.stack.home / "demo").resolve(),
        # The configured port unless something else holds it (e.g. the user's own web admin).
        webui_port=settings.webui.port if port_free(settings.webui.port) else free_port(),
        collector_ports=(free_port(), free_port()),
        writer_port=free_port(),
        mirror_ports=mirror_ports,
        admin_password=secrets.token_urlsafe(12),
    )


def demo_overrides(settings: Settings, names: DemoNames) -> dict[str, Any]:
    """The demo's settings on top of the user's: its own instance, names and ports."""
    source = settings.instances[0]
    metrics = [
        *(("collector", port) for port in names.collector_ports),
        ("stream_writer", names.writer_port),
        *((f"mirror-{target}", port) for target, port in names.mirror_ports.items()),
    ]
    return {
        "instances": [
            {
                "name": INSTANCE,
                "host": source.host,
                "port": source.port,
                "user": source.user,
                "password": source.password.get_secret_value(),
                "replica_server_id": 4190,
            }
        ],
        "collector": {
            "include": [r"ordercenter_\d+\.orderinfo_\d+"],
            "start": "current",
        },
        "spark": {"lake_dir": str(names.lake)},
        "stream_writer": {
            "name": names.writer,
            "database": names.raw_database,
            "trigger_interval_s": 5,
            "metrics_port": names.writer_port,
        },
        "merge": {"database": names.snapshot_database},
        "mirror": {
            "group_prefix": names.group_prefix,
            "warehouse_schema": names.warehouse_schema,
            "batch_size": 2000,
        },
        "redis": {"key_prefix": names.redis_prefix},
        "kudu": {"table_prefix": names.kudu_prefix},
        "webui": {
            "port": names.webui_port,
            "database_url": f"sqlite:///{names.home / 'webui.sqlite'}",
            "secret_key_file": str(names.home / "webui.key"),
            "initial_admin_user": "admin",
            "initial_admin_password": names.admin_password,
            "scrape_targets": [
                {"name": name, "url": f"http://127.0.0.1:{port}/metrics"} for name, port in metrics
            ],
            "scrape_interval_s": 5,
        },
        "tables": [
            {
                "instance": INSTANCE,
                "db_prefix": "ordercenter",
                "table_prefix": "orderinfo",
                "check_column": "created_at",
                "targets": [*ALL_TARGETS, *(["kudu"] if "kudu" in names.mirror_ports else [])],
            }
        ],
    }


# -- MySQL: the sample schema and the workload --------------------------------------------------
def _admin(settings: Settings) -> Any:
    instance = settings.instances[0]
    admin = instance.model_copy(
        update={"user": settings.stack.admin_user, "password": settings.stack.admin_password}
    )
    return connect(admin, autocommit=False, init_command="SET time_zone = '+00:00'")


def _create_schema(connection: Any, rows_per_table: int, rng: random.Random) -> int:
    """Recreate the shards with history rows created over the last days; returns the rows."""
    with connection.cursor() as cursor:
        for db in DATABASES:
            cursor.execute(f"DROP DATABASE IF EXISTS {db}")
            cursor.execute(f"CREATE DATABASE {db}")
            for table in TABLES:
                cursor.execute(_DDL.format(db=db, table=table))
        for d, db in enumerate(DATABASES):
            for t, table in enumerate(TABLES):
                base = (d * SHARDS + t) * 10_000_000
                cursor.executemany(
                    f"INSERT INTO {db}.{table} (id, user_id, amount, status, note, created_at) "
                    "VALUES (%s, %s, %s, %s, %s, NOW(3) - INTERVAL %s MINUTE)",
                    [
                        (
                            base + n,
                            rng.randrange(1, 5000),
                            Decimal(rng.randrange(100, 99999)) / 100,
                            rng.choice(STATUSES),
                            rng.choice((None, "", "gift", "express")),
                            rng.randrange(60 * 24, 60 * 24 * 6),  # one to six days old
                        )
                        for n in range(1, rows_per_table + 1)
                    ],
                )
    connection.commit()
    return rows_per_table * SHARDS * SHARDS


@dataclass
class Workload:
    """Random transactions on every shard at a steady rate, in a thread of the demo."""

    settings: Settings
    rows_per_table: int
    rate: float
    seed: int = 7
    changes: int = 0
    transactions: int = 0
    last_gtid: str | None = None
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-workload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise CdcMirrorError(f"the demo workload failed: {self.error}") from self.error

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # noqa: BLE001 (re-raised in the demo's thread by stop())
            self.error = exc

    def _loop(self) -> None:
        rng = random.Random(self.seed)
        live = {
            (d, t): list(range(base + 1, base + self.rows_per_table + 1))
            for d in range(SHARDS)
            for t in range(SHARDS)
            for base in [(d * SHARDS + t) * 10_000_000]
        }
        next_id = {key: ids[-1] + 1 if ids else key[0] for key, ids in live.items()}
        with _admin(self.settings) as connection, connection.cursor() as cursor:
            began = time.monotonic()
            while not self._stop.is_set():
                shard = (rng.randrange(SHARDS), rng.randrange(SHARDS))
                db, table = DATABASES[shard[0]], TABLES[shard[1]]
                ids = live[shard]
                for _ in range(rng.randrange(1, 20)):
                    action = rng.random()
                    if action < 0.55 and ids:
                        cursor.execute(
                            f"UPDATE {db}.{table} SET status = %s, amount = amount + 1 "
                            "WHERE id = %s",
                            (rng.choice(STATUSES), rng.choice(ids)),
                        )
                    elif action < 0.7 and ids:
                        victim = ids.pop(rng.randrange(len(ids)))
                        cursor.execute(f"DELETE FROM {db}.{table} WHERE id = %s", (victim,))
                    elif action < 0.75 and ids:
                        old = ids.pop(rng.randrange(len(ids)))
                        new, next_id[shard] = next_id[shard], next_id[shard] + 1
                        cursor.execute(f"UPDATE {db}.{table} SET id = %s WHERE id = %s", (new, old))
                        ids.append(new)
                    else:
                        new, next_id[shard] = next_id[shard], next_id[shard] + 1
                        cursor.execute(
                            f"INSERT INTO {db}.{table} (id, user_id, amount, status, note, "
                            "created_at) VALUES (%s, %s, %s, 'NEW', %s, NOW(3))",
                            (
                                new,
                                rng.randrange(1, 5000),
                                Decimal(rng.randrange(100, 9999)) / 100,
                                rng.choice((None, "", "gift")),
                            ),
                        )
                        ids.append(new)
                    self.changes += cursor.rowcount
                connection.commit()
                self.transactions += 1
                # Pace to the rate; the wait doubles as the stop signal.
                due = began + self.transactions / self.rate
                self._stop.wait(max(0.0, due - time.monotonic()))
            cursor.execute("SELECT @@gtid_binlog_pos")
            self.last_gtid = str(cursor.fetchone()[0])


# -- clearing an earlier run ---------------------------------------------------------------------
def _clear_kafka(settings: Settings, names: DemoNames) -> None:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient(admin_config(settings.kafka))
    prefix = topic_name(settings.kafka, INSTANCE)
    topics = [t for t in admin.list_topics(timeout=15).topics if t.startswith(prefix)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result()
        wait_until(
            lambda: not set(topics) & set(admin.list_topics(timeout=15).topics),
            60,
            "the demo's old topics to be deleted",
        )
    groups = [
        g.group_id
        for g in admin.list_consumer_groups().result().valid
        if g.group_id.startswith(names.group_prefix)
    ]
    if groups:
        for future in admin.delete_consumer_groups(groups).values():
            future.result()


def _clear_redis(settings: Settings, names: DemoNames) -> None:
    from cdc_platform import redis_store  # noqa: PLC0415

    client = redis_store.connect(settings.redis)
    try:
        with redis_store.redis_errors(
            "clearing the demo's keys", redis_store.address(settings.redis)
        ):
            batch: list[bytes] = []
            for key in client.scan_iter(match=f"{names.redis_prefix}:*", count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    client.delete(*batch)
                    batch.clear()
            if batch:
                client.delete(*batch)
    finally:
        client.close()


def _clear_warehouse(settings: Settings, names: DemoNames) -> None:
    from cdc_platform import warehouse  # noqa: PLC0415
    from cdc_platform.warehouse import sql  # noqa: PLC0415

    with (
        warehouse.warehouse_errors("dropping the demo's schema"),
        warehouse.connect(settings.postgres) as connection,
    ):
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(names.warehouse_schema)
            )
        )
        connection.commit()


def _clear_kudu(settings: Settings, names: DemoNames) -> None:
    """The demo's Kudu tables (``names.kudu_prefix``), through the mirror's Java client."""
    from cdc_platform.kudu import client_jars  # noqa: PLC0415
    from mirror.kudu import KuduApplier  # noqa: PLC0415 - starts a JVM

    kudu = settings.kudu.model_copy(update={"table_prefix": names.kudu_prefix})
    applier = KuduApplier(kudu, settings.mirror, [], client_jars(settings))
    try:
        applier.drop_tables()
    finally:
        applier.close()


def _clear_hive(run: DemoRun) -> None:
    """Drop the demo's Hive databases in a Spark process of its own (its chatter to the log)."""
    drop = run.component(
        "reset-hive",
        [
            "sql",
            *(
                f"DROP DATABASE IF EXISTS `{database}` CASCADE"
                for database in (
                    run.names.raw_database,
                    run.names.snapshot_database,
                    # The snapshots' dt views (cdc_platform.lake_snapshots).
                    f"{run.names.snapshot_database}_dt",
                )
            ),
        ],
    ).start()
    _wait_exit(drop, 600)


# -- progress and catching up --------------------------------------------------------------------
# The counters the status line shows, by the names the components declare them with.
LAKE_ROWS_METRIC = "cdc_stream_writer_rows"
MIRROR_ROWS_METRIC = "cdc_mirror_rows"


def metric_total(text: str, family: str) -> float:
    """Pure: a counter's (or gauge's) samples summed over all labels, read from a Prometheus
    text exposition with prometheus_client's parser. ``family`` is the declared name: the
    parser names a counter's family without the ``_total`` its samples carry."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    wanted = {family, f"{family}_total"}
    return sum(
        sample.value
        for found in text_string_to_metric_families(text)
        if found.name == family
        for sample in found.samples
        if sample.name in wanted
    )


def _prometheus_sum(url: str, metric: str) -> float | None:
    """Sum of a metric's samples over all labels, or None while the endpoint is away (or
    answers with something that is not a Prometheus exposition)."""
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
            text = response.read().decode()
        return metric_total(text, metric)
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """Per partition, the offset after the last committed transaction (read_committed)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(consumer_config(settings.kafka, group_id="cdc-mirror-demo-probe"))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            return {}
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.topics[topic].partitions
        }
    finally:
        consumer.close()


def _group_offsets(
    settings: Settings, group: str, topic: str, partitions: list[int]
) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(consumer_config(settings.kafka, group_id=group))
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def _messages_after(settings: Settings, topic: str, offsets: dict[int, int]) -> bool:
    """Whether a read_committed reader finds any message at or after ``offsets``.

    Offsets alone cannot say "everything was read": every Kafka transaction leaves a commit
    marker, and an aborted one (a collector killed mid-transaction) leaves records no reader
    sees, all taking offsets. So read from ``offsets`` until each partition reports its end.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition  # noqa: PLC0415

    ends = _end_offsets(settings, topic)
    pending = {p: max(offsets.get(p, 0), 0) for p, end in ends.items()}
    pending = {p: start for p, start in pending.items() if start < ends[p]}
    if not pending:
        return False
    config = consumer_config(settings.kafka, group_id="cdc-mirror-demo-probe")
    config.update({"enable.partition.eof": True, "enable.auto.commit": False})
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, start in pending.items()])
        unfinished = set(pending)
        deadline = time.monotonic() + 30
        while unfinished and time.monotonic() < deadline:
            for record in consumer.consume(num_messages=100, timeout=1.0):
                error = record.error()
                if error is None:
                    return True
                if error.code() == KafkaError._PARTITION_EOF:
                    unfinished.discard(record.partition())
        return bool(unfinished)  # an end not reached in time counts as still pending
    finally:
        consumer.close()


def _writer_offsets(names: DemoNames, topic: str) -> dict[int, int]:
    import json  # noqa: PLC0415

    state = names.lake / "_stream_writer" / names.writer / "checkpoint" / "cdc_progress.json"
    try:
        document = json.loads(state.read_text())
    except (OSError, ValueError):
        return {}
    return {
        p["partition"]: p["nextOffset"]
        for p in document.get("partitions", [])
        if p["topic"] == topic
    }


def _gtid_reached(position: str | None, target: str) -> bool:
    from collector.position import parse_gtid  # noqa: PLC0415

    if not position:
        return False
    have = {parse_gtid(g)[0]: parse_gtid(g)[2] for g in position.split(",") if g}
    return all(have.get(parse_gtid(g)[0], -1) >= parse_gtid(g)[2] for g in target.split(",") if g)


def _active_collector(collectors: list[Component]) -> Component | None:
    for component in collectors:
        health = component.health() if component.running else None
        if health is not None and health.get("role") == "active":
            return component
    return None


# -- the demo's outside world --------------------------------------------------------------------
class DemoServices(Protocol):
    """What the demo's steps read and change apart from its processes: the stores it clears
    and fills, Kafka's offsets, the components' metrics and the row-for-row check.
    ``LiveServices`` is the real one; a test passes a fake."""

    def clear(self, names: DemoNames) -> None:
        """Drop what an earlier demo left in Kafka, Redis, the warehouse (and Kudu)."""
        ...

    def create_schema(self, rows_per_table: int) -> int: ...

    def end_offsets(self, topic: str) -> dict[int, int]: ...

    def group_offsets(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]: ...

    def messages_after(self, topic: str, offsets: dict[int, int]) -> bool: ...

    def metric_sum(self, url: str, metric: str) -> float | None: ...

    def verify(self, run: DemoRun, day: date) -> tuple[TableAgreement, RawLayerCheck]: ...


@dataclass(frozen=True)
class LiveServices:
    settings: Settings

    def clear(self, names: DemoNames) -> None:
        _clear_kafka(self.settings, names)
        _clear_redis(self.settings, names)
        _clear_warehouse(self.settings, names)
        if "kudu" in names.mirror_ports:
            _clear_kudu(self.settings, names)

    def create_schema(self, rows_per_table: int) -> int:
        with _admin(self.settings) as connection:
            return _create_schema(connection, rows_per_table, random.Random(7))

    def end_offsets(self, topic: str) -> dict[int, int]:
        return _end_offsets(self.settings, topic)

    def group_offsets(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        return _group_offsets(self.settings, group, topic, partitions)

    def messages_after(self, topic: str, offsets: dict[int, int]) -> bool:
        return _messages_after(self.settings, topic, offsets)

    def metric_sum(self, url: str, metric: str) -> float | None:
        return _prometheus_sum(url, metric)

    def verify(self, run: DemoRun, day: date) -> tuple[TableAgreement, RawLayerCheck]:
        """Digest every store and compare them with MySQL, row for row; the raw layer too."""
        from cdc_mirror import verify  # noqa: PLC0415

        mirror = self.settings.table(LOGICAL_TABLE)
        schema = verify.mysql_schema(self.settings, mirror)
        hive = verify.run_spark_checks(
            LOGICAL_TABLE,
            [day.isoformat()],
            run.names.home / "verify.json",
            env=run.env,
            log_path=run.names.logs / "verify.log",
        )
        snapshot = verify.DigestStore(hive.snapshots[day.isoformat()])
        agreement = verify.verify_stores(
            schema,
            verify.MySQLStore(self.settings, mirror),
            [snapshot, *verify.mirror_stores(self.settings, mirror)],
        )
        raw = verify.check_raw_layer(
            LOGICAL_TABLE, verify.kafka_coordinates(self.settings, mirror), hive.lake
        )
        return agreement, raw


# -- the demo ---------------------------------------------------------------------------------
@contextmanager
def _step(console: Console, title: str) -> Iterator[None]:
    console.rule(f"[bold]{title}")
    began = time.monotonic()
    yield
    console.print(f"  [dim]({time.monotonic() - began:.1f} s)[/]")


def run_demo(
    settings: Settings, console: Console, options: DemoOptions, config_file: Path | None = None
) -> None:
    for chatty in ("httpx", "py4j"):  # one line per request / per Spark call
        logging.getLogger(chatty).setLevel(logging.WARNING)
    with _step(console, "1. local stack"):
        LocalStack(settings).up(
            report=lambda name, what: console.print(f"  {escape(f'{name:<11}')} {escape(what)}")
        )
    run = DemoRun.prepare(settings, console, config_file)
    with _step(console, "2. a clean slate and a sharded sample schema with history"):
        history = run.reset(options.history_rows)
    with run.supervisor.running():
        with _step(console, "3. the pipeline's processes"):
            run.start_pipeline()
        with _step(console, "4. history replay (source=MOCK, executeTime yesterday)"):
            run.replay(history)
        with _step(console, f"5. live workload for {options.live_seconds:.0f} s"):
            workload = Workload(run.settings, options.history_rows, options.live_rate)
            run.live(workload, options)
        with _step(console, "6. catching up"):
            run.catch_up(workload)
        today = datetime.now(UTC).date()
        with _step(console, f"7. merge: Hive snapshots of {today - timedelta(days=1)} and {today}"):
            run.merge(today)
        kudu = kudu_configured(settings)
        stores = "the warehouse, Redis and Kudu" if kudu else "the warehouse and Redis"
        with _step(console, f"8. do MySQL, Hive, {stores} agree?"):
            agreed = run.summary(today)
        run.where_to_look(today)
        if options.keep_running and agreed:
            console.print("\n  The pipeline keeps running; Ctrl-C stops it.")
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                console.print("  stopping…")
    if not agreed:
        raise CdcMirrorError("the mirrors do not agree with MySQL; see the table above.")


@dataclass
class DemoRun:
    """One demo: its settings, names and processes."""

    settings: Settings
    names: DemoNames
    env: dict[str, str]
    console: Console
    services: DemoServices
    supervisor: Supervisor = field(default_factory=Supervisor)
    collectors: list[Component] = field(default_factory=list)
    launcher: Launcher = DEFAULT_LAUNCHER
    clock: Clock = SYSTEM_CLOCK
    probe: Callable[[str], Any | None] = http_json

    @classmethod
    def prepare(cls, settings: Settings, console: Console, config_file: Path | None) -> DemoRun:
        names = demo_names(settings)
        overrides = config_env(demo_overrides(settings, names))
        # The demo's own settings: the user's file (if any) plus the demo's overrides, exactly
        # as every component process reads them.
        os.environ.update(overrides)
        env = dict(overrides)
        if config_file is not None:
            env["CDC_MIRROR_CONFIG"] = str(config_file.resolve())
        demo_settings = load_settings(config_file)
        return cls(demo_settings, names, env, console, LiveServices(demo_settings))

    @property
    def topic(self) -> str:
        return topic_name(self.settings.kafka, INSTANCE)

    def component(
        self,
        name: str,
        args: list[str],
        health: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Component:
        cwd = Path(__file__).resolve().parents[1]
        log_path = self.names.logs / f"{name}.log"
        return Component(
            name,
            args,
            {**self.env, **(env or {})},
            log_path,
            health,
            cwd=cwd,
            launcher=self.launcher,
            clock=self.clock,
            probe=self.probe,
        )

    def reset(self, history_rows: int) -> int:
        self.services.clear(self.names)
        shutil.rmtree(self.names.home, ignore_errors=True)
        self.names.logs.mkdir(parents=True)
        _clear_hive(self)
        history = self.services.create_schema(history_rows)
        self.console.print(
            f"  {SHARDS}×{SHARDS} shard tables ({DATABASES[0]}..{DATABASES[-1]} × "
            f"{TABLES[0]}..{TABLES[-1]}), {history} history rows; demo state in "
            f"{escape(str(self.names.home))}"
        )
        return history

    def start_pipeline(self) -> None:
        """The web admin first: the instance and the table mirror are entered there, and the
        collectors take their connection and filters from it (``config_source: webui``)."""
        names, add = self.names, self.supervisor.add
        webui = add(self.component("webui", ["webui"])).start()
        login = f"http://127.0.0.1:{names.webui_port}/login"
        webui.wait_until(lambda: http_ok(login), 120, "the web admin to answer")
        collector_token = self.register_in_webui()
        from_webui = config_env(
            {
                "collector": {"config_source": "webui"},
                "governance": {
                    "webui": {
                        "url": f"http://127.0.0.1:{names.webui_port}",
                        "token": collector_token,
                        "poll_interval_s": 2,
                        "cache_dir": str(names.home),
                    }
                },
            }
        )
        for letter, port in zip("ab", names.collector_ports, strict=True):
            args = ["collector", "run", "--instance", INSTANCE, "--metrics-port", str(port)]
            health = f"http://127.0.0.1:{port}/health"
            collector = self.component(f"collector-{letter}", args, health, from_webui)
            self.collectors.append(add(collector))
        add(self.component("stream-writer", ["stream-writer", "run", "--instance", INSTANCE]))
        for target, port in names.mirror_ports.items():
            args = ["mirror", "run", "--target", target, "--instance", INSTANCE]
            add(self.component(f"mirror-{target}", [*args, "--metrics-port", str(port)]))
        for part in self.supervisor.components.values():
            if not part.running:
                part.start()
        for collector in self.collectors:
            collector.wait_healthy(120)
        wait_until(
            lambda: _active_collector(self.collectors) is not None,
            120,
            "one collector to become active",
            clock=self.clock,
        )
        started = ", ".join(f"{p.name} ({p.pid})" for p in self.supervisor.components.values())
        self.console.print(f"  started {escape(started)}; logs in {escape(str(self.names.logs))}")
        active = _active_collector(self.collectors)
        self.console.print(
            f"  active collector: {escape(active.name) if active else '?'}; the other "
            "stands by (ZooKeeper election, fenced by Kafka transactions); both take their "
            "connection and filters from the web admin"
        )

    def register_in_webui(self) -> str:
        """Enter the demo's instance and table mirror in the web admin, through its API as an
        admin would, so its pages (tables, live schema, lineage, monitoring) show the demo;
        returns a new token of role 'collector', with which the collectors read their config."""
        import re  # noqa: PLC0415

        import httpx  # noqa: PLC0415

        csrf = re.compile(r'name="csrf_token" value="([^"]+)"')
        source = self.settings.instance(INSTANCE)
        base = f"http://127.0.0.1:{self.names.webui_port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            page = client.get("/login")
            token = csrf.search(page.text)
            login = client.post(
                "/login",
                data={
                    "username": "admin",
                    "password": self.names.admin_password,
                    "csrf_token": token.group(1) if token else "",
                },
            )
            session = csrf.search(client.get("/").text)
            if login.status_code >= 400 or session is None:
                raise CdcMirrorError(f"logging in to the demo's web admin at {base} failed.")
            headers = {"X-CSRF-Token": session.group(1)}
            for path, body in (
                (
                    "/api/instances",
                    {
                        "name": INSTANCE,
                        "host": source.host,
                        "port": source.port,
                        "user": source.user,
                        "password": source.password.get_secret_value(),
                        "include": self.settings.collector.include,
                    },
                ),
                (
                    # The demo replays the history itself (step 4), so no initial load here.
                    "/api/table-mirrors?initial_load=false",
                    self.settings.table(LOGICAL_TABLE).model_dump(mode="json"),
                ),
            ):
                answer = client.post(path, json=body, headers=headers)
                if answer.status_code != 201:
                    what = path.split("?")[0].rsplit("/", 1)[-1]
                    raise CdcMirrorError(
                        f"the web admin refused the demo's {what}: {answer.text[:300]}"
                    )
            # A collector token reads the config of its one instance only.
            made = client.post(
                "/api/tokens",
                json={"name": "demo-collectors", "role": "collector", "instance": INSTANCE},
                headers=headers,
            )
            if made.status_code != 201:
                raise CdcMirrorError(
                    f"the web admin refused the demo's collector token: {made.text[:300]}"
                )
        self.console.print(
            f"  web admin: instance {escape(repr(INSTANCE))}, table {escape(repr(LOGICAL_TABLE))} "
            "and a collector "
            "token entered"
        )
        return str(made.json()["token"])

    def replay(self, history: int) -> None:
        replay = self.component(
            "replay",
            [
                "replay",
                "--instance",
                INSTANCE,
                "--db-prefix",
                "ordercenter",
                "--table-prefix",
                "orderinfo",
                "--no-progress",
            ],
        ).start()
        _wait_exit(replay, 600)
        self.console.print(
            f"  {history} rows replayed into {escape(self.topic)} "
            f"(log {escape(str(replay.log_path))})"
        )

    def merge(self, today: date) -> None:
        yesterday = today - timedelta(days=1)
        # Yesterday holds the replayed history and is ready (today's changes moved the
        # watermark past it); today is still open, so its snapshot is the provisional one an
        # operator gets with --skip-readiness.
        for day, extra in ((yesterday, ["--wait-ready-s", "300"]), (today, ["--skip-readiness"])):
            merge = self.component(
                f"merge-{day}",
                ["merge", "--table", LOGICAL_TABLE, "--dt", day.isoformat(), *extra],
            ).start()
            _wait_exit(merge, 900)
            self.console.print(f"  {day}: merged (log {escape(str(merge.log_path))})")

    def live(self, workload: Workload, options: DemoOptions) -> None:
        workload.start()
        began = self.clock.monotonic()
        failed_over = not options.failover
        while self.clock.monotonic() - began < options.live_seconds and workload.error is None:
            self.console.print(escape(_live_line(self, workload)))
            if not failed_over and self.clock.monotonic() - began >= options.live_seconds / 2:
                failed_over = True
                _fail_over(self)
            self.clock.sleep(3.0)  # paces the status line
        workload.stop()
        self.console.print(escape(_live_line(self, workload)))
        self.console.print(
            f"  workload: {workload.transactions} MySQL transactions, "
            f"{workload.changes} row changes"
        )

    def catch_up(self, workload: Workload) -> None:
        if workload.last_gtid is None:
            raise CdcMirrorError("the demo workload did not report its last GTID.")
        _catch_up(self, workload.last_gtid)

    def summary(self, day: date) -> bool:
        """Digest every store and compare them with MySQL, row for row."""
        agreement, raw = self.services.verify(self, day)
        table = Table(title=f"{escape(LOGICAL_TABLE)}: MySQL and its mirrors, row for row")
        for column in ("store", "rows", "checksum", "verdict"):
            table.add_column(column)
        for store, rows, checksum, verdict in agreement.rows():
            colour = "green" if verdict in ("reference", "equal") else "red"
            table.add_row(escape(store), rows, checksum, f"[{colour}]{escape(verdict)}[/]")
        self.console.print(table)
        for sentence in agreement.disagreements():
            self.console.print(f"  [red]{escape(sentence)}[/]", highlight=False)
        colour = "green" if raw.exactly_once else "red"
        self.console.print(f"  [{colour}]{escape(raw.describe())}[/]")
        verdict = "agree" if agreement.agrees and raw.exactly_once else "DO NOT agree"
        self.console.print(f"  [bold]{escape(_stores_named(agreement, day))} {verdict}.[/]")
        return agreement.agrees and raw.exactly_once

    def where_to_look(self, day: date) -> None:
        names, settings = self.names, self.settings
        redis_port = settings.redis.url.get_secret_value().rsplit(":", 1)[-1].split("/")[0]
        lines = [
            f"web admin      http://127.0.0.1:{names.webui_port}/  (user admin, password "
            f"{names.admin_password})",
            f'Hive snapshot  ./run sql "SELECT status, count(*) FROM '
            f"{settings.lake.catalog}.{names.snapshot_database}.{LOGICAL_TABLE} "
            f"VERSION AS OF 'dt-{day}' "
            'GROUP BY status"',
            f'raw changes    ./run sql "SELECT count(*) FROM {settings.lake.catalog}.'
            f"{names.raw_database}.{LOGICAL_TABLE} WHERE dt = '{day}'\"",
            f"warehouse      psql -h 127.0.0.1 -p {settings.postgres.port} -U "
            f"{settings.postgres.user} {settings.postgres.warehouse_db} -c 'SELECT count(*) "
            f"FROM {names.warehouse_schema}.{LOGICAL_TABLE}'",
            f"Redis          redis-cli -p {redis_port} --scan --pattern "
            f"'{names.redis_prefix}:{LOGICAL_TABLE}:*'",
            *(
                [
                    f"Kudu           table {names.kudu_prefix}{LOGICAL_TABLE} at "
                    f"{','.join(settings.kudu.masters)} (rows with _deleted = false)"
                ]
                if "kudu" in names.mirror_ports
                else []
            ),
            f"Kafka topic    {self.topic} at {settings.kafka.bootstrap_servers}",
            "collectors     "
            + ", ".join(f"http://127.0.0.1:{port}/health" for port in names.collector_ports),
            f"logs           {names.logs}",
        ]
        self.console.rule("[bold]where to look")
        for line in lines:
            self.console.print(f"  {escape(line)}", highlight=False)


_STORE_NAMES = {"hive": "the Hive snapshot of {day}", "warehouse": "the warehouse",
                "redis": "Redis", "kudu": "Kudu"}  # fmt: skip


def _stores_named(agreement: TableAgreement, day: date) -> str:
    """'MySQL, the Hive snapshot of DAY, the warehouse and Redis': the stores compared."""
    names = ["MySQL"] + [
        _STORE_NAMES.get(s.store, s.store).format(day=day)
        for s in agreement.stores
        if s is not agreement.reference
    ]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def _wait_exit(component: Component, timeout_s: float) -> None:
    wait_until(
        lambda: not component.running,
        timeout_s,
        f"{component.name} to finish",
        clock=component.clock,
    )
    if component.returncode != 0:
        raise ComponentError(
            f"{component.name} failed with exit code {component.returncode}; "
            f"see {component.log_path}."
        )


def _live_line(run: DemoRun, workload: Workload) -> str:
    names, services = run.names, run.services
    kafka = sum(services.end_offsets(run.topic).values())
    lake = services.metric_sum(f"http://127.0.0.1:{names.writer_port}/metrics", LAKE_ROWS_METRIC)
    applied = {
        target: services.metric_sum(f"http://127.0.0.1:{port}/metrics", MIRROR_ROWS_METRIC)
        for target, port in names.mirror_ports.items()
    }
    active = _active_collector(run.collectors)
    kudu = f"Kudu {applied['kudu'] or 0:>6.0f} │ " if "kudu" in applied else ""
    return (
        f"  MySQL {workload.changes:>6} │ Kafka end offsets {kafka:>6} │ lake {lake or 0:>6.0f} │ "
        f"warehouse {applied['warehouse'] or 0:>6.0f} │ Redis {applied['redis'] or 0:>6.0f} │ "
        f"{kudu}{active.name if active else '—'}"
    )


def _fail_over(run: DemoRun) -> None:
    """kill -9 the active collector, time the standby's takeover, restart the dead one."""
    active = _active_collector(run.collectors)
    if active is None:
        return
    active.kill()
    run.console.print(f"  [yellow]kill -9 {escape(active.name)}[/]: the standby takes over…")

    def other_active() -> bool:
        now = _active_collector(run.collectors)
        return now is not None and now is not active

    took = wait_until(other_active, 120, "the standby collector to take over", clock=run.clock)
    successor = _active_collector(run.collectors)
    run.console.print(
        f"  [green]{escape(successor.name) if successor else '?'} active[/] after {took:.1f} s; "
        f"{escape(active.name)} restarts as the new standby"
    )
    active.start()


def _catch_up(run: DemoRun, last_gtid: str) -> None:
    """Wait until the collector published everything and every consumer applied it."""

    def collector_done() -> bool:
        active = _active_collector(run.collectors)
        health = active.health() if active else None
        committed = (health or {}).get("committed") or {}
        return _gtid_reached(committed.get("gtid"), last_gtid)

    services = run.services
    took = wait_until(
        collector_done, 300, f"the collector to publish up to GTID {last_gtid}", clock=run.clock
    )
    ends = services.end_offsets(run.topic)
    run.console.print(
        f"  collector: everything up to GTID {escape(last_gtid)} is in Kafka ({took:.1f} s); "
        f"{escape(run.topic)} ends at offsets {sum(ends.values())} "
        "(messages and transaction markers)"
    )
    for target in run.names.mirror_ports:
        group = f"{run.names.group_prefix}.{target}"

        def applied(group: str = group) -> bool:
            committed = services.group_offsets(group, run.topic, sorted(ends))
            return not services.messages_after(run.topic, committed)

        took = wait_until(applied, 300, f"the {target} mirror to apply everything", clock=run.clock)
        run.console.print(f"  mirror → {escape(target)}: caught up ({took:.1f} s)")
    took = wait_until(
        lambda: not services.messages_after(run.topic, _writer_offsets(run.names, run.topic)),
        600,
        "the stream writer to write everything to the lake",
        clock=run.clock,
    )
    run.console.print(f"  stream writer: everything is in the lake ({took:.1f} s)")
