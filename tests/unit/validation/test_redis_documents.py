"""The Redis side's one-pass row hashing (``validation.redis.DocumentHasher``) gives exactly
the digest ``canonical.RowHasher`` gives the parsed documents, for every representative type,
NULL and a missing column, a document it does not parse as typed, and a tombstone; and it
refuses a malformed value as ``RowHasher`` does."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from simple_binlog.errors import ContractError
from simple_binlog.type_table import REPRESENTATIVE_TYPES
from simple_binlog.values import Kind, parse_column_type
from validation.canonical import ChunkDigest, RowHasher
from validation.redis import DocumentHasher

# Wire values per Kind (as the mirror stores them), each spelling a stored document can hold.
WIRES: dict[Kind, list[Any]] = {
    Kind.INT: [0, -128, 127, 2**63 - 1, -(2**63), 42],
    Kind.UINT64: ["0", "18446744073709551615"],
    Kind.DECIMAL: ["12.30", "-0.50", "0.00"],
    Kind.FLOAT: [1.100000023841858, 3, 0.0, -1e-07, 3.4028234663852886e38],
    Kind.DOUBLE: [
        0.1,
        3,  # a JSON integer in a DOUBLE column
        1e20,
        -2.5e-300,
        17388.857142857,
        0.0,
        -0.0,
        2.0**53,
        -123456789.125,
        0.0009765625,
        5e-324,
        1.7976931348623157e308,
        18446744073709551616,  # past 2^64: a float for orjson, for msgspec too
    ],
    Kind.DATE: ["2024-01-05", "0000-00-00"],
    Kind.DATETIME: ["2024-01-05 10:11:12.500000", "0000-00-00 00:00:00.000000"],
    Kind.TIMESTAMP: ["1970-01-01 00:00:01.000"],
    Kind.TIME: ["-838:59:59", "12:00:00"],
    Kind.YEAR: [2024, 0],
    Kind.BIT: [5, 0, 18446744073709551615],
    Kind.ENUM: ["a", ""],
    Kind.SET: ["a,b", ""],
    Kind.TEXT: ["", "NULL", "n", "a,b", 'q"u\\o\nte ü 𝄞', "9:x"],
    Kind.BINARY: ["YWI=", ""],
    Kind.GEOMETRY: ["AAAAAAEBAAAAAAAAAAAA8D8AAAAAAAAAAEA="],
    Kind.UUID: ["123e4567-e89b-12d3-a456-426614174000"],
    Kind.INET4: ["1.2.3.4"],
    Kind.INET6: ["::ffff:1.2.3.4"],
}
JSON_WIRES = ['{"b": 1, "a": [1.5, "x", null]}', "[]", '"x"']
TIME_WIRES = {"time(6)": ["-838:59:59.000000", "12:00:00.000001"]}


def _wires(spec: str) -> list[Any]:
    column = parse_column_type(spec)
    if column.spec.strip().lower().startswith("json"):
        return JSON_WIRES
    return TIME_WIRES.get(spec, WIRES[column.kind])


def _document(row: dict[str, Any] | None, shard: str = "d.t") -> bytes:
    # json, not orjson: it writes integers past 64 bits too.
    document = {"_offset": "00001795695434000001", "_shard": shard, "row": row}
    return json.dumps(document, ensure_ascii=False).encode()


def _reference(hasher: RowHasher, raws: list[bytes | None]) -> ChunkDigest:
    digests = []
    for raw in raws:
        if raw is None:
            continue
        document = orjson.loads(raw)
        if document["row"] is not None:
            digests.append(hasher.digest(document["_shard"], document["row"]))
    return ChunkDigest.of_digests(digests)


@pytest.mark.parametrize("spec", REPRESENTATIVE_TYPES)
def test_every_type_hashes_as_row_hasher_does(spec: str) -> None:
    column = parse_column_type(spec)
    names, columns = ["id", "v"], [parse_column_type("int"), column]
    raws: list[bytes | None] = [
        _document({"id": i, "v": wire}) for i, wire in enumerate([*_wires(spec), None])
    ]
    raws += [_document({"id": 99}), _document(None), None]  # no column, tombstone, no key
    documents, reference = DocumentHasher(names, columns), RowHasher(names, columns)
    assert documents.chunk(raws) == _reference(reference, raws)
    # Each row on its own too: a sum could hide two rows off by opposite amounts.
    for raw in raws:
        assert documents.chunk([raw]) == _reference(reference, [raw]), raw


def test_a_row_of_every_type_with_other_keys_and_odd_column_names() -> None:
    specs = list(REPRESENTATIVE_TYPES)
    names = [f"c {i}:é" for i in range(len(specs))]  # no identifier: msgspec renames them
    columns = [parse_column_type(spec) for spec in specs]
    rng = random.Random(25)
    raws: list[bytes | None] = []
    for index in range(200):
        row: dict[str, Any] = {"_not_compared": [1, {"x": None}]}
        for name, spec in zip(names, specs, strict=True):
            if rng.random() < 0.1:
                continue  # a column the document lacks: NULL
            row[name] = rng.choice([*_wires(spec), None])
        raws.append(_document(row, f"d{index % 3}.t"))
    documents, reference = DocumentHasher(names, columns), RowHasher(names, columns)
    assert documents.chunk(raws) == _reference(reference, raws)
    assert documents.chunk(raws).count == 200


@pytest.mark.parametrize(
    ("spec", "wire"),
    [
        ("double", "1.5"),  # a text where a number is: RowHasher reads it as it always did
        ("int", 1.0),  # a float where an integer is
        ("varchar(8)", 12),  # a number where a text is
        ("bigint(20)", 18446744073709551616),  # past 2^64: orjson's float, refused
    ],
)
def test_a_value_of_another_type_is_hashed_or_refused_as_row_hasher_does(
    spec: str, wire: Any
) -> None:
    names, columns = ["v"], [parse_column_type(spec)]
    raws: list[bytes | None] = [_document({"v": wire})]
    documents, reference = DocumentHasher(names, columns), RowHasher(names, columns)
    try:
        expected = _reference(reference, raws)
    except ContractError:
        with pytest.raises(ContractError):
            documents.chunk(raws)
    else:
        assert documents.chunk(raws) == expected


def test_a_malformed_value_is_refused_not_hashed() -> None:
    uint64 = parse_column_type("bigint(20) unsigned")
    with pytest.raises(ContractError):
        DocumentHasher(["a"], [uint64]).chunk([_document({"a": 12})])
    with pytest.raises(ContractError):
        DocumentHasher(["a"], [parse_column_type("int")]).chunk([_document({"a": "12"})])


def test_any_changed_value_changes_the_digest() -> None:
    names = ["id", "amount", "note", "status", "created", "ratio"]
    specs = ["bigint(20) unsigned", "decimal(12,2)", "varchar(64)", "int", "datetime(3)", "double"]
    hasher = DocumentHasher(names, [parse_column_type(spec) for spec in specs])
    row = {
        "id": "7",
        "amount": "0.07",
        "note": "note-7",
        "status": 2,
        "created": "2026-01-01 00:00:07.000",
        "ratio": 1.0,
    }
    base = hasher.chunk([_document(row)])
    changed = [
        {**row, "amount": "0.08"},
        {**row, "note": "note-7 "},
        {**row, "note": None},
        {**row, "status": 3},
        {**row, "created": "2026-01-01 00:00:07.001"},
        {**row, "ratio": 1.0000000000000002},
        {**row, "ratio": None},
    ]
    digests = [hasher.chunk([_document(other)]) for other in changed]
    digests.append(hasher.chunk([_document(row, "d.u")]))
    assert base not in digests
    assert len(set(digests)) == len(digests)
