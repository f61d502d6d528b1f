"""Collector throughput against plain python-mysql-replication, on the same binlog.

    .venv/bin/python -m bench.collector_bench [--single-rows 200000] [--transactions 1000]

Workload A: single-row autocommit INSERT/UPDATE/DELETE on a 12-column table.
Workload B: transactions of 1,000 rows.
Baseline: python-mysql-replication reading the same binlog range and decoding every row,
doing nothing else. Measured: the collector publishing the same range into Kafka with
exactly-once on (transactions, acks=all, positions committed). Prints rows/s of both, the
ratio, and the machine. Starts the local stack if needed.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, load_settings
from collector.decoding import fix_reader_quirks
from collector.metrics import CollectorMetrics
from collector.position import parse_gtid
from collector.publisher import KafkaPublisher
from collector.reader import ServerPosition, connect, server_position
from collector.service import Collector, tune_gc
from simple_binlog.control import is_control
from simple_binlog.naming import topic_name
from stack.manager import LocalStack

DB = "bench_collector"
DDL = f"""
CREATE TABLE {DB}.orders (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY, user_id INT NOT NULL, shop_id INT NOT NULL,
  amount DECIMAL(12,2) NOT NULL, fee DECIMAL(10,4) NULL, status ENUM('NEW','PAID','SHIPPED') NOT NULL,
  note VARCHAR(64) NULL, channel CHAR(8) NOT NULL, created_at DATETIME(3) NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), flags BIT(8) NOT NULL, ratio DOUBLE NULL
)"""
INSERT = (
    f"INSERT INTO {DB}.orders (id, user_id, shop_id, amount, fee, status, note, channel,"
    " created_at, flags, ratio) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, NOW(3), b'101', %s)"
)


def _admin(settings: Settings):
    instance = settings.instances[0].model_copy(
        update={"user": settings.stack.admin_user, "password": settings.stack.admin_password}
    )
    return connect(instance, autocommit=True)


def _row(rng: random.Random, key: int) -> tuple:
    return (key, rng.randrange(10**6), rng.randrange(1000), Decimal(rng.randrange(10**6)) / 100,
            Decimal(rng.randrange(10**5)) / 10**4, rng.choice(("NEW", "PAID", "SHIPPED")),
            rng.choice((None, "", "gift")), "app", rng.random())


def workload_a(settings: Settings, changes: int) -> tuple[ServerPosition, ServerPosition]:
    rng = random.Random(1)
    with _admin(settings) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
        live: list[int] = []
        key = 0
        for _ in range(changes):
            action = rng.random()
            if action < 0.5 or len(live) < 10:
                key += 1
                cursor.execute(INSERT, _row(rng, key))
                live.append(key)
            elif action < 0.85:
                cursor.execute(f"UPDATE {DB}.orders SET status = 'PAID', amount = amount + 1 WHERE id = %s", (rng.choice(live),))
            else:
                cursor.execute(f"DELETE FROM {DB}.orders WHERE id = %s", (live.pop(rng.randrange(len(live))),))
        return start, server_position(cursor)


def workload_b(settings: Settings, transactions: int) -> tuple[ServerPosition, ServerPosition]:
    rng = random.Random(2)
    with _admin(settings) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
        key = 10**9
        for _ in range(transactions):
            conn.begin()
            rows = []
            for _ in range(1000):
                key += 1
                rows.append(_row(rng, key))
            cursor.executemany(INSERT.replace("NOW(3)", "'2026-11-21 00:00:00.000'"), rows)
            conn.commit()
        return start, server_position(cursor)


def baseline(settings: Settings, start: ServerPosition, stop: ServerPosition) -> tuple[int, float]:
    """python-mysql-replication alone: decode every row of the range, nothing else."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    instance = settings.instances[0]
    reader = BinLogStreamReader(
        connection_settings={"host": instance.host, "port": instance.port, "user": instance.user,
                             "password": instance.password.get_secret_value()},
        server_id=random.randrange(2_000_000_000, 2_100_000_000),
        auto_position=start.gtid, blocking=True, is_mariadb=True,
        # Only the benchmark's rows count (other clients may write to the same server), and
        # the library skips decoding other schemas' rows, as the collector's filter does.
        only_schemas=[DB],
    )
    rows = 0
    began = time.perf_counter()
    for event in reader:
        if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            rows += len(event.rows)
        if (reader.log_file, reader.log_pos) >= (stop.file, stop.pos):
            break
    elapsed = time.perf_counter() - began
    reader.close()
    return rows, elapsed


def start_collector(settings: Settings, start: ServerPosition, governance=None):
    """A collector publishing from ``start`` in a thread, into topics of its own (with the
    ``GovernanceRuntime`` given: detection and policies on, for bench.governance_bench)."""
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"bench{uuid.uuid4().hex[:6]}."})
    collector_settings = settings.collector.model_copy(
        update={"start": start.gtid, "include": [rf"{DB}\..*"]}
    )
    # An instance name and replica server id of the benchmark's own: a collector running on the
    # same stack (a test, the demo) is neither fenced nor disconnected by this one.
    instance = settings.instances[0].model_copy(
        update={"name": f"bench-{uuid.uuid4().hex[:6]}", "replica_server_id": random.randrange(10**6, 2 * 10**6)}
    )
    metrics = CollectorMetrics()
    halt = threading.Event()
    collector = Collector(instance, collector_settings, KafkaPublisher(kafka, instance.name),
                          metrics, stop=halt, governance=governance)
    thread = threading.Thread(target=collector.run)
    thread.start()
    return collector, metrics, halt, thread, topic_name(kafka, instance.name), kafka


def collector_run(settings: Settings, start: ServerPosition, stop: ServerPosition,
                  governance=None) -> tuple[int, float]:
    """The collector publishing the range into Kafka, exactly once, until it has committed it;
    timed from the moment it publishes (its topics made, earlier owners fenced: a one-off of
    about a second at a new instance's start, not a cost per row)."""
    collector, metrics, halt, thread, _topic, _kafka = start_collector(settings, start, governance)
    if not collector.started.wait(60):
        raise SystemExit("the collector did not start within 60 s")
    began = time.perf_counter()
    target = parse_gtid(stop.gtid.split(",")[0])[2]
    while True:
        committed = collector.committed
        if committed and committed.partial is None and committed.gtid and parse_gtid(committed.gtid.split(",")[0])[2] >= target:
            break
        if not thread.is_alive():  # e.g. the range's binlog was purged: its error is printed
            raise SystemExit("the collector stopped before publishing the whole range")
        time.sleep(0.01)
    elapsed = time.perf_counter() - began
    halt.set()
    thread.join()
    rows = int(sum(s.value for m in metrics.rows.collect() for s in m.samples if s.name.endswith("_total")))
    return rows, elapsed


def _paced_writer(worker: int, writers: int, total: int, rate: int, start_at: float) -> dict[int, float]:
    """One writer process: every ``writers``-th key, paced to ``rate`` rows/s overall from
    ``start_at``; returns key → wall-clock time its autocommit returned."""
    settings = load_settings()
    rng = random.Random(worker)
    committed: dict[int, float] = {}
    with _admin(settings) as conn, conn.cursor() as cursor:
        for key in range(1 + worker, total + 1, writers):
            ahead = start_at + key / rate - time.time()
            if ahead > 0:
                time.sleep(ahead)
            cursor.execute(INSERT, _row(rng, 10**12 + key))
            committed[10**12 + key] = time.time()
    return committed


def simple_binlog_id(value: bytes) -> int | None:
    """The key of a SimpleBinlog message's row (``content.id``)."""
    import orjson

    return int(orjson.loads(value)["content"]["id"])


def _receiver(kafka, topic: str, total: int, ready, writers_done, results, key_of=simple_binlog_id,
              properties=None) -> None:
    """A read_committed consumer in a process of its own (in the collector's process it would
    compete with it for the GIL): key → wall-clock time each row became readable, and key →
    the record's CreateTime (when the publisher produced it). ``key_of`` reads a record's row
    key (a module-level function: the process is spawned)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from cdc_platform.kafka import consumer_config

    consumer = Consumer(consumer_config(kafka, group_id=f"bench-{uuid.uuid4().hex[:6]}") | (properties or {}))
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    received_at: dict[int, float] = {}
    produced_at: dict[int, float] = {}
    ready.set()
    deadline = None
    while len(received_at) < total:
        for record in consumer.consume(1000, 0.05):
            # Control messages (watermark heartbeats) are no rows: every reader skips them.
            if record.error() is None and record.value() and not is_control(record.key()):
                key = key_of(record.value())
                if key is not None:
                    received_at[key] = time.time()
                    produced_at[key] = record.timestamp()[1] / 1000
        if deadline is None and writers_done.is_set():  # then wait at most 60 s more
            deadline = time.monotonic() + 60
        if deadline and time.monotonic() > deadline:
            break
    consumer.close()
    results.put((received_at, produced_at))


@dataclass
class TimedRows:
    """One latency run: per row key, when its autocommit returned, when the publisher produced
    it (the record's CreateTime) and when a read_committed consumer received it."""

    committed_at: dict[int, float]
    produced_at: dict[int, float]
    received_at: dict[int, float]
    achieved: float
    # (began, returned) of each of the publisher's transaction commits, when recorded.
    commits: list[tuple[float, float]] = field(default_factory=list)
    # Key → when the collector's reader thread had decoded its row, when recorded.
    decoded_at: dict[int, float] = field(default_factory=dict)
    load: float = 0.0  # the machine's 1-minute load average at the run's end

    def commit_steps_ms(self) -> dict[str, list[float]]:
        """Produced → readable split by the transaction that published each row (the first
        commit begun after it was produced: rows are produced and committed by one thread):
        waiting for that commit to begin, the commit call, its return → readable."""
        import bisect

        starts = [began for began, _ in self.commits]
        steps: dict[str, list[float]] = {"to commit": [], "commit": [], "visible": [], "held": []}
        for key, produced in self.produced_at.items():
            index = bisect.bisect_left(starts, produced)
            if key not in self.received_at or key not in self.committed_at or index == len(starts):
                continue
            if index > 0:
                # Held by the commit before: the row was in MySQL before that commit returned
                # (the loop that would have produced it waited for the commit).
                earlier_began, earlier_returned = self.commits[index - 1]
                held = earlier_returned - max(self.committed_at[key], earlier_began)
                steps["held"].append(max(0.0, held) * 1000)
            began, returned = self.commits[index]
            steps["to commit"].append((began - produced) * 1000)
            steps["commit"].append((returned - began) * 1000)
            steps["visible"].append((self.received_at[key] - returned) * 1000)
        return {name: sorted(values) for name, values in steps.items()}

    def delays_ms(self, start: str = "committed", end: str = "received") -> list[float]:
        """Sorted delays between two of the steps, over the rows that reached ``end``."""
        since, until = getattr(self, f"{start}_at"), getattr(self, f"{end}_at")
        return sorted((until[k] - since[k]) * 1000 for k in self.committed_at if k in until and k in since)


def timed_run(kafka, topic: str, seconds: float, rate: int, writers: int = 4,
              key_of=simple_binlog_id, consumer=None) -> TimedRows:
    """Single-row autocommits paced at ``rate`` rows/s by ``writers`` processes, each timed from
    its commit to its arrival in ``topic`` (whatever publishes there is already running)."""
    import multiprocessing

    total = int(seconds * rate)
    context = multiprocessing.get_context("spawn")
    ready, writers_done, results = context.Event(), context.Event(), context.Queue()
    receiver = context.Process(
        target=_receiver, args=(kafka, topic, total, ready, writers_done, results, key_of, consumer)
    )
    receiver.start()
    if not ready.wait(60):
        raise SystemExit("the bench's consumer did not start within 60 s")
    start_at = time.time() + 2.0  # every writer paces from the same wall-clock start
    with context.Pool(writers) as pool:
        results_by_writer = pool.starmap(
            _paced_writer, [(w, writers, total, rate, start_at) for w in range(writers)]
        )
    committed_at: dict[int, float] = {}
    for result in results_by_writer:
        committed_at.update(result)
    achieved = total / (max(committed_at.values()) - start_at)
    writers_done.set()
    received_at, produced_at = results.get(timeout=120)
    receiver.join(10)
    run = TimedRows(committed_at, produced_at, received_at, achieved)
    arrived = len(run.delays_ms())
    if arrived < total:
        raise SystemExit(f"only {arrived} of {total} rows arrived within 60 s")
    return run


def timed_rows(kafka, topic: str, seconds: float, rate: int, writers: int = 4,
               key_of=simple_binlog_id) -> tuple[float, float, float, int]:
    """As ``timed_run``: (p50 ms, p99 ms, achieved rows/s, rows) of commit → received."""
    run = timed_run(kafka, topic, seconds, rate, writers, key_of)
    delays = run.delays_ms()
    return delays[len(delays) // 2], delays[int(len(delays) * 0.99)], run.achieved, len(delays)


def latency(settings: Settings, seconds: float, rate: int, writers: int = 4) -> tuple[float, float, float, int]:
    """MySQL commit → readable by a read_committed consumer, for single-row autocommits paced
    at ``rate`` rows/s by ``writers`` connections. Returns (p50 ms, p99 ms, achieved rows/s,
    rows). Writers and the consumer are processes of their own, so the collector's process
    runs the collector only."""
    with _admin(settings) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
    collector, _metrics, halt, thread, topic, kafka = start_collector(settings, start)
    if not collector.started.wait(60):
        raise SystemExit("the collector did not start within 60 s")
    try:
        return timed_rows(kafka, topic, seconds, rate, writers)
    finally:
        halt.set()
        thread.join()


@dataclass(frozen=True)
class LatencyConfig:
    """A named configuration of the collector for the latency run: settings it changes against
    ``load_settings()``'s ``collector`` section, and what is done to its process."""

    description: str
    collector: dict[str, Any] = field(default_factory=dict)
    # Added to the collector process's niceness (negative: a larger CPU share than the
    # machine's other work; needs root or CAP_SYS_NICE). Attribution, not a product setting.
    nice: int = 0
    # sys.setswitchinterval in the collector's process (None: CPython's 5 ms).
    switch_interval_s: float | None = None
    # Properties of the read_committed consumer that times the rows (as a mirror's would be).
    consumer: dict[str, Any] = field(default_factory=dict)
    # False: the publisher as before 2026-11-26, whose positions partition joined each Kafka
    # transaction only at its commit (collector.publisher.KafkaPublisher._begin_transaction).
    opening_record: bool = True
    # True: commit_interval_ms counted from the return of the commit before, as before
    # 2026-11-26 (collector.service counts it from that commit's start).
    interval_from_return: bool = False
    # True: the reader gathers received transactions into one hand-over without a time bound,
    # as before 2026-11-26 (collector.service._GATHER_S).
    gather_unbounded: bool = False


LATENCY_CONFIGS: dict[str, LatencyConfig] = {
    "before": LatencyConfig(
        "the collector as before 2026-11-26: the positions partition joins each Kafka "
        "transaction at its commit, commit_interval_ms counted from the return of the commit "
        "before, the reader's gathering unbounded in time",
        opening_record=False,
        interval_from_return=True,
        gather_unbounded=True,
    ),
    "opening-record": LatencyConfig(
        "the positions partition joins each Kafka transaction when it begins (an opening "
        "record); commit_interval_ms counted from the return of the commit before; the "
        "reader's gathering unbounded in time",
        interval_from_return=True,
        gather_unbounded=True,
    ),
    "gather-unbounded": LatencyConfig(
        "the collector as now, but its reader gathers received transactions into one "
        "hand-over without a time bound",
        gather_unbounded=True,
    ),
    "current": LatencyConfig("the collector as 'cdc-mirror collector' runs it"),
    # Attribution: how much of the tail is the collector's process waiting for a CPU.
    "priority": LatencyConfig("the collector's process at nice -10 (CPU ahead of the machine's other work)", nice=-10),
    "interval-100": LatencyConfig("collector.commit_interval_ms 100 (half as many Kafka transactions)",
                                  {"commit_interval_ms": 100}),
    "interval-20": LatencyConfig("collector.commit_interval_ms 20", {"commit_interval_ms": 20}),
    "fetch-wait-10": LatencyConfig(
        "the reading consumer's fetch.wait.max.ms 10 (librdkafka's default: 500)",
        consumer={"fetch.wait.max.ms": "10"},
    ),
    "switch-1ms": LatencyConfig("the collector's threads hand the GIL over every 1 ms (sys.setswitchinterval)",
                                switch_interval_s=0.001),
}


class _TimedPublisher(KafkaPublisher):
    """Notes when each transaction commit began and returned (wall clock)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.commits: list[tuple[float, float]] = []

    def commit(self, position) -> None:
        began = time.time()
        super().commit(position)
        self.commits.append((began, time.time()))


class _TimedLatePublisher(_TimedPublisher):
    """As the publisher was before: a transaction begins without the opening record, so the
    positions partition joins it at the commit."""

    def _begin_transaction(self) -> None:
        self._require_producer().begin_transaction()
        self._in_transaction = True


def _note_decoding() -> dict[int, float]:
    """Row key → when the collector's reader thread decoded it (binlog event received and
    decoded, before the hand-over to the publishing loop): ``collector.service``'s decoder,
    wrapped in this (the collector's) process."""
    from collector import service
    from collector.work import RowChanges

    decoded_at: dict[int, float] = {}

    class NotingDecoder(service.EventDecoder):
        def items(self, *args: Any, **kwargs: Any):
            for item in super().items(*args, **kwargs):
                if isinstance(item, RowChanges):
                    now = time.time()
                    for message in item.messages:
                        decoded_at[int(message.content["id"])] = now
                yield item

    service.EventDecoder = NotingDecoder  # type: ignore[misc]
    return decoded_at


class _IntervalFromReturn(Collector):
    """As the collector was before: ``commit_interval_ms`` counts from the return of the
    commit before (a slow commit is followed by a whole interval more)."""

    def _commit(self, progress):  # type: ignore[no-untyped-def]
        progress = super()._commit(progress)
        progress.began = time.monotonic()
        return progress


def _collector_process(instance_name: str, server_id: int, start_gtid: str, topic_prefix: str,
                       config: LatencyConfig, started, stop, commits) -> None:
    """A collector publishing the benchmark's schema from ``start_gtid`` until ``stop`` is set,
    in a process of its own (spawned) as in production, its GC tuned as its entry point does."""
    import os
    import sys

    if config.nice:
        os.nice(config.nice)
    if config.switch_interval_s is not None:
        sys.setswitchinterval(config.switch_interval_s)
    if config.gather_unbounded:
        from collector import service

        service._GATHER_S = float("inf")
    settings = load_settings()
    fix_reader_quirks()
    kafka = settings.kafka.model_copy(update={"topic_prefix": topic_prefix})
    collector_settings = settings.collector.model_copy(
        update={**config.collector, "start": start_gtid, "include": [rf"{DB}\..*"]}
    )
    instance = settings.instances[0].model_copy(update={"name": instance_name, "replica_server_id": server_id})
    halt = threading.Event()
    publisher = (_TimedPublisher if config.opening_record else _TimedLatePublisher)(kafka, instance.name)
    decoded_at = _note_decoding()
    kind = _IntervalFromReturn if config.interval_from_return else Collector
    collector = kind(instance, collector_settings, publisher, CollectorMetrics(), stop=halt)
    thread = threading.Thread(target=collector.run)
    tune_gc()
    thread.start()
    if collector.started.wait(60):
        started.set()
    stop.wait()
    halt.set()
    thread.join(60)
    commits.put((publisher.commits, decoded_at))


def config_latency(settings: Settings, config: LatencyConfig, seconds: float, rate: int,
                   writers: int = 4) -> TimedRows:
    """``latency`` with the collector in a process of its own, in ``config``."""
    import multiprocessing

    with _admin(settings) as conn, conn.cursor() as cursor:
        # Each run writes the same keys (10**12 + n): it starts without them.
        cursor.execute(f"DELETE FROM {DB}.orders WHERE id > 1000000000000")
        start = server_position(cursor)
    tag = uuid.uuid4().hex[:6]
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"benchlat{tag}."})
    instance_name = f"bench-lat{tag}"
    spawn = multiprocessing.get_context("spawn")
    started, stop, commits = spawn.Event(), spawn.Event(), spawn.Queue()
    process = spawn.Process(target=_collector_process, args=(
        instance_name, random.randrange(4 * 10**6, 5 * 10**6), start.gtid, kafka.topic_prefix, config,
        started, stop, commits))
    process.start()
    try:
        if not started.wait(90):
            raise SystemExit("the collector did not start within 90 s")
        run = timed_run(kafka, topic_name(kafka, instance_name), seconds, rate, writers,
                        consumer=config.consumer)
        run.load = os.getloadavg()[0]
        stop.set()
        run.commits, run.decoded_at = commits.get(timeout=90)
        return run
    finally:
        stop.set()
        process.join(60)
        _drop_topics(kafka)


def _drop_topics(kafka) -> None:
    """The run's topics (named by its own prefix): runs leave nothing behind."""
    from confluent_kafka.admin import AdminClient

    from cdc_platform.kafka import admin_config

    admin = AdminClient(admin_config(kafka))
    topics = [name for name in admin.list_topics(timeout=10).topics if name.startswith(kafka.topic_prefix)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result()


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def _steps(runs: list[TimedRows]) -> dict[str, float]:
    """p50/p99 (ms) over the rounds of one configuration: commit → readable, and its steps
    commit → produced (the collector: binlog, decoding, its loop) and produced → readable (the
    Kafka transaction's commit, the broker's markers, the consumer's fetch)."""
    found: dict[str, float] = {}
    for name, start, end in (("", "committed", "received"), ("produce ", "committed", "produced"),
                             ("kafka ", "produced", "received"), ("decode ", "committed", "decoded"),
                             ("hand-over ", "decoded", "produced")):
        delays = sorted(d for run in runs for d in run.delays_ms(start, end))
        found[f"{name}p50"], found[f"{name}p99"] = _percentile(delays, 0.5), _percentile(delays, 0.99)
    for name in ("held", "to commit", "commit", "visible"):
        delays = sorted(d for run in runs for d in run.commit_steps_ms()[name])
        found[f"{name} p50"], found[f"{name} p99"] = _percentile(delays, 0.5), _percentile(delays, 0.99)
    found["rows"] = float(sum(len(run.delays_ms()) for run in runs))
    found["rows/s"] = sum(run.achieved for run in runs) / len(runs)
    return found


def latency_configs(settings: Settings, names: list[str], rounds: int, seconds: float,
                    rate: int) -> list[Figure]:
    """Each named configuration ``rounds`` times in this run, each round starting one
    configuration later (a load drifting through the run touches each alike). One figure per
    configuration, ``collector.commit_latency.<name>`` (apart from ``collector.latency``, the
    issue's figure at its own rate); the first one's p99 of this run is the others'
    baseline."""
    runs: dict[str, list[TimedRows]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            config = LATENCY_CONFIGS[name]
            run = config_latency(settings, config, seconds, rate)
            step = _steps([run])
            print(f"  {name}, round {round_index + 1} (load {run.load:.1f}): {int(step['rows']):,} rows at "
                  f"{run.achieved:,.0f} rows/s: p50 {step['p50']:.0f} ms, p99 {step['p99']:.0f} ms; "
                  f"commit → produced p50/p99 {step['produce p50']:.0f}/{step['produce p99']:.0f} ms "
                  f"(→ decoded {step['decode p50']:.0f}/{step['decode p99']:.0f}, → produced "
                  f"{step['hand-over p50']:.0f}/{step['hand-over p99']:.0f}), "
                  f"produced → readable {step['kafka p50']:.0f}/{step['kafka p99']:.0f} ms (to commit "
                  f"{step['to commit p50']:.0f}/{step['to commit p99']:.0f}, commit {step['commit p50']:.0f}/"
                  f"{step['commit p99']:.0f}, commit returned → readable {step['visible p50']:.0f}/"
                  f"{step['visible p99']:.0f}); held by the commit before {step['held p50']:.0f}/"
                  f"{step['held p99']:.0f}")
            runs[name].append(run)
    found = {name: _steps(measured) for name, measured in runs.items()}
    for name, measured in runs.items():
        # One stall in one round sets the pooled p99: the rounds' own p99s, as a check.
        per_round = sorted(_steps([run])["p99"] for run in measured)
        found[name]["round p99 median"] = per_round[len(per_round) // 2]
    first = names[0]
    figures = []
    for name, steps in found.items():
        config = LATENCY_CONFIGS[name]
        print(f"{name}: p50 {steps['p50']:.0f} ms, p99 {steps['p99']:.0f} ms over {rounds} round(s) "
              f"(the rounds' p99 median {steps['round p99 median']:.0f} ms)")
        compared = name != first
        extra = dict(steps) | ({f"{first} p50": found[first]["p50"], f"{first} p99": found[first]["p99"]}
                               if compared else {})
        figures.append(Figure(
            f"collector.commit_latency.{name}",
            f"MySQL commit → readable, configuration '{name}': {config.description}; "
            f"{int(steps['rows']):,} autocommits at {steps['rows/s']:,.0f} rows/s",
            steps["p99"], "ms",
            found[first]["p99"] if compared else None,
            f"p99 of configuration '{first}': {LATENCY_CONFIGS[first].description}" if compared else None,
            higher_is_better=False, extra=extra))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single-rows", type=int, default=20_000, help="workload A size (issue: 200000)")
    parser.add_argument("--transactions", type=int, default=100, help="workload B size (issue: 1000)")
    parser.add_argument("--latency-seconds", type=float, default=10, help="length of the latency run (0: skip)")
    parser.add_argument("--latency-rate", type=int, default=5000, help="rows/s written during the latency run")
    parser.add_argument("--latency-configs", nargs="+", choices=list(LATENCY_CONFIGS),
                        help="instead of the one latency run: these named configurations (LATENCY_CONFIGS), "
                             "each with the collector in a process of its own, in rotated rounds; the first "
                             "one's p99 is the others' baseline")
    parser.add_argument("--latency-rounds", type=int, default=1, help="rotated rounds per latency configuration")
    parser.add_argument("--only", choices=("latency",), help="latency: skip the throughput workloads")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    args = parser.parse_args()
    # The collector's entry point tunes the garbage collector (collector.service.tune_gc);
    # here it is done before anything runs, so the baseline runs with the same settings.
    tune_gc()
    settings = load_settings()
    LocalStack(settings).up()
    fix_reader_quirks()
    with _admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")
        cursor.execute(f"CREATE DATABASE {DB}")
        cursor.execute(DDL)
    results = []
    figures: list[Figure] = []
    throughput = () if args.only == "latency" else (
        ("collector.single_rows", f"A: {args.single_rows:,} single-row autocommits", lambda: workload_a(settings, args.single_rows)),
        ("collector.transactions", f"B: {args.transactions:,} transactions x 1,000 rows", lambda: workload_b(settings, args.transactions)),
    )
    for key, name, make in throughput:
        start, stop = make()
        base_rows, base_s = baseline(settings, start, stop)
        coll_rows, coll_s = collector_run(settings, start, stop)
        results.append((name, base_rows, base_rows / base_s, coll_rows, coll_rows / coll_s))
        figures.append(Figure(key, name, coll_rows / coll_s, "rows/s", base_rows / base_s,
                              "python-mysql-replication decoding only", extra={"rows": coll_rows}))
    print(f"machine: {describe_machine()}")
    print("baseline: python-mysql-replication decoding the same binlog range, nothing else")
    print(f"{'workload':<44} {'rows':>9} {'baseline rows/s':>16} {'collector rows/s':>17} {'ratio':>6}")
    for name, base_rows, base_rate, coll_rows, coll_rate in results:
        assert coll_rows == base_rows, f"{name}: collector published {coll_rows}, baseline read {base_rows}"
        print(f"{name:<44} {base_rows:>9,} {base_rate:>16,.0f} {coll_rate:>17,.0f} {coll_rate / base_rate:>6.2f}")
    if args.latency_seconds > 0 and args.latency_configs:
        print(f"latency MySQL commit -> readable (read_committed) at {args.latency_rate:,} rows/s, "
              f"configurations {', '.join(args.latency_configs)} in {args.latency_rounds} rotated round(s):")
        figures += latency_configs(settings, args.latency_configs, args.latency_rounds, args.latency_seconds,
                                   args.latency_rate)
    elif args.latency_seconds > 0:
        p50, p99, achieved, rows = latency(settings, args.latency_seconds, args.latency_rate)
        print(f"latency MySQL commit -> readable (read_committed), {rows:,} single-row autocommits "
              f"at {achieved:,.0f} rows/s (target {args.latency_rate:,}): p50 {p50:.0f} ms, p99 {p99:.0f} ms")
        figures.append(Figure("collector.latency", f"MySQL commit → readable, {rows:,} autocommits at "
                              f"{achieved:,.0f} rows/s", p99, "ms", higher_is_better=False,
                              extra={"p50": p50, "p99": p99, "rows/s": achieved}))
    write_figures(args.json, "collector", figures)


if __name__ == "__main__":
    main()
