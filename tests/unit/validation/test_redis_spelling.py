"""Redis names the mirror never writes, and key columns its documents leave out: the Redis
side over a fake Redis (its SCAN replies and MGETs answered from a dict; the listing, the
chunk digests, the leaf's per-row hashes and the reads by key are the product's own).

A name spelled otherwise (``...:0042`` for 42, written behind the mirror's back) makes its
chunk differ even when its document is a row MySQL has, and the leaf compares it as a key of
its own (``SpelledKey``): extra, named as it is in Redis, beside the key's own name (equal,
or missing when there is none). A projection without the key compares the key all the same,
taken from each name."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from cdc_platform.config import RedisSettings
from validation.canonical import ChunkDigest, RowHasher
from validation.plan import Chunk, Difference, SpelledKey, compare_rows
from validation.redis import RedisSide, _ChunkReader
from validation.run import KeyReport, TargetReport, _key_from_stored, _stored_key, describe
from validation.table import TableShape

# Nothing listens there: the fake answers every command this side sends.
SETTINGS = RedisSettings(url="redis://127.0.0.1:1/0", key_prefix="pre")  # type: ignore[arg-type]
SHARD = "db.t"


def _shape(key_kind: str = "bigint(20) unsigned") -> TableShape:
    return TableShape("t", (("db", "t"),), (("id", key_kind), ("note", "varchar(16)")), ("id",))


def _document(row: dict[str, object] | None) -> bytes:
    return orjson.dumps({"_offset": "00000000000000000001", "_shard": SHARD, "row": row})


@pytest.fixture()
def fake_redis(monkeypatch: pytest.MonkeyPatch) -> dict[bytes, bytes]:
    stored: dict[bytes, bytes] = {}

    def scan(self: RedisSide, pattern: str) -> Iterator[list[bytes]]:
        head = pattern.rstrip("*").encode()
        names = [name for name in stored if name.startswith(head)]
        for start in range(0, len(names), 7):  # several replies, as SCAN gives
            yield names[start : start + 7]

    def read(self: _ChunkReader, names: list[bytes | str]) -> list[bytes | None]:
        return [stored.get(n.encode() if isinstance(n, str) else n) for n in names]

    monkeypatch.setattr(RedisSide, "_scan", scan)
    monkeypatch.setattr(_ChunkReader, "read", read)
    return stored


def _mysql_hashes(shape: TableShape, rows: dict[int, dict[str, object]]) -> dict[tuple[int], str]:
    """MySQL's per-row hashes of ``rows`` (the canonical encoding every engine makes)."""
    columns = shape.compared_columns
    hasher = RowHasher(columns, [shape.column_type(c) for c in columns])
    return {(key,): hasher.hexdigest(SHARD, row) for key, row in rows.items()}


def _rows(numbers: range) -> dict[int, dict[str, object]]:
    return {n: {"id": str(n), "note": f"n{n}"} for n in numbers}


@pytest.mark.parametrize("key_kind", ["bigint(20) unsigned", "varchar(8)"])
def test_a_name_spelled_otherwise_is_an_extra_key_and_its_chunk_differs(
    fake_redis: dict[bytes, bytes], key_kind: str
) -> None:
    """``0042`` beside 42 and ``0077`` in place of a missing 77: the chunk's digest differs
    from MySQL's (though each document is a row MySQL has), and the leaf names ``0042`` and
    ``0077`` extra under their own names and 77 missing; the names read by key are the
    listed ones. An integer key lists as numbers; a text key the general way (``0042`` is a
    text of its own there, already its own key, and no name is odd)."""
    shape = _shape(key_kind)
    rows = _rows(range(1, 101))
    for number, row in rows.items():
        if number != 77:
            fake_redis[b"pre:t:%d" % number] = _document(row)
    fake_redis[b"pre:t:0042"] = _document(rows[42])
    fake_redis[b"pre:t:0077"] = _document(rows[77])
    side = RedisSide(SETTINGS, shape)
    try:
        mysql = _mysql_hashes(shape, rows)
        whole = side.digest(Chunk())
        if key_kind.startswith("varchar"):
            # A text key: "0042" is another key, not a spelling of 42; it sorts elsewhere.
            keys = {k for k in side.row_hashes(Chunk())}
            assert ("0042",) in keys and not any(isinstance(k, SpelledKey) for k in keys)
            return
        assert whole != ChunkDigest.of_rows(list(mysql.values()))
        # Without the odd names the documents alone would have matched for 0077.
        assert side.digest(Chunk((50,), (100,))) != ChunkDigest.of_rows(
            [h for (k,), h in mysql.items() if k > 50]
        )
        assert side.digest(Chunk((50,), (70,))) == ChunkDigest.of_rows(
            [h for (k,), h in mysql.items() if 50 < k <= 70]
        )
        found = side.row_hashes(Chunk((40,), (80,)))
        odd42, odd77 = SpelledKey((42,), "pre:t:0042"), SpelledKey((77,), "pre:t:0077")
        assert found[(42,)] == found[odd42] == mysql[(42,)]
        assert found[odd77] == mysql[(77,)] and (77,) not in found
        source = {k: h for k, h in mysql.items() if 40 < k[0] <= 80}
        assert compare_rows(source, found) == {
            odd42: Difference.EXTRA,
            odd77: Difference.EXTRA,
            (77,): Difference.MISSING,
        }
        # Read again by key (the settling rounds, the rows shown): each under its own name.
        assert side.key_hashes([odd42, (77,), odd77]) == {odd42: mysql[(42,)], odd77: mysql[(77,)]}
        shown = side.rows([odd77])
        assert shown[odd77]["note"] == "n77"
    finally:
        side.close()


def test_a_projection_without_the_key_compares_the_key_from_the_name(
    fake_redis: dict[bytes, bytes],
) -> None:
    """``redis_columns: [note]``: the documents hold the note only. Key 42 missing and an
    extra key 43 with 42's note: the chunk differs, and the leaf names both."""
    shape = _shape().projected(["note"])
    assert shape.compared_columns == ["id", "note"] and shape.unstored_key == ("id",)
    rows = _rows(range(1, 41))
    rows[42] = {"id": "42", "note": "same"}
    for number, row in rows.items():
        if number != 42:
            fake_redis[b"pre:t:%d" % number] = _document({"note": row["note"]})
    fake_redis[b"pre:t:43"] = _document({"note": "same"})
    side = RedisSide(SETTINGS, shape)
    try:
        mysql = _mysql_hashes(shape, rows)
        equal = {k: h for k, h in mysql.items() if k[0] <= 40}
        assert side.digest(Chunk(None, (40,))) == ChunkDigest.of_rows(list(equal.values()))
        assert side.digest(Chunk()) != ChunkDigest.of_rows(list(mysql.values()))
        found = side.row_hashes(Chunk())
        assert compare_rows(mysql, found) == {
            (42,): Difference.MISSING,
            (43,): Difference.EXTRA,
        }
        assert side.rows([(43,)])[(43,)]["id"] == "43"
    finally:
        side.close()


def test_a_spelled_key_is_its_own_key_kept_in_the_progress_and_named_in_the_report() -> None:
    shape = _shape()
    odd = SpelledKey((42,), "pre:t:0042")
    plain = (42,)
    assert odd != plain and plain != odd and odd == SpelledKey((42,), "pre:t:0042")
    assert odd != SpelledKey((42,), "pre:t:042") and len({odd, (42,)}) == 2
    assert sorted([(43,), odd, (41,)]) == [(41,), odd, (43,)]
    assert _key_from_stored(shape, _stored_key(shape, odd)) == odd
    assert _key_from_stored(shape, _stored_key(shape, (42,))) == (42,)
    report = TargetReport("t", "redis")
    report.differences = [
        KeyReport(odd, Difference.EXTRA, None, {"_shard": SHARD, "id": "42", "note": "n"})
    ]
    text = "\n".join(describe(report))
    assert "key 42 (named 'pre:t:0042' in the target): extra" in text
