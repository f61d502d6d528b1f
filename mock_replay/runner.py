"""A replay run: planned and validated up front, then read chunk by chunk and published.

``prepare_run`` does everything that can refuse the run — unknown instance, no matching table,
a table without a usable key, a condition outside the grammar, a column a shard lacks — before
a single row is read, so a refused run publishes nothing. ``ReplayWorker`` then reads its
tables in key order, one chunk per Kafka transaction (rows + progress), honouring the rate
limit, the load guard and cancellation; a read-ahead thread reads the next chunk while the
current one is published. ``start_run``/``load_for_resume`` record or reload a run and
``execute_run`` ties the workers to Kafka and, with ``replay.workers`` > 1, deals the tables
out to reader processes.
"""

from __future__ import annotations

import datetime as dt
import logging
import multiprocessing
import queue
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, InstanceLogin, snapshot_from_settings
from cdc_platform.governance_model import DetectionRecord
from cdc_platform.load_guard import LoadGuard
from governance.policy import Governance
from governance.source import GovernanceRuntime, start_governance
from mock_replay.condition import Condition, compile_condition
from mock_replay.errors import ReplayCancelled, ReplayError
from mock_replay.plan import (
    BATCH_SEPARATOR,
    RowEncoder,
    TableShape,
    TokenBucket,
    batch_is_whole,
    chunk_query,
    decode_key,
    execute_day,
    execute_time_ms,
    json_batch_query,
    json_chunk_query,
)
from mock_replay.progress import (
    RunSpec,
    RunState,
    RunStateName,
    TableProgress,
    cancel_key,
    now_ms,
)
from mock_replay.publish import (
    CancelWatch,
    ChunkPublisher,
    KafkaChunkPublisher,
    KafkaProgressStore,
    ProgressStore,
    fence,
)
from mock_replay.source import MySQLSource
from simple_binlog.errors import CdcMirrorError
from simple_binlog.offsets import mock_offset
from simple_binlog.routing import ShardRouter, partition_key
from simple_binlog.values import JsonScalar

log = logging.getLogger(__name__)

ProgressCallback = Callable[[TableProgress], None]


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """What a user asks for; ``None`` fields take the ``replay:`` settings."""

    instance: str
    db_prefix: str
    table_prefix: str
    condition: str | None = None
    execute_day: str | None = None  # YYYY-MM-DD; default yesterday (UTC)
    batch_size: int | None = None
    rate_limit: float | None = None
    replica: str | None = None
    workers: int | None = None


@dataclass(frozen=True, slots=True)
class PreparedRun:
    spec: RunSpec
    shapes: dict[str, TableShape]  # by "schema.table"
    conditions: dict[str, Condition | None]
    rate_limit: float
    login: InstanceLogin  # the instance's connection, from the configuration at start


def new_run_id(now: dt.datetime) -> str:
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def _compile_all(
    settings: Settings, spec: RunSpec, shapes: Mapping[str, TableShape]
) -> dict[str, Condition | None]:
    if spec.condition is None or not spec.condition.strip():
        return dict.fromkeys(shapes)
    query_start = dt.datetime.fromtimestamp(spec.query_start, dt.UTC)
    conditions: dict[str, Condition | None] = {}
    for name, shape in shapes.items():
        try:
            conditions[name] = compile_condition(
                spec.condition, shape.column_types, query_start, settings.replay.max_condition_chars
            )
        except ReplayError as exc:
            if len(shapes) > 1 and "is not a column" in str(exc):
                # Shards may differ; say which one lacks the column.
                raise type(exc)(f"{str(exc).removesuffix('.')}; the table is {name}.") from None
            raise
    return conditions


def _refuse_keyless(shapes: Mapping[str, TableShape]) -> None:
    keyless = [name for name, shape in shapes.items() if not shape.key]
    if keyless:
        more = f" (and {len(keyless) - 1} more)" if len(keyless) > 1 else ""
        raise ReplayError(
            f"table {keyless[0]}{more} has neither a primary key nor a unique key on NOT NULL "
            "columns, so it cannot be replayed exactly; add one or leave it out."
        )


def prepare_run(
    settings: Settings,
    request: ReplayRequest,
    source: MySQLSource,
    now: dt.datetime,
    run_id: str | None = None,
    config: ConfigSnapshot | None = None,
) -> PreparedRun:
    """Find and check every table and the condition; refuse the run before reading a row.
    ``config``: the instances (connection, shard rules) as read from the configuration store
    at start (default: those of ``settings``)."""
    config = config or snapshot_from_settings(settings)
    instance = config.instance(request.instance)  # ConfigError naming the known instances
    if not request.db_prefix or not request.table_prefix:
        raise ReplayError("a replay needs both a database prefix and a table prefix.")
    day = execute_day(request.execute_day, now)
    if request.replica:
        source.replica_lag()  # refuses a server that is not a replica, before anything else
    router = ShardRouter(list(instance.shard_rules))
    found = source.discover(router, request.db_prefix, request.table_prefix)
    if not found:
        raise ReplayError(
            f"no table of {source.where} belongs to {request.db_prefix}*.{request.table_prefix}* "
            "(by the configured shard rules)."
        )
    shapes = {shape.name: shape for shape in found}
    _refuse_keyless(shapes)
    replay = settings.replay
    spec = RunSpec(
        run_id=run_id or new_run_id(now),
        instance=request.instance,
        db_prefix=request.db_prefix,
        table_prefix=request.table_prefix,
        condition=request.condition if request.condition and request.condition.strip() else None,
        execute_day=day.isoformat(),
        query_start=int(now.timestamp()),
        batch_size=request.batch_size or replay.batch_size,
        workers=min(request.workers or replay.workers, len(shapes)),
        tables=tuple(shapes),
        replica=request.replica,
        created_ms=now_ms(),
    )
    if spec.batch_size < 1:
        raise ReplayError("the batch size must be at least 1.")
    rate = replay.rate_limit if request.rate_limit is None else request.rate_limit
    if rate < 0:
        raise ReplayError("the rate limit must be 0 (none) or a positive number of rows/s.")
    return PreparedRun(spec, shapes, _compile_all(settings, spec, shapes), rate, instance.login())


def reload_run(
    settings: Settings, spec: RunSpec, source: MySQLSource, rate: float, login: InstanceLogin
) -> PreparedRun:
    """A recorded run, its tables read again (a table dropped since is an error)."""
    shapes = {}
    for name in spec.tables:
        schema, _, table = name.partition(".")
        shapes[name] = source.shape(schema, table)
    _refuse_keyless(shapes)
    return PreparedRun(spec, shapes, _compile_all(settings, spec, shapes), rate, login)


class Cancellation:
    """Set by ``cancel()`` in this process, or by a cancel record from another one."""

    def __init__(self, watch: CancelWatch | None = None) -> None:
        self._event = threading.Event()
        self._watch = watch

    def cancel(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        if not self._event.is_set() and self._watch is not None and self._watch.poll():
            self._event.set()
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as the run is cancelled."""
        deadline = time.monotonic() + seconds
        while not self.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._event.wait(min(remaining, 0.5))
        return True

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()


class ReplayWorker:
    """Reads its share of a run's tables and publishes them chunk by chunk."""

    def __init__(
        self,
        settings: Settings,
        prepared: PreparedRun,
        worker: int,
        source: MySQLSource,
        publisher: ChunkPublisher,
        cancellation: Cancellation,
        on_progress: ProgressCallback | None = None,
        governance: GovernanceRuntime | None = None,
    ) -> None:
        self._settings = settings
        self._prepared = prepared
        # Detection and column policies: with a policy set in force, each chunk's rows are
        # parsed and rewritten here (the server still builds their JSON), in the read-ahead
        # thread, which alone applies the set and drains its detections.
        self._governance = governance
        self._worker = worker
        self._source = source
        self._publisher = publisher
        self._cancel = cancellation
        self._on_progress = on_progress or (lambda _progress: None)
        spec = prepared.spec
        replay = settings.replay
        share = prepared.rate_limit / spec.workers if prepared.rate_limit else 0.0
        self._bucket = TokenBucket(share, burst=max(share, spec.batch_size))
        self._guard = LoadGuard(
            source,
            replay.max_threads_running,
            replay.max_replica_lag_s,
            replay.pause_poll_s,
            cancellation.wait,
            time.monotonic,
        )
        self._offset = mock_offset(spec.query_start)
        self._execute_time = execute_time_ms(dt.date.fromisoformat(spec.execute_day))

    def run(self, existing: Mapping[str, TableProgress]) -> list[TableProgress]:
        """Replay every table of this worker; returns their final progress. Raises
        ReplayCancelled if cancelled (what was committed stays committed)."""
        spec = self._prepared.spec
        if spec.replica:
            self._source.replica_lag()  # refuses a server that is not a replica, up front
        finished = []
        for name in spec.worker_tables(self._worker):
            shape = self._prepared.shapes[name]
            progress = existing.get(name) or TableProgress(
                run_id=spec.run_id,
                table=name,
                key_columns=shape.key,
                estimated_rows=shape.estimated_rows,
            )
            if progress.key_columns != shape.key:
                raise ReplayError(
                    f"the key of {name} changed since the run started ("
                    f"{', '.join(progress.key_columns)} → {', '.join(shape.key)}); start a new run."
                )
            if progress.state != "done":
                progress = self._table(
                    shape, replace(progress, estimated_rows=shape.estimated_rows)
                )
            finished.append(progress)
        return finished

    def _read(  # noqa: PLR0911
        self,
        shape: TableShape,
        condition: Condition | None,
        after: tuple[Any, ...] | None,
        encoder: RowEncoder,
        reading: str,
    ) -> tuple[list[bytes], tuple[JsonScalar, ...] | None]:
        """The next chunk's messages and its last key (None: empty, or a cut batch)."""
        if self._governance is not None:
            policies = self._governance.at_boundary()
            if policies is not None:
                return self._read_governed(shape, condition, after, encoder, reading, policies)
        limit = self._prepared.spec.batch_size
        if reading == "batch":
            query = json_batch_query(shape, condition, after, limit)
            assert query is not None
            ((count, length, joined),) = self._source.read_chunk(*query, shape.name)
            if not batch_is_whole(count, length, joined):
                return [], None
            if not count:
                return [], ()
            last = joined[joined.rfind(BATCH_SEPARATOR) + 1 :]
            return encoder.encode_batch(joined), encoder.key_of(orjson.loads(last))
        if reading == "rows":
            query = json_chunk_query(shape, condition, after, limit)
            assert query is not None
            rows = self._source.read_chunk(*query, shape.name)
            if not rows:
                return [], ()
            unwritable = next((row for row in rows if row[0] is None), None)
            if unwritable is not None:
                raise ReplayError(
                    f"the server could not write a row of {shape.name} after key "
                    f"{after} as JSON (a text value invalid in its character set, or a value "
                    "over max_allowed_packet); nothing of this chunk was published."
                )
            values = [encoder.encode_json_text(row[0]) for row in rows]
            return values, encoder.key_of(orjson.loads(rows[-1][0]))
        rows = self._source.read_chunk(*chunk_query(shape, condition, after, limit), shape.name)
        if not rows:
            return [], ()
        contents = [encoder.content(row) for row in rows]
        return [encoder.encode(content) for content in contents], encoder.key_of(contents[-1])

    def _read_governed(
        self,
        shape: TableShape,
        condition: Condition | None,
        after: tuple[Any, ...] | None,
        encoder: RowEncoder,
        reading: str,
        policies: Governance,
    ) -> tuple[list[bytes], tuple[JsonScalar, ...] | None]:
        """``_read`` through the policy set: each row's content parsed, its message rewritten
        (detections go to the set's batch, drained by ``_chunks``)."""
        limit = self._prepared.spec.batch_size
        contents: list[dict[str, JsonScalar]]
        if reading == "batch":
            query = json_batch_query(shape, condition, after, limit)
            assert query is not None
            ((count, length, joined),) = self._source.read_chunk(*query, shape.name)
            if not batch_is_whole(count, length, joined):
                return [], None
            contents = [orjson.loads(p) for p in joined.split(BATCH_SEPARATOR)] if count else []
        elif reading == "rows":
            query = json_chunk_query(shape, condition, after, limit)
            assert query is not None
            rows = self._source.read_chunk(*query, shape.name)
            contents = [orjson.loads(row[0]) for row in rows]
        else:
            rows = self._source.read_chunk(*chunk_query(shape, condition, after, limit), shape.name)
            contents = [encoder.content(row) for row in rows]
        if not contents:
            return [], ()
        # Every row of a chunk shares all but its content (MOCK rows carry one offset), so one
        # template message stands for all of them.
        template = encoder.message_for({})
        values = []
        for content in contents:
            governed, _, column_types = policies.govern(template, content)
            if column_types is template.column_types:
                values.append(encoder.encode(governed))  # the encoder's prefix still fits
            else:
                values.append(
                    replace(template, content=governed, column_types=column_types).encode()
                )
        return values, encoder.key_of(contents[-1])

    def _chunks(
        self, shape: TableShape, after: tuple[Any, ...] | None, encoder: RowEncoder
    ) -> Iterator[Chunk | None]:
        """The table's chunks in key order from ``after`` on, the last one short or empty;
        None (and the end) when the run is cancelled. Runs ahead of publishing, in the
        read-ahead thread: it alone uses the MySQL connection."""
        condition = self._prepared.conditions[shape.name]
        limit = self._prepared.spec.batch_size
        # Server-built JSON in one batch row, server-built JSON per row, or columns encoded
        # here.
        reading = "python"
        if self._settings.replay.server_json and json_chunk_query(shape, None, None, 1):
            reading = "batch"
        while True:
            if self._cancel.is_set() or not self._guard.wait_until_calm():
                yield None
                return
            values, last_key = self._read(shape, condition, after, encoder, reading)
            if last_key is None:
                # The batch did not fit the server's limits: this chunk and the rest of the
                # table row by row.
                log.info("%s: a batch was cut by the server; reading it row by row", shape.name)
                reading = "rows"
                continue
            batch = self._governance.batch if self._governance is not None else None
            detections = tuple(batch.drain()) if batch is not None and len(batch) else ()
            yield Chunk(values, last_key, detections)
            if len(values) < limit:
                return
            # The next chunk's lower bound, bound as the Python values its columns hold.
            after = decode_key(shape, last_key)

    def _table(self, shape: TableShape, progress: TableProgress) -> TableProgress:
        spec = self._prepared.spec
        encoder = RowEncoder(shape, self._offset, self._execute_time)
        key = partition_key(shape.schema, shape.table)
        after = decode_key(shape, progress.last_key) if progress.last_key is not None else None
        self._on_progress(progress)
        # Reading the next chunk overlaps publishing this one: the server builds rows while
        # this thread produces and commits.
        with ReadAhead(self._chunks(shape, after, encoder)) as chunks:
            for chunk in chunks:
                if chunk is None or self._cancel.is_set():
                    self._publisher.publish(key, [], progress.finished("cancelled"))
                    raise ReplayCancelled(f"replay run {spec.run_id} was cancelled.")
                if not chunk.values:
                    break
                progress = progress.advanced(chunk.last_key, len(chunk.values))
                if len(chunk.values) < spec.batch_size:
                    # A short chunk is the last one: "done" commits with its rows.
                    progress = progress.finished("done")
                self._publisher.publish(key, chunk.values, progress, chunk.detections)
                self._on_progress(progress)
                delay = self._bucket.take(len(chunk.values))
                if delay > 0:
                    self._cancel.wait(delay)  # the next round's check sees a cancellation
        if progress.state != "done":
            progress = progress.finished("done")
            self._publisher.publish(key, [], progress)
            self._on_progress(progress)
        return progress


@dataclass(frozen=True, slots=True)
class Chunk:
    values: list[bytes]  # the encoded messages, in key order
    last_key: tuple[JsonScalar, ...]  # wire form; () for an empty chunk
    detections: tuple[DetectionRecord, ...] = ()  # governance detections of these rows


class ReadAhead:
    """Runs an iterator in a thread, one item ahead of its consumer; its exceptions are
    raised to the consumer. Leaving the ``with`` block stops it."""

    _END = object()

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay-read-ahead", daemon=True)

    def _run(self) -> None:
        try:
            for item in self._items:
                if not self._put(item):
                    return
            self._put(self._END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(_Failure(exc))
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def __enter__(self) -> Iterator[Any]:
        self._thread.start()
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True, slots=True)
class _Failure:
    error: BaseException


# -- wiring to Kafka ----------------------------------------------------------------------


def _worker_process(
    settings: Settings,
    prepared: PreparedRun,
    worker: int,
    existing: dict[str, TableProgress],
    events: Any,
    cancel_flag: Any,
) -> None:
    """Entry point of a reader process: reports progress and its end through ``events``."""
    # Ctrl-C reaches the whole process group; the parent turns it into a clean cancellation.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    cancellation = _FlagCancellation(cancel_flag)
    try:
        _run_worker(settings, prepared, worker, existing, cancellation, events.put)
        events.put(("end", worker, None))
    except ReplayCancelled:
        events.put(("cancelled", worker, None))
    except CdcMirrorError as exc:
        events.put(("error", worker, str(exc)))


class _FlagCancellation(Cancellation):
    """A cancellation driven by a multiprocessing event shared with the parent, and by the
    parent's death: a reader whose parent was killed stops instead of publishing on alone
    (a resume fences it anyway, but need not race it)."""

    def __init__(self, flag: Any) -> None:
        super().__init__()
        self._flag = flag
        self._parent = multiprocessing.parent_process()

    def is_set(self) -> bool:
        parent_gone = self._parent is not None and not self._parent.is_alive()
        if self._flag.is_set() or parent_gone:
            self.cancel()
        return super().is_set()


def _run_worker(
    settings: Settings,
    prepared: PreparedRun,
    worker: int,
    existing: Mapping[str, TableProgress],
    cancellation: Cancellation,
    on_progress: ProgressCallback,
) -> list[TableProgress]:
    spec = prepared.spec
    # The policy set before anything is read: without it nothing may be published.
    governance = start_governance(settings, spec.instance)
    source = MySQLSource(prepared.login, spec.replica)
    publisher = KafkaChunkPublisher(settings.kafka, spec.instance, spec.run_id, worker)
    try:
        publisher.start()
        return ReplayWorker(
            settings,
            prepared,
            worker,
            source,
            publisher,
            cancellation,
            on_progress,
            governance=governance,
        ).run(existing)
    finally:
        publisher.close()
        source.close()
        if governance is not None:
            governance.close()


@dataclass
class RunOutcome:
    run_id: str
    state: str
    tables: list[TableProgress]
    rows: int
    seconds: float


def start_run(
    settings: Settings,
    request: ReplayRequest,
    store: KafkaProgressStore,
    now: dt.datetime | None = None,
    config: ConfigSnapshot | None = None,
    run_id: str | None = None,
) -> PreparedRun:
    """Plan and record a new run (nothing is published if it is refused); ``config``: see
    ``prepare_run``; ``run_id``: the id the caller gave the run already (the web admin's
    replay job), else a new one."""
    now = now or dt.datetime.now(dt.UTC)
    config = config or snapshot_from_settings(settings)
    login = config.instance(request.instance).login()
    source = MySQLSource(login, request.replica)
    try:
        prepared = prepare_run(settings, request, source, now, run_id=run_id, config=config)
    finally:
        source.close()
    store.ensure_topics()
    store.write(prepared.spec.key, prepared.spec.to_json())
    return prepared


def load_for_resume(
    settings: Settings,
    instance: str,
    run_id: str,
    store: KafkaProgressStore,
    rate: float | None,
    config: ConfigSnapshot | None = None,
) -> tuple[PreparedRun, dict[str, TableProgress]]:
    """A recorded run to go on with, and its tables' progress; ``config``: see
    ``prepare_run``."""
    login = (config or snapshot_from_settings(settings)).instance(instance).login()
    # A killed run left a transaction open; fence it first, or the committed read below
    # would wait for the broker to time it out.
    recorded = store.spec(run_id)
    fence(settings.kafka, instance, run_id, recorded.workers)
    status = store.run(run_id)
    spec = status.spec
    if status.state_name == "done":
        raise ReplayError(f"replay run {run_id} is already done; start a new run instead.")
    source = MySQLSource(login, spec.replica)
    try:
        prepared = reload_run(
            settings, spec, source, settings.replay.rate_limit if rate is None else rate, login
        )
    finally:
        source.close()
    return prepared, dict(status.tables)


def execute_run(
    settings: Settings,
    prepared: PreparedRun,
    existing: Mapping[str, TableProgress],
    store: ProgressStore,
    cancellation: Cancellation,
    on_progress: ProgressCallback | None = None,
) -> RunOutcome:
    """Run every worker of a prepared run to its end and record the run's final state."""
    spec = prepared.spec
    report = on_progress or (lambda _progress: None)
    started = time.monotonic()
    done_before = sum(p.rows_done for p in existing.values())
    running = RunState(spec.run_id, "running", now_ms())
    store.write(running.key, running.to_json())
    final: dict[str, TableProgress] = dict(existing)

    def track(progress: TableProgress) -> None:
        final[progress.table] = progress
        report(progress)

    state: RunStateName = "failed"
    error: str | None = "the replay stopped unexpectedly; resume it to go on"
    try:
        if spec.workers == 1:
            _run_worker(settings, prepared, 0, existing, cancellation, track)
        else:
            _run_processes(settings, prepared, dict(existing), cancellation, track)
        state, error = "done", None
    except ReplayCancelled:
        state, error = "cancelled", None
    except CdcMirrorError as exc:
        error = str(exc)
        raise
    finally:
        record = RunState(spec.run_id, state, now_ms(), error)
        try:
            store.write(record.key, record.to_json())
        except CdcMirrorError as exc:
            log.warning("could not record the end of run %s: %s", spec.run_id, exc)
    rows = sum(p.rows_done for p in final.values()) - done_before
    return RunOutcome(spec.run_id, state, list(final.values()), rows, time.monotonic() - started)


def _run_processes(  # noqa: PLR0912
    settings: Settings,
    prepared: PreparedRun,
    existing: dict[str, TableProgress],
    cancellation: Cancellation,
    track: ProgressCallback,
) -> None:
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    flag = context.Event()
    processes = [
        context.Process(
            target=_worker_process,
            args=(settings, prepared, worker, existing, events, flag),
            name=f"replay-worker-{worker}",
            daemon=True,
        )
        for worker in range(prepared.spec.workers)
    ]
    for process in processes:
        process.start()
    running = set(range(len(processes)))
    errors: list[str] = []
    cancelled = False
    try:
        while running:
            if cancellation.is_set():
                flag.set()
            try:
                event = events.get(timeout=0.5)
            except queue.Empty:
                for worker in list(running):
                    if not processes[worker].is_alive():
                        running.discard(worker)
                        errors.append(f"reader process {worker} ended unexpectedly")
                continue
            if isinstance(event, TableProgress):
                track(event)
                continue
            kind, worker, message = event
            running.discard(worker)
            if kind == "error":
                errors.append(message)
                flag.set()  # the others stop too: the run is resumable as a whole
            elif kind == "cancelled":
                cancelled = True
    finally:
        for process in processes:
            process.join(30)
    if errors:
        raise ReplayError(errors[0])
    if cancelled or cancellation.is_set():
        raise ReplayCancelled(f"replay run {prepared.spec.run_id} was cancelled.")


def request_cancel(store: ProgressStore, run_id: str) -> None:
    store.write(cancel_key(run_id), {"runId": run_id, "requestedMs": now_ms()})
