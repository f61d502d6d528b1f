"""The Redis side's key listing against the stack's Redis: an integer key's names are printed
again from the listed numbers when a chunk is read, and a name that is not the number printed
(written behind the mirror's back with a leading zero) is still listed, read as it was
written and hashed beside the number's own document; a longer name under the table's head is
not a key of it. Each chunk's digest is the digest of exactly its documents, and a mark for
each name the mirror never writes (it differs from MySQL's). Validation runs against the
stack's MariaDB report such names as extra keys named as in Redis, and compare the key when
``redis_columns`` leaves it out of the documents."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import orjson
import pytest
import redis

from cdc_platform.config import Settings
from tests.integration.validation.harness import scratch_database
from validation.mysql import MySqlSide
from validation.plan import Chunk, Difference, SpelledKey
from validation.redis import DocumentHasher, RedisSide, _spelled_otherwise
from validation.run import Options, describe, validate_sides
from validation.table import TableShape

COLUMNS = (("id", "bigint(20) unsigned"), ("note", "varchar(16)"))
SHAPE = TableShape("listed", (("db.listed", "listed"),), COLUMNS, ("id",))


def _document(number: int, note: str) -> bytes:
    return orjson.dumps({"_shard": "db.listed", "row": {"id": str(number), "note": note}})


@pytest.fixture()
def stored(mirror_settings: Settings) -> Iterator[tuple[Settings, dict[str, bytes]]]:
    head = f"{mirror_settings.redis.key_prefix}:{SHAPE.table}:"
    documents = {f"{head}{n}": _document(n, f"n{n}") for n in range(0, 30_000, 3)}
    documents[f"{head}007"] = _document(7, "behind")  # beside no own name (7 is not stored)
    documents[f"{head}0099"] = _document(99, "twice")  # beside 99's own document
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    client.mset(documents)
    client.set(f"{head}5:more", _document(5, "other"))  # not a key of the table
    client.close()
    yield mirror_settings, documents


def test_every_listed_name_is_read_in_its_chunk(stored: tuple[Settings, dict[str, bytes]]) -> None:
    settings, documents = stored
    hasher = DocumentHasher(["id", "note"], [SHAPE.column_type(n) for n in ("id", "note")])
    head = f"{settings.redis.key_prefix}:{SHAPE.table}:"
    spelled_otherwise = [f"{head}007", f"{head}0099"]

    def expected(lo: int | None, hi: int | None) -> object:
        def holds(raw: bytes) -> bool:
            number = int(orjson.loads(raw)["row"]["id"])
            return (lo is None or number > lo) and (hi is None or number <= hi)

        digest = hasher.chunk(raw for raw in documents.values() if holds(raw))
        # A name the mirror never writes (007, 0099) marks its chunk as differing.
        odd = [n.encode() for n in spelled_otherwise if holds(documents[n])]
        if not odd:
            return digest
        marks = _spelled_otherwise(odd)
        return type(digest).of(digest.count + marks.count, digest.total + marks.total)

    side = RedisSide(settings.redis, SHAPE)
    try:
        chunks = [Chunk(None, (6,)), Chunk((6,), (99,)), Chunk((99,), (20_000,)), Chunk((20_000,))]
        digests = [side.digest(chunk) for chunk in chunks]
        bounds = [(None, 6), (6, 99), (99, 20_000), (20_000, None)]
        assert digests == [expected(lo, hi) for lo, hi in bounds]
        # 9 to 99 by 3, the one written as 007, 99 twice, and a mark for each odd name.
        assert digests[1].count == 33 + 2
        assert side.digest(Chunk()) == expected(None, None)
        assert side.digest(Chunk()).count == len(documents) + 2
    finally:
        side.close()


SIGNED_SHAPE = TableShape("signed", (("db.signed", "signed"),), (("id", "bigint(20)"),), ("id",))


@pytest.mark.parametrize("past_the_range", [False, True])
def test_a_signed_key_and_a_number_past_the_array_type_are_listed(
    mirror_settings: Settings, past_the_range: bool
) -> None:
    """Negative keys are listed name by name and sorted before the rest; a number the key's
    array type cannot hold (written behind the mirror's back) lists the table the general
    way, so it is still read, in the last chunk."""
    head = f"{mirror_settings.redis.key_prefix}:{SIGNED_SHAPE.table}:"
    numbers = [*range(-50, 0, 7), *range(1, 20_000, 2)] + ([10**20] if past_the_range else [])
    # The document under the name past the range holds a row of its own (no 64-bit id).
    documents = {
        f"{head}{n}": orjson.dumps({"_shard": "db.signed", "row": {"id": n if n < 2**63 else 5}})
        for n in numbers
    }
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    hasher = DocumentHasher(["id"], [SIGNED_SHAPE.column_type("id")])

    def expected(lo: int | None, hi: int | None) -> object:
        return hasher.chunk(
            documents[f"{head}{n}"]
            for n in numbers
            if (lo is None or n > lo) and (hi is None or n <= hi)
        )

    side = RedisSide(mirror_settings.redis, SIGNED_SHAPE)
    try:
        bounds = [(None, -8), (-8, 101), (101, None)]
        assert [
            side.digest(Chunk(None if lo is None else (lo,), None if hi is None else (hi,)))
            for lo, hi in bounds
        ] == [expected(lo, hi) for lo, hi in bounds]
        assert side.digest(Chunk(None, (-8,))).count == 7  # -50 to -8 by 7
        assert side.digest(Chunk()).count == len(numbers)
    finally:
        side.close()


@pytest.mark.parametrize("signed", [False, True])
def test_chunks_read_by_range_before_the_listing_are_confirmed_only_if_it_finds_nothing_else(
    mirror_settings: Settings, monkeypatch: pytest.MonkeyPatch, signed: bool
) -> None:
    """While the listing runs, a dense chunk of an integer key is read by range (the names of
    its numbers printed from its bounds); once listed, the chunk is confirmed unless the
    listing found a name in it the range did not read: a number spelled otherwise (``0042``
    beside 42) or, in the first chunk, a key below the range (a negative one); the chunk's
    digest from the listing then reads it."""
    shape = SIGNED_SHAPE if signed else SHAPE
    head = f"{mirror_settings.redis.key_prefix}:{shape.table}:"
    numbers = [*range(-5, 0), *range(1, 6001)] if signed else list(range(1, 6001))
    # A signed BIGINT's wire value is a JSON number, an unsigned one's a text.
    documents = {
        f"{head}{n}": orjson.dumps({"_shard": "db.signed", "row": {"id": n}})
        if signed
        else _document(n, f"n{n}")
        for n in numbers
    }
    if not signed:
        documents[f"{head}0042"] = _document(42, "behind")
    client = redis.Redis.from_url(mirror_settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    names = list(shape.compared_columns)
    hasher = DocumentHasher(names, [shape.column_type(n) for n in names])

    def printed(lo: int, hi: int) -> object:  # the documents under the numbers' own names
        return hasher.chunk(documents[f"{head}{n}"] for n in range(lo + 1, hi + 1))

    listing = threading.Event()
    list_keys = RedisSide._list_keys

    def held(self: RedisSide) -> object:
        listing.wait(60)
        return list_keys(self)

    monkeypatch.setattr(RedisSide, "_list_keys", held)
    side = RedisSide(mirror_settings.redis, shape)
    try:
        first, second, sparse = Chunk(None, (2000,)), Chunk((2000,), (4000,)), Chunk((4000,))
        assert not side.listed
        assert side.provisional_digest(first, 2000) == printed(0, 2000)
        assert side.provisional_digest(second, 2000) == printed(2000, 4000)
        assert side.provisional_digest(Chunk((4000,), (6000,)), 10) is None  # mostly absent
        assert side.provisional_digest(sparse, 2000) is None  # the table's end: no bound
        listing.set()
        assert not side.confirms(first)  # 0042, or the keys below 1
        assert side.confirms(second)
        assert side.listed and side.provisional_digest(second, 2000) is None
        listed = hasher.chunk(
            raw for raw in documents.values() if int(orjson.loads(raw)["row"]["id"]) <= 2000
        )
        if not signed:  # 0042 marks the chunk as differing from MySQL's
            marks = _spelled_otherwise([f"{head}0042".encode()])
            listed = type(listed).of(listed.count + marks.count, listed.total + marks.total)
        assert side.digest(first) == listed
    finally:
        listing.set()
        side.close()


# -- a validation run against MariaDB ---------------------------------------------------------


class _Applied:
    """The watermark of a target written directly (nothing in flight): reached at once."""

    def mark(self) -> object:
        return None

    def wait(self, mark: object) -> None:
        return None


@pytest.fixture()
def source_db(mirror_settings: Settings) -> Iterator[tuple[Settings, str]]:
    """A database of its own on the stack's MariaDB: ``listed`` (ids 1..3000) and
    ``projected`` (ids 1..100 but 43, 42's note ``same``)."""
    with scratch_database(mirror_settings, "rodd") as (conn, db):
        with conn.cursor() as cur:
            for table in ("listed", "projected"):
                cur.execute(
                    f"CREATE TABLE {db}.{table} (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, "
                    "note VARCHAR(16) NULL)"
                )
            cur.execute(
                f"INSERT INTO {db}.listed VALUES "
                + ", ".join(f"({n}, 'n{n}')" for n in range(1, 3001))
            )
            cur.execute(
                f"INSERT INTO {db}.projected VALUES "
                + ", ".join(
                    f"({n}, '{'same' if n == 42 else f'n{n}'}')" for n in range(1, 101) if n != 43
                )
            )
        yield mirror_settings, db


def _stored(db: str, table: str, row: dict[str, str]) -> bytes:
    return orjson.dumps({"_offset": "00000000000000000001", "_shard": f"{db}.{table}", "row": row})


def test_a_validation_run_reports_names_the_mirror_never_writes(
    source_db: tuple[Settings, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``0042`` beside 42 (in a chunk read by range while the listing runs: found equal
    provisionally, not confirmed, compared again from the listing and descended into) and
    ``01077`` in place of a missing 1077: the run reports both names extra, as they are in
    Redis, and 1077 missing; 42's own row is equal."""
    settings, db = source_db
    shape = TableShape("listed", ((db, "listed"),), COLUMNS, ("id",))
    head = f"{settings.redis.key_prefix}:listed:"
    documents = {
        f"{head}{n}": _stored(db, "listed", {"id": str(n), "note": f"n{n}"})
        for n in range(1, 3001)
        if n != 1077
    }
    documents[f"{head}0042"] = documents[f"{head}42"]
    documents[f"{head}01077"] = _stored(db, "listed", {"id": "1077", "note": "n1077"})
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()

    # The listing waits until the first chunk was read by range.
    listing = threading.Event()
    list_keys, provisional_digest, confirms = (
        RedisSide._list_keys,
        RedisSide.provisional_digest,
        RedisSide.confirms,
    )
    confirmed: dict[Chunk, bool] = {}

    def held(self: RedisSide) -> object:
        listing.wait(60)
        return list_keys(self)

    def by_range(self: RedisSide, chunk: Chunk, rows: int) -> object:
        try:
            return provisional_digest(self, chunk, rows)
        finally:
            listing.set()

    def recorded(self: RedisSide, chunk: Chunk) -> bool:
        confirmed[chunk] = confirms(self, chunk)
        return confirmed[chunk]

    monkeypatch.setattr(RedisSide, "_list_keys", held)
    monkeypatch.setattr(RedisSide, "provisional_digest", by_range)
    monkeypatch.setattr(RedisSide, "confirms", recorded)
    source = MySqlSide(settings.instances[0], shape)
    side = RedisSide(settings.redis, shape)
    try:
        options = Options(chunk_rows=500, chunk_time_s=None, leaf_rows=16)
        report = validate_sides(shape, source, side, _Applied(), options, side.rows)
    finally:
        listing.set()
        side.close()
        source.close()
    odd, gone = SpelledKey((42,), f"{head}0042"), SpelledKey((1077,), f"{head}01077")
    assert {(r.key, r.difference) for r in report.differences} == {
        (odd, Difference.EXTRA),
        (gone, Difference.EXTRA),
        ((1077,), Difference.MISSING),
    }, describe(report)
    assert report.unsettled == [] and report.rows == 3000
    # The first chunk (0042 in it) was found equal by range and not confirmed.
    assert confirmed.get(Chunk(None, (500,))) is False, confirmed
    [extra] = [r for r in report.differences if r.key == odd]
    assert extra.source is None and extra.target is not None and extra.target["note"] == "n42"
    text = "\n".join(describe(report))
    assert f"key 42 (named '{head}0042' in the target): extra" in text, text
    assert f"key 1077 (named '{head}01077' in the target): extra" in text, text
    assert "key 1077: missing" in text, text


def test_a_projection_without_the_key_still_tells_a_missing_key_from_an_extra_one(
    source_db: tuple[Settings, str],
) -> None:
    """``redis_columns: [note]``: Redis holds each row's note only. 42 is missing and 43
    extra with 42's note: reported, not cancelled out."""
    settings, db = source_db
    shape = TableShape("projected", ((db, "projected"),), COLUMNS, ("id",)).projected(["note"])
    head = f"{settings.redis.key_prefix}:projected:"
    documents = {
        f"{head}{n}": _stored(db, "projected", {"note": f"n{n}"})
        for n in range(1, 101)
        if n not in (42, 43)
    }
    documents[f"{head}43"] = _stored(db, "projected", {"note": "same"})
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    client.mset(documents)
    client.close()
    source = MySqlSide(settings.instances[0], shape)
    side = RedisSide(settings.redis, shape)
    try:
        options = Options(chunk_rows=40, chunk_time_s=None, leaf_rows=16)
        report = validate_sides(shape, source, side, _Applied(), options, side.rows)
    finally:
        side.close()
        source.close()
    assert {(r.key, r.difference) for r in report.differences} == {
        ((42,), Difference.MISSING),
        ((43,), Difference.EXTRA),
    }, describe(report)
    assert report.rows == 99
