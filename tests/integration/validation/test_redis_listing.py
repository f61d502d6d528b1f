"""The Redis side's key listing against the stack's Redis: an integer key's names are printed
again from the listed numbers when a chunk is read, and a name that is not the number printed
(written behind the mirror's back with a leading zero) is still listed, read as it was
written and hashed beside the number's own document; a longer name under the table's head is
not a key of it. Each chunk's digest is the digest of exactly its documents."""

from __future__ import annotations

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
