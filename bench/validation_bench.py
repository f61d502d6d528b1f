"""Validation (issue 25, item 7): a table validated against the warehouse and against Redis
(and, asked for with ``--only``, against Kudu and the lake's current state) when nothing
differs, against a plain full-table SELECT compared in Python, in the same run.

    .venv/bin/python -m bench.validation_bench [--rows 10000000]
                                               [--only warehouse|redis|kudu|lake …]
                                               [--chunk-rows 10000] [--chunk-time 0.5]
                                               [--repeat 3] [--keep | --reuse | --drop]
                                               [--name vbench] [--redis-db N]

Workload: one MariaDB table ``<name>_00.orders_00`` (``--name``, default ``vbench``) of ``--rows`` rows (BIGINT UNSIGNED key,
DECIMAL, VARCHAR, INT, DATETIME(3), DOUBLE), written with the sequence engine, and the same
rows applied to the warehouse and to Redis by the mirror's own appliers (``mirror.app.
build_applier``), so both targets equal MySQL. Nothing is written while it is measured.

- **Ours**: ``validation.run.validate_table`` for the target: MySQL and PostgreSQL hash
  chunks in SQL, Redis is read with pipelined MGETs and hashed here. No collector runs
  here, so the watermark is one that never waits (nothing is in flight; the production
  ``PositionWatermark`` adds a few Kafka round trips per window of chunks).
- **Baseline**: the plain way in Python on the same machine: ``SELECT *`` of the whole table
  from MySQL (unbuffered, key order) and, for the warehouse, ``SELECT *`` of the whole table
  ordered by the key through a server-side cursor, merge-compared row by row; for Redis,
  the documents of each MySQL batch's keys read with a pipelined MGET and compared with the
  row's wire values, then a SCAN counting the keys (an extra key would show there).
- **Source load**: the queries each side sent to MySQL and the rows and index entries its
  own session read (``SHOW SESSION STATUS LIKE 'Handler_read%'``).

Kudu and the lake (``--only kudu --only lake``; Kudu's master and tablet server are
started, the lake is an Iceberg catalog on local disk in a temporary folder):

- **Kudu** gets the same rows through the Kudu mirror's applier. Ours lists its live keys once
  and hashes each chunk from a range scan in Python (``validation.kudu``); the baseline scans
  the whole table once (every column) into a dict by key and compares each MySQL row's wire
  values with it.
- **The lake**: the rows are written to the table's snapshot (merge's types,
  ``merge.types.snapshot_value``) and tagged as a merged day, with no raw change since, so the
  lake's current state is that snapshot. Ours hashes it in Spark (``validation.lake``); the
  baseline reads it through Spark in key order (``toLocalIterator``) and merge-compares it with
  MySQL's rows in Python, as for the warehouse.

Each side runs ``--repeat`` times, ours and the baseline taking turns, and each figure is
the median of its runs: on a shared machine one run of either can fall on a busy moment.

Figures: ``validation.warehouse``, ``validation.redis`` (and ``validation.kudu``,
``validation.lake``) in rows/s, ratio vs the baseline (the issue's goal: ≥ 5×), with the median seconds, every run's seconds, the seconds each side spent hashing the
chunks (MySQL's and the target's, at the same time: the larger is the run's critical path,
the rest of the run is set-up, waiting and the last chunk) and the source load as
extras. ``--keep`` keeps
the data for another run (``--reuse`` then skips writing it; ``--drop`` only drops it).

Names: runs under one ``--name`` use the same MySQL database, warehouse schema, Redis key
prefix (and Kudu table prefix and lake databases), so they take turns (``run_lock``, a MariaDB
named lock per name); runs under different names go on at the same time. ``--redis-db`` puts
the run's Redis keys in a logical database of their own: validation lists a table's keys with
SCAN, which walks the whole database, so a 10M-key run beside a 1M-key one would slow the
other's Redis figures (and the reverse). ``--keep``/``--reuse``/``--drop`` need the same
``--name`` and ``--redis-db``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import pymysql
import pymysql.cursors
import redis
from psycopg import sql
from pydantic import SecretStr

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, TableMirror, load_settings
from mirror.app import build_applier
from mirror.plan import RowChange
from simple_binlog.naming import redis_key
from simple_binlog.values import encode, parse_column_type
from stack.manager import LocalStack
from validation.progress import MemoryProgress
from validation.run import Options, validate_table

DEFAULT_NAME, SHARD = "vbench", "orders_00"
TYPES = {
    "id": "bigint(20) unsigned",
    "amount": "decimal(12,2)",
    "note": "varchar(64)",
    "status": "int(11)",
    "created": "datetime(3)",
    "ratio": "double",
}
DDL = """CREATE TABLE {db}.{shard} (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  amount DECIMAL(12,2) NOT NULL,
  note VARCHAR(64) NULL,
  status INT NOT NULL,
  created DATETIME(3) NOT NULL,
  ratio DOUBLE NULL
)"""
FILL = """INSERT INTO {db}.{shard}
SELECT seq, (seq % 100000) / 100, IF(seq % 7 = 0, NULL, CONCAT('note-', seq % 1000)), seq % 5,
       '2026-01-01 00:00:00.000' + INTERVAL seq SECOND, IF(seq % 11 = 0, NULL, seq / 7)
FROM {db}.seq_{lo}_to_{hi}"""
RUN_LOCK = "cdc-mirror.validation_bench"
# Letters and digits only: the name is a MySQL database prefix (``<name>_00``, which the shard
# rules must read back as ``<name>``), a PostgreSQL schema and a Redis key prefix.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]{0,29}")


@dataclass(frozen=True)
class Names:
    """Where one run's data lives, so runs under different names never touch each other's:
    the MySQL database, the warehouse schema, the Redis key prefix (and Redis logical database
    when ``redis_db`` is set: validation's key listing SCANs a whole Redis database, so a big
    run's keys beside another run's would slow and distort its Redis figures), Kudu's table
    prefix, the lake's databases and the run lock. The default name is the one every run used
    before names existed (same data, same lock)."""

    name: str = DEFAULT_NAME
    redis_db: int | None = None

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name):
            raise ValueError(
                f"--name {self.name!r}: use 1-30 lowercase letters and digits, starting "
                "with a letter"
            )
        if self.redis_db is not None and not 0 <= self.redis_db <= 15:
            raise ValueError(f"--redis-db {self.redis_db}: Redis has databases 0-15")

    @property
    def database(self) -> str:
        return f"{self.name}_00"

    @property
    def table(self) -> str:
        """The source table, ``database.shard``."""
        return f"{self.database}.{SHARD}"

    @property
    def lock(self) -> str:
        return RUN_LOCK if self.name == DEFAULT_NAME else f"{RUN_LOCK}.{self.name}"


def with_redis_db(url: str, db: int) -> str:
    """``url`` with its logical database (the path) set to ``db``; the rest kept."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def names_of(settings: Settings) -> Names:
    """The run's names, from its scoped settings (the table's database prefix is the name)."""
    return Names(settings.tables[0].db_prefix)


def scoped(settings: Settings, names: Names = Names()) -> Settings:
    redis_update: dict[str, Any] = {"key_prefix": names.name}
    if names.redis_db is not None:
        redis_update["url"] = SecretStr(
            with_redis_db(settings.redis.url.get_secret_value(), names.redis_db)
        )
    return settings.model_copy(
        update={
            "tables": [
                TableMirror(
                    db_prefix=names.name,
                    table_prefix="orders",
                    targets=["hive", "warehouse", "redis", "kudu"],
                )
            ],
            "redis": settings.redis.model_copy(update=redis_update),
            "kudu": settings.kudu.model_copy(update={"table_prefix": f"{names.name}."}),
            "mirror": settings.mirror.model_copy(update={"warehouse_schema": names.name}),
        }
    )


def mysql(settings: Settings, **extra: Any) -> pymysql.connections.Connection[Any]:
    instance = settings.instances[0]
    return pymysql.connect(
        host=instance.host,
        port=instance.port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
        init_command="SET time_zone = '+00:00'",
        **extra,
    )


def rows_read(cursor: Any) -> int:
    cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
    return sum(int(value) for _, value in cursor.fetchall())


def _wire(types: dict[str, Any], row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        name: None if value is None else encode(types[name], value, name)
        for (name, value) in zip(types, row, strict=True)
    }


# The offset of every row the bench writes (one write of each key, before the targets are
# dropped and written again): fixed, so the appliers' rows and the fast path's are the same.
OFFSET = 1_764_000_000_000_001
EPOCH = dt.datetime(2026, 1, 1)


def prepare(
    settings: Settings,
    rows: int,
    batch: int,
    targets: Sequence[str] = ("warehouse", "redis"),
    *,
    fast: bool = True,
) -> None:
    """The table in MySQL and the same rows in ``targets``: the first ``batch`` rows (all of
    them without ``fast``, or for Kudu) through the mirror's appliers, which create the
    tables as the mirror does, the rest by ``fill_fast``."""
    names = names_of(settings)
    db = names.database
    started = time.monotonic()
    conn = mysql(settings)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(DDL.format(db=db, shard=SHARD))
        for lo in range(1, rows + 1, 500_000):
            cur.execute(FILL.format(db=db, shard=SHARD, lo=lo, hi=min(lo + 499_999, rows)))
    conn.close()
    print(f"MySQL: {rows} rows written in {time.monotonic() - started:.0f} s")
    drop_targets(settings)
    if not targets:
        return
    fast = fast and "kudu" not in targets
    through_appliers = min(rows, batch) if fast else rows
    started = time.monotonic()
    apply_rows(settings, through_appliers, batch, targets)
    if through_appliers < rows:
        fill_fast(settings, through_appliers + 1, rows, targets)
    print(
        f"targets: {rows} rows written in {time.monotonic() - started:.0f} s "
        f"({through_appliers} through the mirror's appliers)"
    )


def apply_rows(settings: Settings, upto: int, batch: int, targets: Sequence[str]) -> None:
    """MySQL's rows of keys 1..``upto`` through the mirror's appliers, as the mirror applies
    them (values encoded by ``simple_binlog.values.encode``, as the collector does)."""
    names = names_of(settings)
    table = settings.tables[0].name
    types = {name: parse_column_type(spec) for name, spec in TYPES.items()}
    appliers = {target: build_applier(settings, target) for target in targets}  # type: ignore[arg-type]
    now_ms = int(time.time() * 1000)
    reader = mysql(settings, cursorclass=pymysql.cursors.SSCursor)
    try:
        with reader.cursor() as cur:
            cur.execute(f"SELECT * FROM {names.table} WHERE id <= %s ORDER BY id", (upto,))
            while chunk := cur.fetchmany(batch):
                changes = []
                for row in chunk:
                    content = _wire(types, row)
                    changes.append(
                        RowChange(
                            table,
                            (content["id"],),
                            OFFSET,
                            False,
                            content,
                            TYPES,
                            ("id",),
                            names.table,
                            now_ms,
                        )
                    )
                for applier in appliers.values():
                    applier.apply_batch(changes)
    finally:
        reader.close()
        for applier in appliers.values():
            applier.close()


# The fast path: the rows FILL wrote, computed again from the key instead of read back from
# MySQL and encoded row by row (at 10M rows that took most of half an hour). The formulas are
# FILL's; where MariaDB's arithmetic has a rule of its own it is spelt out. Rows that differed
# from MySQL's would fail the run (both sides raise on any difference), and
# tests/integration/bench/test_validation_bench_fill.py checks that they equal the appliers'.
# id's and amount's division, note, status and created are exact in both; ratio is MariaDB's
# ``seq / 7`` stored in a DOUBLE: the quotient as MariaDB's decimal division computes it
# internally, truncated after 9 digits (one decimal word; div_precision_increment only
# rounds what is shown: SELECT 1002/7 shows 143.1429, the DOUBLE holds 143.142857142), then
# the nearest double of that decimal.
WAREHOUSE_FILL = """INSERT INTO {table} (id, amount, note, status, created, ratio,
    _binlog_offset, _shard)
SELECT seq, (seq %% 100000) / 100.0,
       CASE WHEN seq %% 7 = 0 THEN NULL ELSE 'note-' || (seq %% 1000) END, seq %% 5,
       timestamp '2026-01-01 00:00:00' + seq * interval '1 second',
       CASE WHEN seq %% 11 = 0 THEN NULL ELSE trunc(seq::numeric / 7, 9)::float8 END,
       %(offset)s, %(shard)s
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS seq"""


def wire_row(seq: int) -> dict[str, Any]:
    """Row ``seq`` of FILL as SimpleBinlog wire values (what ``encode`` gives MySQL's row)."""
    cents = seq % 100_000
    ratio = None
    if seq % 11:
        billionths = seq * 1_000_000_000 // 7  # truncated after 9 digits, as MariaDB does
        ratio = float(f"{billionths // 1_000_000_000}.{billionths % 1_000_000_000:09d}")
    created = EPOCH + dt.timedelta(seconds=seq)
    return {
        "id": str(seq),
        "amount": f"{cents // 100}.{cents % 100:02d}",
        "note": None if seq % 7 == 0 else f"note-{seq % 1000}",
        "status": seq % 5,
        "created": f"{created.isoformat(sep=' ')}.000",
        "ratio": ratio,
    }


def fill_fast(settings: Settings, lo: int, hi: int, targets: Sequence[str]) -> None:
    """Keys ``lo``..``hi`` written straight into the tables the appliers made: the warehouse
    by one INSERT … SELECT per million keys in PostgreSQL, Redis by pipelined MSETs of the
    applier's own documents (``encode_value``). Both at once: PostgreSQL works in its own
    process while this one packs Redis's documents."""
    from concurrent.futures import ThreadPoolExecutor

    from mirror.warehouse import connect_warehouse

    names = names_of(settings)
    table = settings.tables[0].name

    def warehouse() -> None:
        target = sql.Identifier(settings.mirror.warehouse_schema, table)
        statement = sql.SQL(WAREHOUSE_FILL).format(table=target)
        with connect_warehouse(settings.postgres) as pg:
            for start in range(lo, hi + 1, 1_000_000):
                params = {"offset": OFFSET, "shard": names.table, "lo": start}
                pg.execute(statement, {**params, "hi": min(start + 999_999, hi)})
                pg.commit()

    with ThreadPoolExecutor(1, thread_name_prefix="vbench-fill") as pool:
        if "warehouse" in targets:
            done = pool.submit(warehouse)
        if "redis" in targets:
            _fill_redis(settings, lo, hi)
        if "warehouse" in targets:
            done.result()  # its error, if any, raised here


def _fill_redis(settings: Settings, lo: int, hi: int) -> None:
    """Keys ``lo``..``hi`` as the Redis applier's documents (``encode_value``), 1,000 per MSET,
    50 MSETs per round trip (no offset guard needed: the keys are new)."""
    from mirror.redis_applier import encode_value

    shard, table = names_of(settings).table, settings.tables[0].name
    prefix = settings.redis.key_prefix
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    pipe = client.pipeline(transaction=False)
    for start in range(lo, hi + 1, 1000):
        documents = {}
        for seq in range(start, min(start + 999, hi) + 1):
            key = str(seq)
            change = RowChange(
                table, (key,), OFFSET, False, wire_row(seq), TYPES, ("id",), shard, 0
            )
            documents[redis_key(prefix, table, [key])] = encode_value(change, None)
        pipe.mset(documents)
        if len(pipe) == 50:
            pipe.execute()
    pipe.execute()
    client.close()


def drop_targets(settings: Settings) -> None:
    from mirror.warehouse import connect_warehouse

    with connect_warehouse(settings.postgres) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(settings.mirror.warehouse_schema)
            )
        )
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    pipe = client.pipeline(transaction=False)
    for count, key in enumerate(client.scan_iter(f"{settings.redis.key_prefix}:*", count=5000)):
        pipe.delete(key)
        if count % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    client.close()


def run_lock(settings: Settings) -> pymysql.connections.Connection[Any]:
    """One run at a time per name on a stack: runs under one name write and drop the same
    database, Redis prefix and warehouse schema, so a second run started meanwhile dropped the
    first one's data under it (two engineers' runs failed so). A MariaDB named lock (one per
    ``--name``), held by this connection until the process ends: a second run waits for it."""
    lock = names_of(settings).lock
    conn = mysql(settings)
    with conn.cursor() as cur:
        cur.execute("SELECT IS_FREE_LOCK(%s)", (lock,))
        if not cur.fetchone()[0]:
            print("waiting for another run of this benchmark to end (it uses the same data)")
        cur.execute("SELECT GET_LOCK(%s, 3600)", (lock,))
        if cur.fetchone()[0] != 1:
            raise SystemExit("another run of this benchmark held its lock for an hour")
    return conn


class PeakRss:
    """The process's largest resident set while the block runs, in MiB, sampled every 20 ms
    from /proc/self/statm (Linux), with its worker processes' (``validation.redis_workers``)
    added. Why not ``getrusage``'s ru_maxrss: it is the peak of the whole process so far, so
    the second side measured could never show less than the first."""

    def __init__(self) -> None:
        import os
        import threading

        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="vbench-rss", daemon=True)
        self.peak_mib = self._rss_mib()

    def _rss_mib(self) -> float:
        from multiprocessing import process

        # The children started, as they are (``active_children`` would reap ended ones, a
        # wait of its own beside the executor's).
        children = tuple(getattr(process, "_children", ()))
        pids = ["self", *(str(child.pid) for child in children)]
        pages = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/statm", "rb") as statm:
                    pages += int(statm.read().split()[1])
            except FileNotFoundError:
                continue  # a worker that has just ended
        return pages * self._page / 2**20

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_mib = max(self.peak_mib, self._rss_mib())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, self._rss_mib())


class NoWait:
    """Nothing is written while the bench measures: nothing is in flight to wait for."""

    def mark(self) -> object:
        return None

    def wait(self, mark: object) -> None:
        return None


def ours(settings: Settings, target: str, options: Options) -> dict[str, float]:
    started = time.monotonic()
    with PeakRss() as memory:
        result = validate_table(
            settings,
            settings.tables[0].name,
            [target],  # type: ignore[list-item]
            options,
            watermarks={target: NoWait()},
            store=MemoryProgress(),
        )
    seconds = time.monotonic() - started
    [report] = result.reports
    if not result.equal:
        raise SystemExit(f"validation found differences where there are none: {report.keys()}")
    return {
        "seconds": seconds,
        "rows": report.rows,
        "chunks": report.chunks,
        "source queries": report.source_queries,
        "source rows read": report.source_rows_read,
        # Where the time went: each side's hashing of the chunks (at the same time, MySQL's
        # in a thread of its own); the rest is setup, waiting for the other side and the end.
        "mysql hashing seconds": report.stats.source_s,
        "target hashing seconds": report.stats.target_s,
        "peak RSS MiB": memory.peak_mib,
    }


def _baseline_warehouse(settings: Settings, cur: Any, batch: int) -> int:
    from mirror.warehouse import connect_warehouse

    table = sql.Identifier(settings.mirror.warehouse_schema, settings.tables[0].name)
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in TYPES)
    with connect_warehouse(settings.postgres) as pg, pg.transaction():
        # A server-side cursor: the rows stream in key order, as MySQL's do.
        theirs = pg.cursor(name="vbench")
        theirs.itersize = batch
        theirs.execute(sql.SQL("SELECT {} FROM {} ORDER BY id").format(columns, table))
        return _merge_compare(cur, iter(theirs), batch)


def _merge_compare(cur: Any, them: Iterator[Any], batch: int) -> int:
    """The rows that differ between MySQL's cursor and ``them``, both in key order (the key
    first): missing, extra and changed rows, found in one merge pass as a plain tool would."""
    differing = 0
    other = next(them, None)
    while chunk := cur.fetchmany(batch):
        for mine in chunk:
            while other is not None and int(other[0]) < mine[0]:
                differing += 1  # extra in the target
                other = next(them, None)
            if other is None or int(other[0]) != mine[0]:
                differing += 1  # missing
                continue
            if tuple(other[1:]) != tuple(mine[1:]):
                differing += 1
            other = next(them, None)
    while other is not None:
        differing += 1
        other = next(them, None)
    return differing


def _baseline_redis(settings: Settings, cur: Any, batch: int) -> int:
    types = {name: parse_column_type(spec) for name, spec in TYPES.items()}
    prefix, table = settings.redis.key_prefix, settings.tables[0].name
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    differing = seen = 0
    while chunk := cur.fetchmany(batch):
        names = [redis_key(prefix, table, [str(row[0])]) for row in chunk]
        pipe = client.pipeline(transaction=False)
        for start in range(0, len(names), 1000):
            pipe.mget(names[start : start + 1000])
        values = [v for part in pipe.execute() for v in part]
        for row, raw in zip(chunk, values, strict=True):
            document = orjson.loads(raw) if raw is not None else None
            stored = document.get("row") if document else None
            seen += 1
            if stored != _wire(types, row):
                differing += 1
    keys = sum(1 for _ in client.scan_iter(f"{prefix}:{table}:*", count=5000))
    client.close()
    return differing + abs(keys - seen)


def baseline(settings: Settings, target: str, batch: int) -> dict[str, float]:
    started = time.monotonic()
    conn = mysql(settings, cursorclass=pymysql.cursors.SSCursor)
    try:
        with PeakRss() as memory, conn.cursor() as cur:
            before = rows_read(cur)
            cur.execute(f"SELECT * FROM {names_of(settings).table} ORDER BY id")
            compare = {
                "warehouse": _baseline_warehouse,
                "redis": _baseline_redis,
                "kudu": _baseline_kudu,
                "lake": _baseline_lake,
            }[target]
            differing = compare(settings, cur, batch)
            read = rows_read(cur) - before
    finally:
        conn.close()
    seconds = time.monotonic() - started
    if differing:
        raise SystemExit(f"the baseline found {differing} differences where there are none")
    return {
        "seconds": seconds,
        "source queries": 1,
        "source rows read": read,
        "peak RSS MiB": memory.peak_mib,
    }


# -- Kudu and the lake ------------------------------------------------------------------------


def drop_kudu(settings: Settings) -> None:
    from mirror.kudu import KuduApplier

    applier = build_applier(settings, "kudu")
    try:
        assert isinstance(applier, KuduApplier)
        applier.drop_tables()  # the tables under kudu.table_prefix ("<name>."): the bench's
    finally:
        applier.close()


def _baseline_kudu(settings: Settings, cur: Any, batch: int) -> int:
    """Every live row of the Kudu table scanned once into a dict by key, each MySQL row's wire
    values compared with it, then what is left over (extra rows)."""
    from cdc_platform.kudu import GETTERS, client_jars, connect, start_jvm
    from validation.kudu import DELETED_COLUMN, python_value

    types = {name: parse_column_type(spec) for name, spec in TYPES.items()}
    start_jvm(client_jars(settings), settings.kudu.jvm_heap)
    client = connect(settings.kudu)
    stored: dict[int, dict[str, Any]] = {}
    try:
        handle = client.openTable(settings.kudu.table_prefix + settings.tables[0].name)
        schema = handle.getSchema()
        names = [*TYPES, DELETED_COLUMN]
        kinds = [str(schema.getColumn(n).getType().name()) for n in names]
        getters = [GETTERS[k] for k in kinds]
        from java.util import ArrayList

        projected = ArrayList()
        for name in names:
            projected.add(name)
        scanner = client.newScannerBuilder(handle).setProjectedColumnNames(projected).build()
        while scanner.hasMoreRows():
            found = scanner.nextRows()
            while found.hasNext():
                row = found.next()
                raw = [
                    None if row.isNull(i) else getattr(row, getter)(i)
                    for i, getter in enumerate(getters)
                ]
                if raw[-1]:
                    continue  # a deleted row (the mirror keeps it flagged)
                wire: dict[str, Any] = {}
                for (name, column), kudu, value in zip(types.items(), kinds, raw, strict=False):
                    if value is None:
                        wire[name] = None
                        continue
                    plain = (
                        str(value.toPlainString())
                        if kudu == "DECIMAL"
                        else str(value)
                        if kudu == "STRING"
                        else float(value)
                        if kudu == "DOUBLE"
                        else int(value)
                    )
                    wire[name] = encode(column, python_value(column.kind, kudu, plain), name)
                stored[int(Decimal(str(wire["id"])))] = wire
        scanner.close()
    finally:
        client.close()
    differing = 0
    while chunk := cur.fetchmany(batch):
        for row in chunk:
            if stored.pop(int(row[0]), None) != _wire(types, row):
                differing += 1
    return differing + len(stored)


def lake_scoped(settings: Settings, root: Path) -> Settings:
    """The lake in ``root`` (an Iceberg catalog on local disk) with the bench's own databases."""
    name = names_of(settings).name
    return settings.model_copy(
        update={
            "spark": settings.spark.model_copy(update={"lake_dir": root / "hive"}),
            "lake": settings.lake.model_copy(update={"location": str(root / "lake")}),
            "stream_writer": settings.stream_writer.model_copy(
                update={"database": f"{name}_raw", "name": f"{name}-writer"}
            ),
            "merge": settings.merge.model_copy(update={"database": f"{name}_snapshot"}),
        }
    )


LAKE_DAY = dt.date(2026, 11, 25)


def _spark(settings: Settings) -> Any:
    import os
    import sys

    from cdc_platform.iceberg import lake_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The session validation uses (lake_session reuses a running one).
    return lake_session(settings, "cdc-validate-bench", {"spark.sql.shuffle.partitions": "4"})


def prepare_lake(settings: Settings, batch: int) -> None:
    """MySQL's rows as the table's snapshot (merge's types), tagged as a merged day."""
    from pyspark.sql import functions as F

    from cdc_platform.iceberg import LakeCatalog
    from cdc_platform.lake_snapshots import day_tag, snapshot_table
    from merge.types import hive_type, snapshot_value

    started = time.monotonic()
    spark = _spark(settings)
    catalog = LakeCatalog.open(spark, settings, check=False)
    catalog.create_namespace(settings.merge.database)
    name = snapshot_table(settings, settings.tables[0].name)
    columns = ", ".join(f"`{n}` {hive_type(s)}" for n, s in TYPES.items())
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} ({columns}, `_binlog_offset` BIGINT, `_shard` STRING) "
        "USING iceberg TBLPROPERTIES ('format-version' = '2')"
    )
    types = {name: parse_column_type(spec) for name, spec in TYPES.items()}
    reader = mysql(settings, cursorclass=pymysql.cursors.SSCursor)
    written = 0
    try:
        with reader.cursor() as cur:
            cur.execute(f"SELECT * FROM {names_of(settings).table}")
            while chunk := cur.fetchmany(max(batch, 50_000)):
                content = [(orjson.dumps(_wire(types, row)).decode(),) for row in chunk]
                frame = spark.createDataFrame(content, "content STRING").select(
                    *[
                        snapshot_value(F.get_json_object("content", f"$.{n}"), hive_type(s)).alias(
                            n
                        )
                        for n, s in TYPES.items()
                    ],
                    F.lit(1).cast("bigint").alias("_binlog_offset"),
                    F.lit(names_of(settings).table).alias("_shard"),
                )
                frame.writeTo(name).append()
                written += len(chunk)
    finally:
        reader.close()
    spark.sql(f"ALTER TABLE {name} CREATE OR REPLACE TAG `{day_tag(LAKE_DAY)}`")
    print(f"lake: {written} rows written as the snapshot in {time.monotonic() - started:.0f} s")


def drop_lake(settings: Settings, root: Path) -> None:
    from cdc_platform.iceberg import LakeCatalog

    spark = _spark(settings)
    catalog = LakeCatalog.open(spark, settings, check=False)
    catalog.drop_namespace(settings.merge.database)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


def _baseline_lake(settings: Settings, cur: Any, batch: int) -> int:
    """The snapshot read through Spark in key order and merge-compared with MySQL's rows."""
    from cdc_platform.lake_snapshots import snapshot_table

    spark = _spark(settings)
    name = snapshot_table(settings, settings.tables[0].name)
    frame = spark.table(name).select(*TYPES).orderBy("id")
    return _merge_compare(cur, iter(frame.toLocalIterator(prefetchPartitions=True)), batch)


def check_reusable(settings: Settings, rows: int) -> None:
    """``--reuse``: the source table a ``--keep`` run left under this name, of ``rows`` rows
    (keys 1..rows; MAX(id) reads one index entry, a COUNT(*) would read them all)."""
    names = names_of(settings)
    conn = mysql(settings)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = %s",
                (names.database, SHARD),
            )
            if not cur.fetchone()[0]:
                raise SystemExit(
                    f"--reuse: no table {names.table}; run once with --keep --name {names.name} "
                    "first"
                )
            cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {names.table}")
            kept = int(cur.fetchone()[0])
    finally:
        conn.close()
    if kept != rows:
        raise SystemExit(f"--reuse: {names.table} holds {kept} rows, not --rows {rows}")


def drop_all(settings: Settings, targets: Sequence[str]) -> None:
    """Everything of this name in MySQL, the warehouse and Redis (and Kudu if measured)."""
    conn = mysql(settings)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {names_of(settings).database}")
    conn.close()
    drop_targets(settings)
    if "kudu" in targets:
        drop_kudu(settings)


def set_up(
    settings: Settings, args: argparse.Namespace, targets: list[str]
) -> tuple[dict[str, Settings], Path | None, pymysql.connections.Connection[Any]]:
    """The services, the data in MySQL and the targets; each target's settings (the lake's
    in a temporary folder, its root returned) and the run's lock (``run_lock``)."""
    services = ["mariadb", "postgresql", "redis", "kafka"]
    LocalStack(settings).up(
        [*services, *(["kudu-master", "kudu-tserver"] if "kudu" in targets else [])]
    )
    lock = run_lock(settings)
    print(f"machine: {describe_machine()}")
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {args.rows} rows")
    lake_root = Path(tempfile.mkdtemp(prefix="vbench-lake-")) if "lake" in targets else None
    settings_of = {
        t: lake_scoped(settings, lake_root) if t == "lake" and lake_root else settings
        for t in targets
    }
    if args.reuse:
        check_reusable(settings, args.rows)
    else:
        prepare(
            settings,
            args.rows,
            args.batch,
            [t for t in targets if t != "lake"],
            fast=args.setup == "fast",
        )
    if lake_root is not None:
        prepare_lake(settings_of["lake"], args.batch)
    return settings_of, lake_root, lock


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, Names]:
    """The command line and the run's names (a bad ``--name``/``--redis-db`` exits with usage)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument(
        "--only",
        action="append",
        choices=("warehouse", "redis", "kudu", "lake"),
        help="the targets to measure (repeatable; default: the warehouse and Redis)",
    )
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--chunk-time", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each side, taking turns (median)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data afterwards")
    parser.add_argument(
        "--setup",
        choices=("fast", "appliers"),
        default="fast",
        help="fast: the first --batch rows through the mirror's appliers, the rest computed "
        "into the targets directly (the same rows); appliers: every row through them",
    )
    parser.add_argument("--reuse", action="store_true", help="use the data a --keep run left")
    parser.add_argument(
        "--drop",
        action="store_true",
        help="only drop the data a --keep run left under --name (and --redis-db), then exit",
    )
    parser.add_argument(
        "--name",
        default=DEFAULT_NAME,
        help="the run's own MySQL database (NAME_00), warehouse schema, Redis key prefix and "
        f"lock, so runs under other names go on meanwhile (default: {DEFAULT_NAME})",
    )
    parser.add_argument(
        "--redis-db",
        type=int,
        help="the run's own Redis logical database (0-15; default: redis.url's): "
        "validation SCANs a whole database, so a big run's keys beside others' slow theirs",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the figures to PATH (for bench.report)"
    )
    args = parser.parse_args(argv)
    if args.drop and (args.keep or args.reuse):
        parser.error("--drop only drops the kept data: leave out --keep and --reuse")
    try:
        return args, Names(args.name, args.redis_db)
    except ValueError as error:
        parser.error(str(error))


def main() -> None:
    args, names = parse_args()
    settings = scoped(load_settings(), names)
    targets = args.only or ["warehouse", "redis"]
    if args.drop:
        lock = run_lock(settings)
        drop_all(settings, targets)
        lock.close()
        print(f"dropped the data of --name {names.name}")
        return
    settings_of, lake_root, lock = set_up(settings, args, targets)
    options = Options.from_settings(
        settings, chunk_rows=args.chunk_rows, chunk_time_s=args.chunk_time or None
    )
    figures: list[Figure] = []
    try:
        for target in ("warehouse", "redis", "kudu", "lake"):
            if target not in targets:
                continue
            chosen = settings_of[target]
            runs = []
            for _ in range(max(1, args.repeat)):
                runs.append((ours(chosen, target, options), baseline(chosen, target, args.batch)))
            mine, plain = runs[0]
            mine_s = statistics.median(m["seconds"] for m, _ in runs)
            plain_s = statistics.median(p["seconds"] for _, p in runs)
            mine = {
                **mine,
                "seconds": mine_s,
                **{
                    what: statistics.median(m[what] for m, _ in runs)
                    for what in ("mysql hashing seconds", "target hashing seconds")
                },
            }
            plain = {**plain, "seconds": plain_s}
            rows = float(mine["rows"])
            figure = Figure(
                key=f"validation.{target}",
                label=f"validate {args.rows:,} rows against the {target}, nothing differs",
                value=rows / mine["seconds"],
                unit="rows/s",
                baseline=rows / plain["seconds"],
                baseline_label="full-table SELECT + compare in Python",
                extra={
                    "runs": float(len(runs)),
                    "seconds": round(mine["seconds"], 2),
                    "baseline seconds": round(plain["seconds"], 2),
                    "slowest run seconds": round(max(m["seconds"] for m, _ in runs), 2),
                    "slowest baseline seconds": round(max(p["seconds"] for _, p in runs), 2),
                    "chunks": mine["chunks"],
                    "source queries": mine["source queries"],
                    "source rows read": mine["source rows read"],
                    "mysql hashing seconds": round(mine["mysql hashing seconds"], 2),
                    "target hashing seconds": round(mine["target hashing seconds"], 2),
                    "baseline source queries": plain["source queries"],
                    "baseline source rows read": plain["source rows read"],
                    # The whole process's resident set (the data it holds, plus Python,
                    # drivers and what an earlier side left in the allocator).
                    "peak RSS MiB": round(max(m["peak RSS MiB"] for m, _ in runs)),
                    # Processes hashing the Redis side's documents (0: the validating one).
                    "redis workers": float(chosen.validation.redis_workers),
                    "baseline peak RSS MiB": round(max(p["peak RSS MiB"] for _, p in runs)),
                },
            )
            print(
                f"{target}: {mine['seconds']:.1f} s ({figure.value:,.0f} rows/s) vs baseline "
                f"{plain['seconds']:.1f} s ({figure.baseline:,.0f} rows/s): "
                f"{figure.ratio:.2f}×; hashing: MySQL {mine['mysql hashing seconds']:.1f} s, "
                f"{target} {mine['target hashing seconds']:.1f} s; "
                f"source: {mine['source queries']:.0f} queries, "
                f"{mine['source rows read']:,.0f} rows read (baseline "
                f"{plain['source rows read']:,.0f}); peak RSS {figure.extra['peak RSS MiB']:.0f} "
                f"MiB (baseline {figure.extra['baseline peak RSS MiB']:.0f} MiB)"
            )
            figures.append(figure)
    finally:
        if not args.keep:
            drop_all(settings, targets)
        if lake_root is not None:
            drop_lake(settings_of["lake"], lake_root)  # in a temporary folder: never kept
        lock.close()  # the next run may start
    write_figures(args.json, "validation", figures)


if __name__ == "__main__":
    main()
