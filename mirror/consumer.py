"""The consumer loop of ``cdc-mirror mirror run``: Kafka → ``ChangeApplier``, exactly once in
effect.

One consumer group per target (``<mirror.group_prefix>.<target>``), so several processes
share the instance topics' partitions. Each round polls a batch, decodes and routes it, applies
it, and only then commits the consumed offsets. A crash between apply and commit replays the
batch, which the appliers' version guard turns into a no-op.

Batch size adapts to the stream: a batch is closed ``mirror.max_wait_ms`` after its first
message arrived, or as soon as it holds ``mirror.batch_size`` messages. A slow stream thus gets
small batches applied within a few milliseconds; a fast one piles up in the client while a
batch is applied, so the next batch fills at once and the per-batch costs (round trips) are
shared by many rows. Offsets are committed asynchronously and at most every 100 ms (see
``_flush``), so a commit's round trip is not paid by every small batch.

- A malformed message (not SimpleBinlog, or a configured table's row without a usable key)
  goes to the dead-letter topic ``cdc.mirror.<target>.dead-letter`` with its topic, partition,
  offset, error and the original bytes; the loop goes on. The dead letters are flushed before
  the offsets are committed, so none is lost.
- Messages of tables not configured for the target are skipped by configuration (counted).
- Control messages (``simple_binlog.control.is_control``: the collectors' watermark
  heartbeats) are not rows: skipped before decoding, for every target alike.
- A target that cannot be reached: the same batch is retried with back-off, nothing is
  committed meanwhile, nothing is skipped.
- Rebalance: when partitions are revoked the pending batch is applied and committed first,
  so the next owner starts where this one stopped.
- Configuration (``cdc_platform.config_store``): with a ``ConfigWatch``, a new snapshot is put
  in force between batches, after one was applied and before the next is polled: a table
  mirror added for the target is applied from its next message on (its earlier rows need a
  replay), a removed one is skipped from then on (its rows stay in the target), a changed
  one (key, columns, TTL, delete mode) applies to the next batch; the topics are subscribed
  again when the set of instances changed. One log line per change.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from cdc_platform.config import KafkaSettings, MirrorSettings, MirrorTarget
from cdc_platform.config_store import ConfigWatch, diff_snapshots
from cdc_platform.kafka import (
    RebalanceError,
    consumer_config,
    ensure_topic,
    high_watermark,
    kafka_errors,
    map_kafka_error,
    producer_config,
)
from cdc_platform.observability import Probe
from cdc_platform.retry import RetryCancelled, RetryPolicy
from mirror.applier import ApplyResult, ChangeApplier
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter, RowChange, mirror_config
from simple_binlog.control import is_control
from simple_binlog.errors import (
    CdcMirrorError,
    ContractError,
    RetriableError,
    ServiceUnavailableError,
)
from simple_binlog.message import decode_message
from simple_binlog.naming import topic_name

log = logging.getLogger(__name__)

# Asynchronous commits are sent at most this often: a synchronous commit per batch cost as
# much as applying a small batch, and committing more often moves only the replay point.
_COMMIT_INTERVAL_S = 0.1
_IDLE_WAKE_S = 0.5
# After its partitions were lost (a session timeout: the broker or the coordinator was away),
# librdkafka rejoins the group by itself. Seen once in the chaos suite after a broker restart:
# a consumer that never did (the other mirror's rejoined in 10 s; a new consumer of the same
# group was assigned at once). Past this, the consumer is closed and made again.
REJOIN_TIMEOUT_S = 120.0


def dead_letter_topic(target: MirrorTarget) -> str:
    return f"cdc.mirror.{target}.dead-letter"


@dataclass(frozen=True, slots=True)
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class MirrorConsumer:
    def __init__(
        self,
        kafka: KafkaSettings,
        mirror: MirrorSettings,
        target: MirrorTarget,
        instances: Sequence[str],
        router: ChangeRouter,
        applier: ChangeApplier,
        metrics: MirrorMetrics,
        stop: threading.Event,
        clock: Callable[[], float] = time.time,
        config: ConfigWatch | None = None,
        only_instance: str | None = None,
    ) -> None:
        """``config``: the configuration watched for changes (None: fixed); ``instances`` and
        ``router`` must then be those of its current snapshot. ``only_instance``: this
        process reads that instance's topic only."""
        self._kafka = kafka
        self._mirror = mirror
        self._target = target
        self._instance_by_topic = {topic_name(kafka, name): name for name in instances}
        self._router = router
        self._applier = applier
        self._metrics = metrics
        self._stop = stop
        self._clock = clock
        self._config = config
        self._only_instance = only_instance
        self._dead_topic = dead_letter_topic(target)
        self._pending: list[_Record] = []
        # Next offset per (topic, partition) of the batches applied since the last commit the
        # broker confirmed; committed again, waiting, before a hand-over and at the end.
        self._applied_up_to: dict[tuple[str, int], int] = {}
        self._uncommitted = False  # offsets applied since the last commit was sent
        self._last_commit = 0.0  # time.monotonic() of the last commit sent
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._last_warned: dict[int, float] = {}
        self._dead_letter_errors: list[str] = []
        self.batches = 0
        self.assignment: set[tuple[str, int]] = set()  # (topic, partition) owned now
        # The group gave this member its share (maybe none: more members than partitions)
        # since it last subscribed or lost its partitions.
        self.joined = False
        # time.monotonic() when the partitions were lost, until the group assigns again.
        self._lost_since: float | None = None
        self.rejoin_timeout_s = REJOIN_TIMEOUT_S
        self.consumers_made = 0  # Kafka consumers made (more than one: made again, above)

    # -- lifecycle ----------------------------------------------------------------------------
    def _ensure_topics(self) -> bool:
        """Make sure the topics exist; while Kafka does not answer (a broker restarting as
        this mirror starts), wait and retry instead of exiting. False: stopped meanwhile."""

        def ensure() -> None:
            for topic in self._instance_by_topic:
                ensure_topic(self._kafka, topic)
            ensure_topic(self._kafka, self._dead_topic)

        if self._stop.is_set():
            return False
        try:
            self._retry(1.0).call(ensure, stop=self._stop, on_retry=_log_retry(""))
        except RetryCancelled:
            return False
        return True

    def _retry(self, first_delay_s: float) -> RetryPolicy:
        return RetryPolicy(first_delay_s=first_delay_s, max_delay_s=30.0)

    def run(self) -> None:
        """Consume until ``stop`` is set; the pending batch is applied and committed first."""
        if not self._ensure_topics():
            return
        group = f"{self._mirror.group_prefix}.{self._target}"
        self._consumer = self._new_consumer(group)
        producer = producer_config(self._kafka, client_id=f"{group}.dead-letter")
        producer["error_cb"] = self._on_client_error
        self._producer = Producer(producer)
        self._subscribe()
        try:
            while not self._stop.is_set():
                if self._instance_by_topic:
                    self._poll_batch()
                else:
                    self._stop.wait(_IDLE_WAKE_S)  # no table for this target (yet)
                self._flush()
                if not self._pending:  # between batches: the one safe point
                    self._reconfigure()
                    self._rejoin_if_stuck(group)
        finally:
            try:
                self._flush(wait_for_commit=True)
            finally:
                self._consumer.close()
                self._producer.flush(10)

    def _new_consumer(self, group: str) -> Consumer:
        config = consumer_config(self._kafka, group_id=group)
        config["error_cb"] = self._on_client_error
        config["on_commit"] = self._on_commit
        self.consumers_made += 1
        return Consumer(config)

    def _rejoin_if_stuck(self, group: str) -> None:
        """Make the Kafka consumer again when the group has not assigned partitions for
        ``rejoin_timeout_s`` since they were lost (``REJOIN_TIMEOUT_S``). Nothing is pending
        here and the lost partitions cannot be committed any more: the new member reads them
        from the last commit, the version guard makes the repeat harmless."""
        lost_since = self._lost_since
        if lost_since is None or self.joined or not self._instance_by_topic:
            return
        waited = time.monotonic() - lost_since
        if waited < self.rejoin_timeout_s:
            return
        log.warning(
            "mirror → %s: no partitions assigned %.0f s after they were lost; making the Kafka "
            "consumer again",
            self._target,
            waited,
        )
        assert self._consumer is not None
        try:
            self._consumer.close()
        except Exception as exc:  # noqa: BLE001 - a stuck client may fail to close; replaced anyway
            log.warning("mirror → %s: closing the stuck consumer failed (%s)", self._target, exc)
        self._applied_up_to.clear()
        self._uncommitted = False
        self.assignment.clear()
        self._lost_since = time.monotonic()  # a new wait, should this one not join either
        self._consumer = self._new_consumer(group)
        self._subscribe()

    def ready(self) -> Probe:
        """/health/ready: subscribed and given its partitions by the group (or no table
        mirror targets it yet: nothing to do is not a failure)."""
        if self._consumer is None:
            return Probe(False, "starting: the Kafka consumer is not created yet")
        if not self._instance_by_topic:
            return Probe(True, f"no table mirror targets {self._target} yet; waiting for one")
        if not self.joined:
            return Probe(False, "waiting for the consumer group to assign partitions")
        return Probe(True, f"consuming {len(self.assignment)} partitions")

    def _subscribe(self) -> None:
        assert self._consumer is not None
        self.joined = False
        group = f"{self._mirror.group_prefix}.{self._target}"
        if not self._instance_by_topic:
            self._consumer.unsubscribe()
            log.info("mirror → %s: no table mirror targets it; waiting for one", self._target)
            return
        self._consumer.subscribe(
            list(self._instance_by_topic),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        log.info(
            "mirror → %s: consuming %s in group %s",
            self._target,
            ", ".join(self._instance_by_topic),
            group,
        )

    def _reconfigure(self) -> None:
        """Put a new configuration snapshot in force (see the module docstring)."""
        change = self._config.take() if self._config is not None else None
        if change is None:
            return
        fresh = mirror_config(change.new, self._target, self._only_instance)
        diff = diff_snapshots(change.old, change.new, self._target)
        self._router = fresh.router
        self._applier.set_tables(fresh.tables)
        prefix = f"mirror → {self._target}: config version {fresh.version}:"
        for name in diff.added:
            log.info("%s table %s added; mirrored from its next change on", prefix, name)
        for name in diff.removed:
            log.info("%s table %s removed; no longer mirrored (its rows stay)", prefix, name)
        for table in diff.changed:
            log.info("%s table %s changed (%s)", prefix, table.name, ", ".join(table.fields))
        self._metrics.config_version.set(fresh.version)
        topics = {topic_name(self._kafka, name): name for name in fresh.instances}
        if topics != self._instance_by_topic:
            self._instance_by_topic = topics
            if self._ensure_topics():
                self._subscribe()

    def _poll_batch(self) -> None:
        """Fill ``_pending`` (see the module docstring for when a batch is closed)."""
        assert self._consumer is not None
        limit = self._mirror.batch_size
        max_wait_s = self._mirror.max_wait_ms / 1000
        deadline: float | None = None  # max_wait_ms after the batch's first message
        if self._pending:
            deadline = time.monotonic() + max_wait_s
        while len(self._pending) < limit and not self._stop.is_set():
            if deadline is None:
                # Nothing yet: wait for the first message (consume returns when it has
                # num_messages or at the timeout), waking up now and then to see whether the
                # loop was asked to stop and to commit what is due.
                wanted, timeout = 1, _IDLE_WAKE_S
            else:
                wanted = min(limit - len(self._pending), 10_000)
                timeout = max(0.0, deadline - time.monotonic())
            messages = self._consumer.consume(num_messages=wanted, timeout=timeout)
            for message in messages:
                error = message.error()
                if error is not None:
                    self._on_client_error(error)
                    continue
                self._pending.append(
                    _Record(
                        topic=message.topic() or "",
                        partition=message.partition() or 0,
                        offset=message.offset() or 0,
                        key=message.key(),
                        value=message.value(),
                    )
                )
            if deadline is None:
                if not self._pending:
                    return  # idle: let the caller look at the stop flag
                deadline = time.monotonic() + max_wait_s
            elif time.monotonic() >= deadline:
                return

    # -- one batch: route, dead-letter, apply, commit -----------------------------------------
    def _flush(self, wait_for_commit: bool = False) -> None:
        """Apply the pending batch, then commit the offsets of the applied batches.

        In the loop the commit is asynchronous and at most every ``_COMMIT_INTERVAL_S`` (its
        round trip overlaps the next batches instead of being paid by each small batch; what
        is committed was applied, and a commit not made before a crash means a replay, which
        the guard makes harmless). With ``wait_for_commit`` (before partitions are handed
        over, and at the end) it waits for the broker."""
        if self._consumer is None:
            return
        if not self._pending:
            self._commit([], wait=wait_for_commit)  # what is due of earlier batches
            return
        records, self._pending = self._pending, []
        changes: list[RowChange] = []
        execute_times: list[int] = []
        dead: list[tuple[_Record, str]] = []
        rows_per_table: dict[str, int] = {}
        newest: dict[str, int] = {}  # table → executeTime (ms) of its newest change
        skipped = 0
        for record in records:
            if is_control(record.key):
                continue  # a watermark heartbeat or other control message: not a row
            try:
                if record.value is None:
                    raise ContractError("a Kafka record has no value.")
                message = decode_message(record.value)
                instance = self._instance_by_topic.get(record.topic)
                if instance is None:  # a topic left by a configuration change
                    skipped += 1
                    continue
                routed = self._router.route(instance, message)
            except CdcMirrorError as exc:
                dead.append((record, str(exc)))
                continue
            if routed.skipped:
                skipped += 1
                continue
            changes.extend(routed.changes)
            execute_times.append(message.execute_time)
            table = routed.changes[0].table
            rows_per_table[table] = rows_per_table.get(table, 0) + 1
            newest[table] = max(newest.get(table, 0), message.execute_time)
        # Counted once per batch: a labelled counter per message cost as much as routing it.
        self._metrics.skipped.inc(skipped)
        for table, count in rows_per_table.items():
            self._metrics.rows.labels(self._target, table).inc(count)
        if dead and not self._write_dead_letters(dead):
            return
        if changes and not self._apply(changes):
            # Stopping while the target is down: nothing is committed, the batch is read again.
            return
        self._observe_applied(execute_times, newest)
        self._commit(records, wait=wait_for_commit)
        self.batches += 1

    def _observe_applied(self, execute_times: list[int], newest: dict[str, int]) -> None:
        """Freshness of the applied batch, and each table's newest change applied (the web
        admin's status page shows its age)."""
        now = self._clock()
        for execute_time_ms in execute_times:
            self._metrics.freshness.observe(max(0.0, now - execute_time_ms / 1000))
        for table, execute_time_ms in newest.items():
            self._metrics.last_applied.labels(self._target, table).set(execute_time_ms / 1000)

    def _apply(self, changes: list[RowChange]) -> bool:
        """Apply the batch, retried while the target is unavailable. False: stopped."""

        def failed(exc: RetriableError, delay_s: float) -> None:
            self._metrics.apply_errors.inc()
            _log_retry(f"mirror → {self._target}: ")(exc, delay_s)

        def apply() -> ApplyResult:
            started = time.monotonic()
            result = self._applier.apply_batch(changes)
            self._metrics.apply_seconds.observe(time.monotonic() - started)
            return result

        try:
            result = self._retry(0.5).call(apply, stop=self._stop, on_retry=failed)
        except RetryCancelled:
            return False
        self._metrics.applied.inc(result.applied)
        self._metrics.stale.inc(result.stale)
        self._metrics.superseded.inc(result.superseded)
        for table in self._applier.stopped:  # the alert CdcMirrorTableStopped
            self._metrics.table_stopped.labels(self._target, table).set(1)
        return True

    def _commit(self, records: list[_Record], wait: bool) -> None:
        assert self._consumer is not None
        for record in records:
            key = (record.topic, record.partition)
            self._applied_up_to[key] = max(self._applied_up_to.get(key, 0), record.offset + 1)
            self._uncommitted = True
        now = time.monotonic()
        if not self._applied_up_to or not (wait or self._uncommitted):
            return
        if not wait and now - self._last_commit < _COMMIT_INTERVAL_S:
            return
        self._last_commit, self._uncommitted = now, False
        partitions = [TopicPartition(t, p, o) for (t, p), o in self._applied_up_to.items()]
        try:
            with kafka_errors("committing offsets"):
                if wait:
                    self._consumer.commit(offsets=partitions, asynchronous=False)
                else:
                    self._consumer.commit(offsets=partitions, asynchronous=True)
        except CdcMirrorError as exc:
            self._on_commit_error(exc)
            return
        if wait:
            self._applied_up_to.clear()
            for partition in partitions:
                self._update_lag(partition)

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The outcome of an asynchronous commit (served by the client during consume)."""
        if error is not None:
            self._on_commit_error(map_kafka_error(error, "committing offsets"))
            return
        for partition in partitions:
            if partition.error is None:
                self._update_lag(partition)

    def _on_commit_error(self, error: CdcMirrorError) -> None:
        if isinstance(error, RebalanceError):
            # The partitions moved on; their new owner re-reads from the last commit and
            # the version guard makes the repeat harmless.
            log.info("mirror → %s: commit skipped during a rebalance", self._target)
            return
        # Applied already, so nothing is lost: the next commit covers these offsets (sent
        # again even if no batch follows), and a restart before it replays them as no-ops.
        self._uncommitted = True
        log.warning("mirror → %s: committing Kafka offsets failed (%s)", self._target, error)

    def _update_lag(self, partition: TopicPartition) -> None:
        assert self._consumer is not None
        try:
            high = high_watermark(self._consumer, partition.topic, partition.partition, cached=True)
        except CdcMirrorError:
            return  # the lag is only a metric: left as it was
        if high >= 0:
            self._metrics.lag.labels(self._target, partition.topic, str(partition.partition)).set(
                max(0, high - partition.offset)
            )

    # -- dead letters -------------------------------------------------------------------------
    def _write_dead_letters(self, dead: list[tuple[_Record, str]]) -> bool:
        """Durably in the dead-letter topic before the batch is committed; retried while Kafka
        refuses (a retry may repeat a dead letter, never lose one). False if stopped."""
        assert self._producer is not None
        for record, error in dead:
            self._metrics.dead_letters.inc()
            log.warning(
                "mirror → %s: %s:%d@%d to the dead-letter topic: %s",
                self._target,
                record.topic,
                record.partition,
                record.offset,
                error,
            )

        def write() -> None:
            assert self._producer is not None
            for record, error in dead:
                self._produce_dead_letter(record, error)
            remaining = self._producer.flush(60)
            errors, self._dead_letter_errors = self._dead_letter_errors, []
            if remaining or errors:
                reason = errors[0] if errors else f"{remaining} undelivered"
                raise ServiceUnavailableError(f"writing to {self._dead_topic} failed ({reason}).")

        try:
            self._retry(0.5).call(
                write, stop=self._stop, on_retry=_log_retry(f"mirror → {self._target}: ")
            )
        except RetryCancelled:
            return False
        return True

    def _produce_dead_letter(self, record: _Record, error: str) -> None:
        assert self._producer is not None
        document = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "error": error,
            "key": record.key.decode("utf-8", "replace") if record.key else None,
            "value": base64.b64encode(record.value).decode() if record.value else None,
        }
        while True:
            try:
                self._producer.produce(
                    self._dead_topic,
                    key=record.key,
                    value=orjson.dumps(document),
                    on_delivery=self._on_dead_letter_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.1)

    def _on_dead_letter_delivery(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            self._dead_letter_errors.append(error.str())

    # -- rebalance and client errors ----------------------------------------------------------
    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignment |= {(p.topic, p.partition) for p in partitions}
        self.joined = True
        self._lost_since = None
        log.info("mirror → %s: %d partitions assigned", self._target, len(partitions))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info(
            "mirror → %s: %d partitions revoked; committing first", self._target, len(partitions)
        )
        self._flush(wait_for_commit=True)
        revoked = {(p.topic, p.partition) for p in partitions}
        for key in revoked:
            # Not ours any more, committed or not: never commit them again from here.
            self._applied_up_to.pop(key, None)
        self.assignment -= revoked

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        # They cannot be committed any more; their new owner reads them again from the last
        # commit, so they are not lost, only not ours.
        self._pending = [r for r in self._pending if (r.topic, r.partition) not in lost]
        for key in lost:
            self._applied_up_to.pop(key, None)
        self.assignment -= lost
        self.joined = False
        self._lost_since = time.monotonic()
        log.warning("mirror → %s: %d partitions lost", self._target, len(partitions))

    def _on_client_error(self, error: KafkaError) -> None:
        now = time.monotonic()
        if now - self._last_warned.get(error.code(), -1e9) >= 30:
            self._last_warned[error.code()] = now
            log.warning("Kafka: %s (retrying; repeats are muted for 30 s)", error.str())


def _log_retry(prefix: str) -> Callable[[RetriableError, float], None]:
    def log_it(exc: RetriableError, delay_s: float) -> None:
        log.warning("%s%s Retrying in %.1f s.", prefix, exc, delay_s)

    return log_it
