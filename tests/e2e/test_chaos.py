"""The chaos suite: the whole pipeline as real processes under a randomized workload, with
components killed, paused and shared services restarted at random moments; at the end every
store equals MySQL row for row and the raw layer holds each change exactly once.

Run it::

    ./run tests tests/e2e/test_chaos.py -s     # the short form (CI, part of ./run tests):
                                               # ≥ 10,000 row changes at 80/s while every
                                               # fault runs once
    CDC_TEST_CHAOS_FULL=1 ./run tests tests/e2e/test_chaos.py -s
                                               # the full form: ≥ 500,000 row changes at up
                                               # to 1,200/s, every fault 3 times

Duration (measured on the 2-core development machine): the short form with every fault,
restarts included, 3.1 min when the machine was otherwise idle (10,004 row changes); 10.4 min
(restarts off) while four other agents kept the load average at ~11, where the stream
writer's Spark restart alone takes 2.5 min. The full form with every fault, restarts
included: 29 min at load ~10 (1,580,533 row changes: the workload runs until the last fault
has recovered). Bounded by a 25 min timeout (the full form: 90 min).

Knobs (environment): ``CDC_TEST_CHAOS_RESTARTS=0`` leaves out the Kafka broker and MariaDB
restarts (they disturb every other user of the shared local stack); ``CDC_TEST_CHAOS_SEED``
picks the workload's and the fault schedule's seed (default 20261122); ``CDC_TEST_CHAOS_CHANGES``
overrides the number of row changes; ``CDC_TEST_CHAOS_FAULTS=restart_kafka,kill_stream_writer``
injects only the named faults (to reproduce one failure).

What runs: a sharded schema of its own (``chaos<tag>_ordercenter_00..03`` ×
``orderinfo_00..01`` → the logical table ``chaos<tag>_ordercenter_orderinfo``), two HA
collectors, the stream writer, the Redis and the warehouse mirrors (``cdc-mirror``
subcommands, ``cdc_mirror.processes``). Faults (``tests/e2e/chaos.py``): ``kill -9`` of the
active collector, of the standby, of the stream writer and of each mirror; a pause of the
active collector past its ZooKeeper session; a restart of the Kafka broker and of MariaDB.

At the end, once everything drained (conditions polled with deadlines): the day(s) are merged
(``cdc-mirror merge --skip-readiness``: today is never declared ready during a test), and
``cdc_mirror.verify`` compares MySQL with the Hive snapshot, the warehouse and Redis
(row count, order-independent checksum, differing keys) and the lake with Kafka (each
message exactly once, no change repeated). A sampler thread read Redis keys all along: no
stored binlogOffset ever went back. The fault table is printed (``-s`` shows it) and written
to ``fault_table.txt`` in the test's tmp dir.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from cdc_mirror.processes import ComponentError
from cdc_mirror.verify import (
    SparkChecks,
    TableAgreement,
    check_raw_layer,
    compare,
    kafka_coordinates,
    mysql_digest,
    mysql_schema,
    redis_digest,
    warehouse_digest,
)
from cdc_platform.config import Settings
from collector.reader import server_position
from tests.e2e.chaos import (
    FAULT_HOW,
    RESTART_FAULTS,
    Faults,
    FaultTable,
    RedisSampler,
    Watchdog,
    run_fault,
)
from tests.e2e.pipeline import ROOT, ChaosNames, ChaosPipeline
from tests.e2e.workload import ShardedSchema, Workload, admin_connection
from tests.integration.collector.harness import reached

log = logging.getLogger(__name__)
SPARK_JOB = Path(__file__).resolve().parent / "spark_job.py"

FULL = os.environ.get("CDC_TEST_CHAOS_FULL") == "1"
RESTARTS = os.environ.get("CDC_TEST_CHAOS_RESTARTS", "1") != "0"
SEED = int(os.environ.get("CDC_TEST_CHAOS_SEED", "20261122"))
CHANGES = int(os.environ.get("CDC_TEST_CHAOS_CHANGES", "500000" if FULL else "10000"))
RATE = 1200.0 if FULL else 80.0  # row changes per second the workload aims at
REPEATS = 3 if FULL else 1
GAP_S = (5.0, 20.0) if FULL else (2.0, 6.0)  # random pause before each fault
DRAIN_TIMEOUT_S = 900.0 if FULL else 300.0
SESSION_TIMEOUT_S = 4.0
ONLY_FAULTS = [f for f in os.environ.get("CDC_TEST_CHAOS_FAULTS", "").split(",") if f]


def _merge(pipeline: ChaosPipeline, day: str, log_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "cdc_mirror",
        "merge",
        "--dt",
        day,
        "--table",
        pipeline.names.table,
        "--skip-readiness",
    ]
    with log_path.open("ab") as sink:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, **pipeline.env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, f"merge of {day} failed (exit {done.returncode}); see {log_path}"


def _spark_databases(pipeline: ChaosPipeline) -> list[str]:
    tag = pipeline.names.tag
    return [f"chaos{tag}_raw", f"chaos{tag}_snap"]


def _spark_job(pipeline: ChaosPipeline, tmp_path: Path, args: list[str]) -> None:
    """tests/e2e/spark_job.py in a Spark process of its own; it drops the test's Hive
    databases at its end (their files live in the tmp dir)."""
    command = [sys.executable, str(SPARK_JOB), *args]
    for database in _spark_databases(pipeline):
        command += ["--drop", database]
    log_path = tmp_path / "logs" / "spark-job.log"
    with log_path.open("ab") as sink:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, **pipeline.env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, f"the Spark job failed (exit {done.returncode}); see {log_path}"


def _cleanup_stores(settings: Settings, pipeline: ChaosPipeline) -> None:
    import psycopg
    import redis

    from mirror.warehouse import connect_warehouse

    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    for key in client.scan_iter(match=f"{settings.redis.key_prefix}:*", count=2000):
        client.delete(key)
    client.close()
    try:
        with connect_warehouse(settings.postgres) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{settings.mirror.warehouse_schema}" CASCADE')
    except psycopg.Error:
        pass
    from confluent_kafka.admin import AdminClient
    from kazoo.client import KazooClient

    from cdc_platform.kafka import admin_config

    zookeeper = KazooClient(hosts=settings.zookeeper.hosts)
    zookeeper.start(timeout=15)
    try:
        zookeeper.delete(settings.zookeeper.root, recursive=True)
    except Exception:  # noqa: BLE001 - never created
        log.info("no ZooKeeper root %s to remove", settings.zookeeper.root)
    finally:
        zookeeper.stop()
    topics = [pipeline.topic, f"{pipeline.topic}.positions", f"{pipeline.topic}.schema-changes"]
    admin = AdminClient(admin_config(settings.kafka))
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        with contextlib.suppress(Exception):  # a topic that was never created
            future.result(timeout=60)


def _report(table: FaultTable, tmp_path: Path, extra: list[str]) -> Path:
    text = "\n".join([table.render(), *extra])
    path = tmp_path / "fault_table.txt"
    path.write_text(text + "\n")
    print("\n" + text, flush=True)
    return path


def _fault_lane(
    faults: Faults,
    kinds: list[str],
    rng: random.Random,
    table: FaultTable,
    workload: Workload,
    ready: Callable[[], None] | None = None,
) -> None:
    if ready is not None:
        try:
            ready()
        except ComponentError as exc:
            for kind in kinds:
                table.record(kind, FAULT_HOW[kind]).failures.append(f"not injected: {exc}")
            return
    for kind in kinds:
        workload.stop.wait(rng.uniform(*GAP_S))  # a random moment, not a synchronisation
        if not workload.is_alive():
            return  # reported by the test
        run_fault(faults, kind, table)


def _inject_faults(
    faults: Faults, table: FaultTable, workload: Workload, rng: random.Random
) -> None:
    """Every fault REPEATS times in a seeded random order. Killing the stream writer runs in
    a lane of its own: its recovery (a new Spark session and a first batch) takes minutes on
    a loaded machine and touches nothing the other faults do."""
    unknown = sorted(set(ONLY_FAULTS) - set(FAULT_HOW))
    assert not unknown, f"CDC_TEST_CHAOS_FAULTS names unknown faults {unknown}: {list(FAULT_HOW)}"
    kinds = [
        k
        for k in FAULT_HOW
        if (RESTARTS or k not in RESTART_FAULTS) and (not ONLY_FAULTS or k in ONLY_FAULTS)
    ]
    schedule = [kind for kind in kinds for _ in range(REPEATS)]
    rng.shuffle(schedule)
    writer_lane = [k for k in schedule if k == "kill_stream_writer"]
    main_lane = [k for k in schedule if k != "kill_stream_writer"]
    pipeline = faults.pipeline

    def writer_ready() -> None:
        # The stream writer's first Spark batch takes a while: the other lane does not wait.
        pipeline.wait(lambda: (pipeline.writer_rows() or 0) > 0, 400, "the stream writer")

    lane = threading.Thread(
        target=_fault_lane,
        args=(faults, writer_lane, random.Random(rng.random()), table, workload, writer_ready),
        name="chaos-writer-lane",
        daemon=True,
    )
    lane.start()
    _fault_lane(faults, main_lane, rng, table, workload)
    lane.join()


def _drain(
    pipeline: ChaosPipeline, settings: Settings, local_stack: Settings
) -> list[tuple[str, int, int, int | None]]:
    """Wait until every component has handled every change; returns the topic's messages."""
    with admin_connection(local_stack, autocommit=True) as conn, conn.cursor() as cursor:
        end = server_position(cursor)
    pipeline.wait(
        lambda: any(reached(pipeline.committed(c), end.gtid) for c in pipeline.collectors),
        DRAIN_TIMEOUT_S,
        "the active collector to reach the workload's end",
    )
    # The topic is complete now: what it holds decides what "caught up" means.
    kafka_messages = kafka_coordinates(settings, settings.table(pipeline.names.table))
    ends: dict[int, int] = {}
    for _, partition, offset, _ in kafka_messages:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    pipeline.wait(
        lambda: pipeline.writer_caught_up(ends), DRAIN_TIMEOUT_S, "the stream writer to catch up"
    )
    for target in pipeline.mirror_ports:
        pipeline.wait(
            lambda t=target: pipeline.mirror_lag(t, ends) == 0,
            DRAIN_TIMEOUT_S,
            f"the {target} mirror to catch up",
        )
    return kafka_messages


@pytest.mark.timeout(5400 if FULL else 1500)
def test_pipeline_survives_chaos_and_every_store_equals_mysql(
    local_stack: Settings, tmp_path: Path
) -> None:
    names = ChaosNames()
    schema = ShardedSchema(names.db_prefix)
    schema.create(local_stack)
    with admin_connection(local_stack, autocommit=True) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
    pipeline = ChaosPipeline(local_stack, tmp_path, start.gtid, names)
    settings = pipeline.settings()
    pipeline.build()
    table = FaultTable()
    workload = Workload(local_stack, schema, SEED, RATE)
    sampler = RedisSampler(
        settings.redis.url.get_secret_value(), f"{settings.redis.key_prefix}:{names.table}:*"
    )
    watchdog = Watchdog(pipeline, table)
    extra: list[str] = []
    timings: dict[str, float] = {}
    reported = spark_ran = False
    began = time.monotonic()
    try:
        with pipeline.supervisor.running():
            try:
                for component in pipeline.supervisor.components.values():
                    component.start()
                for collector in pipeline.collectors:
                    collector.wait_healthy(120)
                pipeline.wait(
                    lambda: pipeline.active_collector() is not None, 180, "an active collector"
                )
                workload.start()
                sampler.start()
                # Up once each mirror has applied rows (the writer: see _inject_faults).
                for target in pipeline.mirror_ports:
                    pipeline.wait(
                        lambda t=target: (pipeline.mirror_rows(t) or 0) > 0,
                        120,
                        f"the {target} mirror",
                    )
                watchdog.start()
                timings["startup"] = time.monotonic() - began

                faults = Faults(pipeline, watchdog, SESSION_TIMEOUT_S)
                _inject_faults(faults, table, workload, random.Random(SEED))
                assert workload.is_alive(), f"the workload died: {workload.fatal!r}"
                pipeline.wait(
                    lambda: workload.changes >= CHANGES or not workload.is_alive(),
                    max(600.0, 3 * CHANGES / RATE),
                    f"{CHANGES} row changes",
                )
                workload.stop.set()
                workload.join(60)
                assert workload.fatal is None, f"the workload failed: {workload.fatal!r}"
                timings["faults+workload"] = time.monotonic() - began - timings["startup"]

                drain_started = time.monotonic()
                kafka_messages = _drain(pipeline, settings, local_stack)
                timings["drain"] = time.monotonic() - drain_started
            finally:
                # Before the supervisor stops the components: nothing may restart them then.
                watchdog.stop.set()
                if watchdog.is_alive():
                    watchdog.join(30)
                workload.stop.set()
                sampler.stop.set()
        if sampler.is_alive():
            sampler.join(30)

        # -- merge and compare ------------------------------------------------------------------
        checked = time.monotonic()
        mirror = settings.table(names.table)
        days = pipeline.writer_days()
        assert days, "the stream writer wrote no day of the table"
        for day in days:
            _merge(pipeline, day, tmp_path / "logs" / "merge.log")
        timings["merge"] = time.monotonic() - checked
        with ThreadPoolExecutor(max_workers=1) as pool:
            # MySQL, the warehouse and Redis are read while the Spark process starts.
            spark_future = pool.submit(
                _spark_job,
                pipeline,
                tmp_path,
                ["--table", names.table, "--output", str(tmp_path / "spark-checks.json")]
                + [part for day in days for part in ("--dt", day)],
            )
            table_schema = mysql_schema(settings, mirror)
            reference = mysql_digest(settings, mirror, table_schema)
            warehouse = warehouse_digest(settings, mirror, table_schema)
            in_redis = redis_digest(settings, mirror, table_schema)
            spark_future.result()
        spark_ran = True
        spark = SparkChecks.from_json(orjson.loads((tmp_path / "spark-checks.json").read_bytes()))
        raw = check_raw_layer(names.table, kafka_messages, spark.lake)
        agreement: TableAgreement = compare(
            reference, [spark.snapshots[days[-1]], warehouse, in_redis]
        )
        timings["verify"] = time.monotonic() - checked - timings["merge"]
        certain = workload.stats.certain_changes
        uncertain = workload.stats.uncertain_changes
        extra += [
            "",
            f"workload: {workload.changes} row changes in {workload.stats.transactions} "
            f"transactions ({uncertain} in transactions whose COMMIT answer was lost), "
            f"{workload.stats.reconnects} reconnects; seed {SEED}",
            f"redis sampler: {sampler.reads} reads of {len(sampler.seen)} keys, "
            f"{len(sampler.regressions)} went back",
            raw.describe(),
            agreement.describe(),
            "seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()),
        ]
        report = _report(table, tmp_path, extra)
        reported = True
        hint = f" (fault table: {report})"
        assert table.ok, "a fault was not recovered from" + hint
        assert not sampler.regressions, f"Redis went back: {sampler.regressions[:5]}" + hint
        assert sampler.fatal is None, f"the Redis sampler failed: {sampler.fatal!r}" + hint
        assert raw.exactly_once, raw.describe() + hint
        assert certain <= raw.kafka_messages <= certain + uncertain, (
            f"Kafka holds {raw.kafka_messages} changes; the workload made {certain} for sure "
            f"and {uncertain} maybe" + hint
        )
        assert agreement.agrees, agreement.describe() + hint
        assert reference.count > 0
    except BaseException as exc:
        if not reported:
            _report(table, tmp_path, [f"stopped early: {' '.join(str(exc).split())[:500]}"])
        raise
    finally:
        if not spark_ran:
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                _spark_job(pipeline, tmp_path, [])
        _cleanup_stores(settings, pipeline)
        schema.drop(local_stack)
