"""The Kudu batch writer (``io.cdcmirror.kudu.GuardedBatch``, decoding wire values in Java)
against the call-by-call Python reference path (``KuduApplier(writer="python")``) on the local
stack's Kudu: random values of every Kind, NULLs and columns a change does not carry, written
by both and read back equal to each other and to the decoded wire values; the guard on keys of
every key-able form; a value Kudu cannot take stops the table with one sentence."""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import re
import uuid
from decimal import Decimal
from typing import Any

import pytest

from cdc_platform.config import Settings
from mirror.kudu import KuduApplier
from mirror.plan import RowChange
from simple_binlog.values import decode, encode, parse_column_type
from tests.integration.mirror.kudu_store import kudu_rows
from tests.unit.mirror.test_kudu_types import CASES

TABLE = "kinds"
_UNSET = object()


def _random(rng: random.Random, spec: str) -> Any:
    """A random canonical value of ``spec`` (one of ``CASES``) over its whole range."""
    integers = {
        "tinyint": (-128, 127),
        "tinyint unsigned": (0, 255),
        "smallint unsigned": (0, 65535),
        "mediumint": (-(2**23), 2**23 - 1),
        "int unsigned": (0, 2**32 - 1),
        "bigint": (-(2**63), 2**63 - 1),
        "bigint unsigned": (0, 2**64 - 1),
        "year": (1901, 2155),
        "bit(5)": (0, 31),
        "bit(64)": (0, 2**64 - 1),
    }
    if spec in integers:
        return rng.randint(*integers[spec])
    if spec.startswith("decimal"):
        precision, scale = (int(p) for p in spec[8:-1].split(","))
        return Decimal(rng.randrange(-(10**precision) + 1, 10**precision)).scaleb(-scale)
    if spec in ("float", "double"):
        return rng.uniform(-1e30, 1e30) * rng.choice((1, 1e-40, 1e-10))
    if spec == "date":
        return dt.date(1000, 1, 1) + dt.timedelta(days=rng.randrange(3_287_181))
    if spec == "datetime(6)":
        return dt.datetime(1000, 1, 1) + dt.timedelta(
            microseconds=rng.randrange(9000 * 365 * 86_400 * 10**6)
        )
    if spec == "timestamp(3)":
        return dt.datetime(1970, 1, 1, 0, 0, 1) + dt.timedelta(milliseconds=rng.randrange(2**31))
    if spec == "time(6)":
        limit = ((838 * 60 + 59) * 60 + 59) * 10**6 + 999_999
        return dt.timedelta(microseconds=rng.randint(-limit, limit))
    if spec.startswith(("enum", "set")):
        return rng.choice(("a", "b") if spec.startswith("enum") else ("", "a", "b", "a,b"))
    if spec in ("varchar(64)", "json"):
        return "".join(
            chr(rng.choice((rng.randrange(32, 127), rng.randrange(160, 0xD7FF))))
            for _ in range(rng.randrange(12))
        )
    if spec in ("binary(4)", "blob", "geometry"):
        return rng.randbytes(rng.randrange(5 if spec == "binary(4)" else 40))
    if spec == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    if spec == "inet4":
        return str(ipaddress.IPv4Address(rng.getrandbits(32)))
    return ipaddress.IPv6Address(rng.getrandbits(128)).compressed


COLUMNS = {f"c{n}": spec for n, spec in enumerate(sorted(CASES))}
TYPES = {"id": "bigint(20) unsigned", **COLUMNS}


def _change(rng: random.Random, key: int, offset: int) -> RowChange:
    row: dict[str, Any] = {"id": str(key)}
    for name, spec in COLUMNS.items():
        roll = rng.random()
        value = None if roll < 0.1 else _UNSET if roll < 0.15 else _random(rng, spec)
        if value is not _UNSET:
            row[name] = None if value is None else encode(parse_column_type(spec), value, name)
    return RowChange(
        TABLE, (str(key),), offset, rng.random() < 0.1, row, TYPES, ("id",), "k_00.t_00", 0
    )


def _applier(settings: Settings, prefix: str, writer: str) -> tuple[Settings, KuduApplier]:
    scoped = settings.model_copy(
        update={"kudu": settings.kudu.model_copy(update={"table_prefix": prefix})}
    )
    jars = (settings.stack.home / "jars" / "kudu").resolve()
    return scoped, KuduApplier(scoped.kudu, scoped.mirror, [], jars, writer=writer)  # type: ignore[arg-type]


def test_the_java_writer_equals_the_python_reference_on_every_kind(kudu_settings: Settings) -> None:
    rng = random.Random(27)
    prefix = kudu_settings.kudu.table_prefix
    batches, offset = [], 1_795_333_510_000_000
    for _ in range(4):
        batch = []
        for _ in range(150):
            offset += 1
            back = rng.randrange(1, 2000) if rng.random() < 0.2 else 0  # a replayed, older one
            batch.append(_change(rng, rng.randrange(300), offset - back))
        batches.append(batch)
    # BINARY(4)'s short wire value (an old message without its trailing zero bytes) is padded.
    binary = next(n for n, s in COLUMNS.items() if s == "binary(4)")
    offset += 1
    short = RowChange(
        TABLE,
        ("999",),
        offset,
        False,
        {"id": "999", binary: "AQ=="},
        TYPES,
        ("id",),
        "k_00.t_00",
        0,
    )
    batches.append([short])
    stored: dict[str, dict[str, dict[str, Any]]] = {}
    results: dict[str, list[tuple[int, int]]] = {}
    for writer in ("java", "python"):
        scoped, applier = _applier(kudu_settings, f"{prefix}{writer}.", writer)
        try:
            results[writer] = [
                (r.applied, r.stale) for r in (applier.apply_batch(b) for b in batches)
            ]
            assert applier.stopped == {}
        finally:
            applier.close()
        stored[writer] = kudu_rows(scoped, TABLE)
    assert results["java"] == results["python"]
    assert sum(stale for _, stale in results["java"]) > 0
    assert stored["java"] == stored["python"]
    assert stored["java"]["999"][binary] == b"\x01\x00\x00\x00"
    # And both hold the decoded wire values of each key's newest change.
    newest: dict[str, RowChange] = {}
    for change in (c for b in batches for c in b):
        if change.key[0] not in newest or change.offset > newest[change.key[0]].offset:
            newest[change.key[0]] = change
    for key, change in newest.items():
        row = stored["java"][key]
        assert row["_binlog_offset"] == change.offset and row["_deleted"] == change.deleted
        for name, value in change.row.items():
            assert row[name] == decode(parse_column_type(TYPES[name]), value, name), (key, name)


@pytest.mark.parametrize(
    ("spec", "older", "newer"),
    [
        ("datetime(6)", "2026-11-21 10:00:00.000001", "2026-11-21 10:00:00.000002"),
        ("decimal(12,2)", "10.50", "10.51"),
        ("varbinary(8)", "AAE=", "AAI="),
        ("date", "2026-11-21", "2026-11-22"),
        ("varchar(8)", "ä", "b"),
        ("smallint(6)", 7, 8),
    ],
)
def test_the_guard_holds_on_keys_of_each_form(
    kudu_settings: Settings, spec: str, older: Any, newer: Any
) -> None:
    types = {"k": spec, "v": "int(11)"}

    def change(key: Any, offset: int, value: int) -> RowChange:
        return RowChange(
            "keyed", (key,), offset, False, {"k": key, "v": value}, types, ("k",), "k_00.t_00", 0
        )

    _, applier = _applier(kudu_settings, kudu_settings.kudu.table_prefix, "java")
    try:
        first = applier.apply_batch([change(older, 20, 1), change(newer, 20, 1)])
        assert (first.applied, first.stale) == (2, 0)
        replay = applier.apply_batch([change(older, 10, 2), change(newer, 30, 3)])
        assert (replay.applied, replay.stale) == (1, 1)
    finally:
        applier.close()
    stored = kudu_rows(kudu_settings, "keyed")
    assert sorted((r["_binlog_offset"], r["v"]) for r in stored.values()) == [(20, 1), (30, 3)]


@pytest.mark.parametrize(
    ("spec", "value", "sentence"),
    [
        ("date", "0000-00-00", r"^column v holds a value Kudu cannot take: '0000-00-00' \("),
        (
            "int(11)",
            "seven",
            r"^column v holds a value Kudu cannot take: 'seven' \(not an integer\)$",
        ),
    ],
)
def test_a_value_kudu_cannot_take_stops_the_table_and_writes_nothing(
    kudu_settings: Settings, spec: str, value: Any, sentence: str
) -> None:
    types = {"id": "int(11)", "v": spec}
    good = RowChange("bad", (1,), 5, False, {"id": 1, "v": None}, types, ("id",), "k_00.t_00", 0)
    bad = RowChange("bad", (2,), 6, False, {"id": 2, "v": value}, types, ("id",), "k_00.t_00", 0)
    # Another table in the same batch keeps flowing.
    fine_types = {"id": "int(11)", "v": "int(11)"}
    fine = RowChange("fine", (1,), 7, False, {"id": 1, "v": 3}, fine_types, ("id",), "f_00.t_00", 0)
    _, applier = _applier(kudu_settings, kudu_settings.kudu.table_prefix, "java")
    try:
        assert applier.apply_batch([good, bad, fine]).applied == 1
        assert list(applier.stopped) == ["bad"]
        assert re.match(sentence, applier.stopped["bad"]), applier.stopped["bad"]
        assert "\n" not in applier.stopped["bad"]
    finally:
        applier.close()
    assert kudu_rows(kudu_settings, "bad") == {}
    assert {k: r["v"] for k, r in kudu_rows(kudu_settings, "fine").items()} == {"1": 3}
