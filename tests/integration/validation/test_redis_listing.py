"""The Redis side's key listing against the stack's Redis: an integer key's names are printed
again from the listed numbers when a chunk is read, and a name that is not the number printed
(written behind the mirror's back with a leading zero) is still listed, read as it was
written and hashed beside the number's own document; a longer name under the table's head is
not a key of it. Each chunk's digest is the digest of exactly its documents."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import orjson
import pytest
import redis

from cdc_platform.config import Settings
from validation.plan import Chunk
from validation.redis import DocumentHasher, RedisSide
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

    def expected(lo: int | None, hi: int | None) -> object:
        def holds(raw: bytes) -> bool:
            number = int(orjson.loads(raw)["row"]["id"])
            return (lo is None or number > lo) and (hi is None or number <= hi)

        return hasher.chunk(raw for raw in documents.values() if holds(raw))

    side = RedisSide(settings.redis, SHAPE)
    try:
        chunks = [Chunk(None, (6,)), Chunk((6,), (99,)), Chunk((99,), (20_000,)), Chunk((20_000,))]
        digests = [side.digest(chunk) for chunk in chunks]
        bounds = [(None, 6), (6, 99), (99, 20_000), (20_000, None)]
        assert digests == [expected(lo, hi) for lo, hi in bounds]
        assert digests[1].count == 33  # 9 to 99 by 3, the one written as 007, 99 twice
        assert side.digest(Chunk()) == hasher.chunk(documents.values())
        assert side.digest(Chunk()).count == len(documents)
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
        assert side.digest(first) == hasher.chunk(
            raw for raw in documents.values() if int(orjson.loads(raw)["row"]["id"]) <= 2000
        )
    finally:
        listing.set()
        side.close()
