"""The Redis side's worker processes (``validation.redis_workers``) against the stack's Redis
and MariaDB: the parts they read and hash (names printed from numbers or ranges, names as
listed) digest as this process does; a difference in a span a worker hashes is reported with
its key, a name the mirror never writes extra under its own name; an error a worker meets is
raised as it would be here; a worker that dies is one ``RedisWorkerError``, and no worker
process outlives the side."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
import redis

from cdc_platform.config import Settings
from tests.integration.validation.harness import scratch_database
from validation.mysql import MySqlSide
from validation.plan import Chunk, Difference, SpelledKey
from validation.redis import (
    DocumentHasher,
    RedisSide,
    RedisWorkerError,
    _DigestWorkers,
    _Printed,
)
from validation.run import Options, describe, validate_sides
from validation.table import TableShape

COLUMNS = (("id", "bigint(20) unsigned"), ("note", "varchar(16)"))
ROWS = 30_000


def _document(shard: str, number: int, note: str) -> bytes:
    return orjson.dumps(
        {
            "_offset": "00000000000000000001",
            "_shard": shard,
            "row": {"id": str(number), "note": note},
        }
    )


def _started(self: _DigestWorkers) -> bool:
    """``_DigestWorkers.ready`` that waits for the workers to start: the spans are then
    hashed by them from the first (not in this process while they start)."""
    return all(started.result(60) is None for started in self._started)


@pytest.fixture()
def started_workers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The workers hash from the first span of two parts; the parts they were sent, by span."""
    sent: list[int] = []
    digest = _DigestWorkers.digest

    def recorded(self: _DigestWorkers, parts: Any) -> Any:
        listed = list(parts)
        sent.append(len(listed))
        return digest(self, listed)

    monkeypatch.setattr(_DigestWorkers, "ready", property(_started))
    monkeypatch.setattr(_DigestWorkers, "digest", recorded)
    return sent


@pytest.fixture()
def source_db(mirror_settings: Settings) -> Iterator[tuple[Settings, str]]:
    """A database of its own on the stack's MariaDB: ``worked``, ids 1..30000."""
    with scratch_database(mirror_settings, "rwork") as (conn, db):
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {db}.worked (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, "
                "note VARCHAR(16) NULL)"
            )
            cur.execute(
                f"INSERT INTO {db}.worked VALUES "
                + ", ".join(f"({n}, 'n{n}')" for n in range(1, ROWS + 1))
            )
        yield mirror_settings, db


class _Applied:
    """The watermark of a target written directly (nothing in flight): reached at once."""

    def mark(self) -> object:
        return None

    def wait(self, mark: object) -> None:
        return None


def test_differences_in_spans_the_workers_hash_are_reported_with_their_keys(
    source_db: tuple[Settings, str], started_workers: list[int]
) -> None:
    """In the second chunk, 22345's note differs, 23456 is missing, and ``…:024000``
    (written behind the mirror's back, beside 24000's own name) is extra under that name;
    every other row is equal, and the first chunk's digest by the workers is MySQL's."""
    settings, db = source_db
    shard = f"{db}.worked"
    shape = TableShape("worked", ((db, "worked"),), COLUMNS, ("id",))
    head = f"{settings.redis.key_prefix}:worked:"
    documents = {
        f"{head}{n}": _document(shard, n, "changed" if n == 22345 else f"n{n}")
        for n in range(1, ROWS + 1)
        if n != 23456
    }
    documents[f"{head}024000"] = _document(shard, 24000, "n24000")
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    source = MySqlSide(settings.instances[0], shape)
    side = RedisSide(settings.redis, shape, workers=2)
    try:
        options = Options(chunk_rows=15_000, chunk_time_s=None, leaf_rows=16)
        report = validate_sides(shape, source, side, _Applied(), options, side.rows)
        first = Chunk(None, (15_000,))
        assert side.digest(first) == source.digest(first)
    finally:
        side.close()
        source.close()
    odd = SpelledKey((24000,), f"{head}024000")
    assert {(r.key, r.difference) for r in report.differences} == {
        ((22345,), Difference.DIFFERENT),
        ((23456,), Difference.MISSING),
        (odd, Difference.EXTRA),
    }, describe(report)
    assert report.unsettled == [] and report.rows == ROWS
    # Both chunks (15,000 keys: three parts each), the halves descended into (two parts) and
    # the first chunk again were hashed by the workers.
    assert len(started_workers) >= 4 and min(started_workers) >= 2, started_workers
    [different] = [r for r in report.differences if r.key == (22345,)]
    assert different.differing_columns() == ["note"]
    assert multiprocessing.active_children() == []


def test_the_workers_digest_every_kind_of_part_as_this_process_does(
    mirror_settings: Settings,
) -> None:
    """Names printed from a range (a chunk read before the listing ends), from numbers (a
    listed span), and names as listed (a span with an odd name)."""
    shape = TableShape("parts", (("db.parts", "parts"),), COLUMNS, ("id",))
    head = f"{mirror_settings.redis.key_prefix}:parts:"
    documents = {f"{head}{n}": _document("db.parts", n, f"n{n}") for n in range(0, 12_000, 2)}
    documents[f"{head}{7}"] = orjson.dumps({"_shard": "db.parts", "row": None})  # a tombstone
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    types = [shape.column_type(n) for n in ("id", "note")]
    hasher = DocumentHasher(["id", "note"], types)
    parts = [
        _Printed(head.encode(), range(0, 5_000)),
        _Printed(head.encode(), np.arange(5_000, 12_000, dtype=np.uint64)),
        [f"{head}{n}".encode() for n in range(3, 40)],
    ]
    workers = _DigestWorkers(2, mirror_settings.redis, "parts", ["id", "note"], types)
    try:
        for part in parts:
            names = part.names() if isinstance(part, _Printed) else part
            expected = hasher.chunk(documents.get(name.decode()) for name in names)
            assert expected.count > 0
            assert workers.digest([part]) == (expected, 1)
        everything = hasher.chunk(documents.values())
        assert workers.digest(parts[:2]) == (everything, 2)
    finally:
        workers.close()
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_a_worker_meets_is_raised_as_it_is_here(
    mirror_settings: Settings, started_workers: list[int], workers: int
) -> None:
    """A malformed document: orjson's error, by the workers as by this process."""
    shape = TableShape("broken", (("db.broken", "broken"),), COLUMNS, ("id",))
    head = f"{mirror_settings.redis.key_prefix}:broken:"
    documents = {f"{head}{n}": _document("db.broken", n, f"n{n}") for n in range(1, 12_001)}
    documents[f"{head}9000"] = b'{"_shard": "db.broken", "row": {"id": "9000", '
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    side = RedisSide(mirror_settings.redis, shape, workers=workers)
    try:
        with pytest.raises(orjson.JSONDecodeError):
            side.digest(Chunk())
    finally:
        side.close()
    assert len(started_workers) == (0 if workers == 0 else 1)
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_is_one_clear_error_and_no_worker_outlives_the_side(
    mirror_settings: Settings, started_workers: list[int]
) -> None:
    shape = TableShape("killed", (("db.killed", "killed"),), COLUMNS, ("id",))
    head = f"{mirror_settings.redis.key_prefix}:killed:"
    documents = {f"{head}{n}": _document("db.killed", n, f"n{n}") for n in range(1, 12_001)}
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    side = RedisSide(mirror_settings.redis, shape, workers=2)
    try:
        assert side.digest(Chunk()).count == 12_000  # by the workers
        [worker, *_] = multiprocessing.active_children()
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(30)
        with pytest.raises(RedisWorkerError, match="worker process hashing killed's Redis"):
            side.digest(Chunk())
    finally:
        side.close()
    assert multiprocessing.active_children() == []
