"""Issue 24, item 1: every type family, end to end, byte for byte against MySQL.

One MariaDB table per type family holds edge values (minimum, maximum, zero, NULL, empty,
maximum length, trailing zero bytes, zero and partial-zero dates, every fsp 0–6 of TIME,
DATETIME and TIMESTAMP, a text column in every character set the server offers), written in a
session outside strict mode as such servers run. Once per module the rows are captured by the
collector (the binlog, ``read_range``) and by the replay (``mock_replay``, a SELECT), and each
path is published to a Kafka topic of its own. Then:

* the two paths' messages are identical (content and ``columnTypes``, the server's
  COLUMN_TYPE), the spelling of a JSON number aside (``0`` / ``0.0``: docs/simplebinlog.md);
* each Kafka record is its message's bytes, and every value equals MySQL's;
* each path's topic is consumed by the mirror's consumer into Redis, the PostgreSQL warehouse
  and Kudu, and what each store holds equals MySQL's values;
* both topics are written by the real stream writer (one ``--available-now`` run) into an
  Iceberg raw layer on local disk, whose rows of each path carry MySQL's values, and the real
  merge turns the raw layer into the snapshot (one Spark session, ``skip_readiness``: the day
  is today), whose every value, read by ``cdc_platform.lake_snapshots.snapshot_as_of``,
  equals MySQL's. Both paths' rows of a key are in the same raw table, so the snapshot holds
  the later one of each key (the two carry the same values: the second test).

"Equal" is exact: MySQL's side is the text it prints (``CAST(… AS CHAR)``: dates with their
fsp digits), the bytes it stores (binaries), the UTF-8 bytes of its own conversion of a text
column to utf8mb4 (``HEX(CONVERT(… USING utf8mb4))``), the number it holds (``+ 0``; FLOAT and
DOUBLE as the stored binary value). A store's side is its raw value, or, where the store
cannot hold MySQL's value as such, the product's documented decoding of it: the warehouse's
dates and TIME by validation's ``PostgresCanonical`` (which reads the zero-part date
encoding of ``mirror.pgtypes`` back), Kudu's values by ``KuduType.from_java`` and
``simple_binlog.values.encode``, the snapshot's dates by merge's ``snapshot_date_text`` (which
reads its zero-part date encoding back: docs/merge.md, ``merge.types``), its integers and
decimals from Spark's exact text of them, FLOAT/DOUBLE as their binary value (a FLOAT column
holds the float32 MySQL stores). Each snapshot column's Spark type is the one
``merge.types.hive_type`` documents for its MySQL type.

Documented exception, asserted as such: Kudu cannot hold a zero or partial-zero date, so the
zero-date table is not mirrored to Kudu (``mirror.kudu_types``). MariaDB's JSON is a
``longtext`` column (its COLUMN_TYPE), so it travels and is stored as text, compared byte for
byte like any text (MySQL's binary JSON, a ``jsonb`` column in the warehouse, is not covered
by this MariaDB stack).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import orjson
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from psycopg import sql

from cdc_platform.config import MirrorTarget, Settings, TableMirror
from cdc_platform.kafka import admin_config, consumer_config
from collector.reader import read_range, server_position
from merge.types import hive_type, snapshot_date_text
from mirror.app import build_applier
from mirror.consumer import MirrorConsumer
from mirror.kudu_types import kudu_type
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from mock_replay.runner import ReplayRequest
from simple_binlog.message import SimpleBinlog, decode_message
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.routing import ShardRouter
from simple_binlog.type_table import visit
from simple_binlog.values import Kind, encode, parse_column_type
from tests.integration.mirror.harness import MirrorScene, wait_for
from tests.integration.mirror.targets import live_redis_rows, pg_connect
from tests.integration.mock_replay.helpers import admin, replay_to_memory
from tests.integration.stream_writer.harness import SPARK_START_TIMEOUT_S
from validation.canonical import PostgresCanonical

_FSP = range(7)
_TEXT_SAMPLE = "aZ é€ÿ Ω ж 中文 日本 한 😀 \x81 'q' \\ \t\n"
# Every printable latin1 byte as text: each character set keeps what it can represent.
_LATIN1_BYTES = bytes(range(0x20, 0x100)).hex()

# family → (column definitions after ``id INT PRIMARY KEY``, rows of values after the key)
FAMILIES: dict[str, tuple[str, list[str]]] = {
    "ints": (
        "ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT, "
        "mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED, "
        "z INT(5) UNSIGNED ZEROFILL, bo BOOLEAN",
        [
            "-128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, 0, -128",
            "127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, "
            "9223372036854775807, 18446744073709551615, 4294967295, 127",
            "0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0",
            "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
        ],
    ),
    "decs": (
        "d0 DECIMAL(65,0), d30 DECIMAL(65,30), dz DECIMAL(12,2) UNSIGNED ZEROFILL, d1 DECIMAL(1,1)",
        [
            f"'-{'9' * 65}', '-{'9' * 35}.{'9' * 30}', 0, -0.9",
            f"'{'9' * 65}', '{'9' * 35}.{'9' * 30}', 9999999999.99, 0.9",
            "0, '0.000000000000000000000000000001', 0.01, 0",
            "NULL, NULL, NULL, NULL",
        ],
    ),
    "floats": (
        "f FLOAT, d DOUBLE, fm FLOAT(7,3), dm DOUBLE(12,4)",
        [
            "-3.40282e38, -1.7976931348623157e308, -9999.999, -99999999.9999",
            "3.40282e38, 1.7976931348623157e308, 9999.999, 99999999.9999",
            "1.17549e-38, 2.2250738585072014e-308, 0.001, 0.0001",
            "0, 0, 0, 0",
            "NULL, NULL, NULL, NULL",
        ],
    ),
    "bits": (
        "b1 BIT(1), b8 BIT(8), b64 BIT(64), y YEAR, e ENUM('','a','it''s','é'), s SET('a','b','é')",
        [
            "b'0', b'0', b'0', 1901, '', ''",
            "b'1', b'11111111', b'" + "1" * 64 + "', 2155, 'é', 'a,b,é'",
            "b'1', b'10000000', b'1', 0, 'it''s', 'é'",
            "NULL, NULL, NULL, NULL, NULL, NULL",
        ],
    ),
    "dates": (
        "d DATE, "
        + ", ".join(f"dt{f} DATETIME({f})" for f in _FSP)
        + ", "
        + ", ".join(f"ts{f} TIMESTAMP({f}) NULL" for f in _FSP)
        + ", "
        + ", ".join(f"t{f} TIME({f})" for f in _FSP),
        [
            "'0001-01-01', "
            + ", ".join("'0001-01-01 00:00:00'" for _ in _FSP)
            + ", "
            + ", ".join("'1970-01-01 00:00:01'" for _ in _FSP)
            + ", "
            + ", ".join(f"'-838:59:59{'.' + '9' * f if f else ''}'" for f in _FSP),
            "'9999-12-31', "
            + ", ".join(f"'9999-12-31 23:59:59{'.' + '9' * f if f else ''}'" for f in _FSP)
            + ", "
            + ", ".join(f"'2038-01-19 03:14:07{'.' + '9' * f if f else ''}'" for f in _FSP)
            + ", "
            + ", ".join(f"'838:59:59{'.' + '9' * f if f else ''}'" for f in _FSP),
            "'2024-02-29', "
            + ", ".join(f"'2024-02-29 12:34:56{'.' + '123456'[:f] if f else ''}'" for f in _FSP)
            + ", "
            + ", ".join(f"'2024-02-29 12:34:56{'.' + '000001'[:f] if f else ''}'" for f in _FSP)
            + ", "
            + ", ".join(f"'-00:00:00{'.' + '000001'[:f] if f else ''}'" for f in _FSP),
            ", ".join(["NULL"] * 22),
        ],
    ),
    "zdates": (
        "d DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts0 TIMESTAMP NULL, "
        "ts6 TIMESTAMP(6) NULL",
        [
            "'0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000', "
            "'0000-00-00 00:00:00.000000', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000'",
            "'2024-00-15', '2024-03-00 10:11:12', '2024-00-00 23:59:59.125', "
            "'0000-01-01 00:00:00.000001', NULL, NULL",
            "'0000-12-31', '9999-12-00 23:59:59', '0000-00-31 01:02:03.450', "
            "'2024-00-31 00:00:00.999999', NULL, NULL",
        ],
    ),
    "bins": (
        "b1 BINARY(1), b16 BINARY(16), vb VARBINARY(8), tb TINYBLOB, bl BLOB",
        [
            "x'00', x'01000000000000000000000000000000', x'0000', x'00', x'0100'",
            "x'ff', x'ffffffffffffffffffffffffffffffff', x'ffffffffffffffff', "
            f"REPEAT(x'ff', 255), x'{bytes(range(256)).hex()}'",
            "'', '', '', '', ''",
            "NULL, NULL, NULL, NULL, NULL",
        ],
    ),
    "others": (
        "js JSON, g GEOMETRY, p POINT, u UUID, i4 INET4, i6 INET6",
        [
            '\'{"b": [1, 2.50, "x"],  "a": null}\', ST_GeomFromText(\'LINESTRING(0 0, 1 1)\'), '
            "ST_GeomFromText('POINT(-1.5 2)'), '00000000-0000-0000-0000-000000000000', "
            "'0.0.0.0', '::'",
            "'[]', ST_GeomFromText('POINT(0 0)'), ST_GeomFromText('POINT(1 2)'), "
            "'ffffffff-ffff-ffff-ffff-ffffffffffff', '255.255.255.255', "
            "'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'",
            "'\"\"', NULL, NULL, NULL, NULL, '::ffff:1.2.3.4'",
            "NULL, NULL, NULL, NULL, NULL, NULL",
        ],
    ),
}

# Stores that cannot hold a family, as documented (see the module docstring).
_NOT_IN = {"kudu": {"zdates"}}
_TARGETS: tuple[MirrorTarget, ...] = ("redis", "warehouse", "kudu")


def _charsets(settings: Settings) -> list[str]:
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS "
            "WHERE CHARACTER_SET_NAME <> 'binary' ORDER BY 1"
        )
        return [str(name) for (name,) in cursor.fetchall()]


def _text_family(charsets: list[str]) -> tuple[str, list[str]]:
    """A TEXT column per character set, and the utf8mb4 columns of the other text types."""
    names = list(charsets)
    columns = ", ".join(f"c_{cs} TEXT CHARACTER SET {cs}" for cs in names)
    columns += ", bin_text TEXT CHARACTER SET binary, vc VARCHAR(5), ch CHAR(3)"

    def each(expression: str) -> str:
        return ", ".join(expression.format(cs=cs) for cs in names)

    latin1_text = f"CONVERT(CAST(x'{_LATIN1_BYTES}' AS CHAR CHARACTER SET latin1) USING utf8mb4)"
    sample = _TEXT_SAMPLE.replace("\\", "\\\\").replace("'", "''").replace("\n", "\\n")
    rows = [
        each(f"CONVERT('{sample}' USING {{cs}})") + f", '{sample}', 'é😀abc', 'ab '",
        each(f"CONVERT({latin1_text} USING {{cs}})")
        + f", x'{bytes(range(256)).hex()}', '12345', 'xyz'",
        each("''") + ", '', '', ''",
        ", ".join(["NULL"] * (len(names) + 3)),
    ]
    return columns, rows


@dataclass
class Family:
    table: TableMirror
    schema: str  # physical
    name: str  # physical table
    types: dict[str, str]  # information_schema's COLUMN_TYPE, in column order
    mysql: dict[int, dict[str, Any]]  # id → column → MySQL's value (see _mysql_expression)


@dataclass
class Run:
    settings: Settings
    families: dict[str, Family]
    collected: dict[str, list[SimpleBinlog]]  # family → the collector's messages
    replayed: dict[str, list[SimpleBinlog]]  # family → the replay's messages
    scenes: dict[str, MirrorScene]  # path → its topic


def _mysql_expression(name: str, spec: str) -> str:
    """MySQL's value of a column, in the form its wire value is compared with."""
    column = parse_column_type(spec)
    kind, quoted = column.kind, f"`{name}`"
    if kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP, Kind.TIME, Kind.UUID):
        return f"CAST({quoted} AS CHAR)"
    if kind in (Kind.INET4, Kind.INET6):
        return f"CAST({quoted} AS CHAR)"
    if kind in (Kind.UINT64, Kind.DECIMAL):
        # ZEROFILL's padded text is not the number; + 0 keeps a DECIMAL's scale.
        return f"CAST({quoted} + 0 AS CHAR)" if "zerofill" in spec else f"CAST({quoted} AS CHAR)"
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        return f"CAST({quoted} AS DOUBLE)"  # the stored binary value, not the printed digits
    if kind in (Kind.INT, Kind.YEAR, Kind.BIT):
        return f"{quoted} + 0"
    if kind in (Kind.TEXT, Kind.ENUM, Kind.SET):
        return f"HEX(CONVERT({quoted} USING utf8mb4))"  # the server's own conversion's bytes
    return quoted  # BINARY, GEOMETRY, binary text: the stored bytes


def _from_mysql(spec: str, value: Any) -> Any:
    kind = parse_column_type(spec).kind
    if value is not None and kind in (Kind.TEXT, Kind.ENUM, Kind.SET) and isinstance(value, str):
        return bytes.fromhex(value)
    return value


def _as_mysql(spec: str, wire: Any) -> Any:
    """A wire value in MySQL's form (``_mysql_expression``): binaries decoded from base64,
    text as its UTF-8 bytes, the rest the wire value itself."""
    if wire is None:
        return None
    kind = parse_column_type(spec).kind
    if kind in (Kind.BINARY, Kind.GEOMETRY):
        return base64.b64decode(wire)
    if kind in (Kind.TEXT, Kind.ENUM, Kind.SET):
        return wire.encode("utf-8", "surrogatepass")
    return wire


def _assert_rows(where: str, family: Family, rows: dict[int, dict[str, Any]]) -> None:
    assert set(rows) == set(family.mysql), where
    for key, want in family.mysql.items():
        for name, value in want.items():
            got = rows[key][name]
            if isinstance(value, float) and type(got) is int:
                # JSON has one number type: the replay's server-built JSON spells an integral
                # DOUBLE as MariaDB prints it (0), the collector as orjson does (0.0).
                got = float(got)
            assert got == value and type(got) is type(value), (where, key, name, got, value)


def _create(settings: Settings, schema: str, families: dict[str, tuple[str, list[str]]]) -> None:
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {schema}")
        cursor.execute("SET SESSION sql_mode = ''")  # as a server outside strict mode
        for name, (columns, rows) in families.items():
            cursor.execute(f"CREATE TABLE {schema}.{name}_00 (id INT PRIMARY KEY, {columns})")
            for key, values in enumerate(rows, start=1):
                cursor.execute(f"INSERT INTO {schema}.{name}_00 VALUES ({key}, {values})")
                assert cursor.rowcount == 1


def _read_family(settings: Settings, prefix: str, schema: str, name: str) -> Family:
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, f"{name}_00"),
        )
        types = {str(column): str(spec) for column, spec in cursor.fetchall()}
        columns = ", ".join(_mysql_expression(column, spec) for column, spec in types.items())
        cursor.execute(f"SELECT {columns} FROM {schema}.{name}_00 ORDER BY id")
        mysql = {
            row[0]: {
                column: _from_mysql(spec, value)
                for (column, spec), value in zip(types.items(), row, strict=True)
            }
            for row in cursor.fetchall()
        }
    targets = [t for t in _TARGETS if name not in _NOT_IN.get(t, set())]
    table = TableMirror(db_prefix=prefix, table_prefix=name, targets=targets)
    return Family(table, schema, f"{name}_00", types, mysql)


def _topic_records(settings: Settings, topic: str, expected: int) -> list[bytes]:
    """Every record value of ``topic`` (one partition or more), read_committed."""
    consumer = Consumer(consumer_config(settings.kafka, group_id=f"ty-read-{uuid.uuid4().hex[:6]}"))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
        found: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(found) < expected and time.monotonic() < deadline:
            for record in consumer.consume(num_messages=500, timeout=0.5):
                if record.error() is None and record.value() is not None:
                    found.append(record.value())
        return found
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def run(local_stack: Settings, kudu_cluster: Settings) -> Iterator[Run]:
    tag = uuid.uuid4().hex[:8]
    prefix = f"ty{tag}"
    schema = f"{prefix}_00"
    scenes = {path: MirrorScene(local_stack) for path in ("collector", "replay")}
    families = dict(FAMILIES, texts=_text_family(_charsets(local_stack)))
    with admin(local_stack) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
    _create(local_stack, schema, families)
    try:
        with admin(local_stack) as conn, conn.cursor() as cursor:
            end = server_position(cursor)
        read = {name: _read_family(local_stack, prefix, schema, name) for name in families}
        settings = local_stack.model_copy(
            update={
                "tables": [family.table for family in read.values()],
                "redis": local_stack.redis.model_copy(update={"key_prefix": prefix}),
                "mirror": local_stack.mirror.model_copy(update={"warehouse_schema": prefix}),
                "kudu": local_stack.kudu.model_copy(update={"table_prefix": f"{prefix}."}),
            }
        )
        messages = list(
            read_range(settings.instances[0], start.gtid, end, OffsetGenerator(), [schema])
        )
        collected = {
            name: [m for m in messages if m.table_name == family.name]
            for name, family in read.items()
        }
        replayed = {
            name: replay_to_memory(settings, ReplayRequest("local", prefix, name, batch_size=2))[0]
            for name in read
        }
        scenes["collector"].publish(messages)
        scenes["replay"].publish(m for batch in replayed.values() for m in batch)
        yield Run(settings, read, collected, replayed, scenes)
    finally:
        with admin(local_stack) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {schema}")
        for path in ("collector", "replay"):
            _drop_stores(local_stack, f"{prefix}{path[0]}", list(families))
        _drop_topics(local_stack, [scene.topic for scene in scenes.values()])


def _drop_topics(settings: Settings, topics: list[str]) -> None:
    client = AdminClient(admin_config(settings.kafka))
    existing = set(client.list_topics(timeout=30).topics)
    doomed = [topic for topic in topics if topic in existing]
    if doomed:
        for future in client.delete_topics(doomed, operation_timeout=30).values():
            future.result()


def _drop_stores(settings: Settings, prefix: str, names: list[str]) -> None:
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    for key in client.scan_iter(f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()
    scoped = settings.model_copy(
        update={"mirror": settings.mirror.model_copy(update={"warehouse_schema": prefix})}
    )
    with pg_connect(scoped) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(prefix)))
    from tests.integration.mirror.kudu_store import drop_tables

    kudu = settings.model_copy(
        update={
            "kudu": settings.kudu.model_copy(update={"table_prefix": f"{prefix}."}),
            "tables": [
                TableMirror(db_prefix=prefix, table_prefix=name, targets=["kudu"]) for name in names
            ],
        }
    )
    drop_tables(kudu)


# -- the messages ------------------------------------------------------------------------------


def _message_rows(messages: list[SimpleBinlog], family: Family) -> dict[int, dict[str, Any]]:
    rows = {}
    for message in messages:
        assert message.column_types == family.types  # the server's COLUMN_TYPE, verbatim
        rows[message.content["id"]] = {
            name: _as_mysql(spec, message.content[name]) for name, spec in family.types.items()
        }
    assert len(rows) == len(messages)
    return rows


def test_every_family_and_charset_is_covered(run: Run) -> None:
    kinds = {parse_column_type(s).kind for f in run.families.values() for s in f.types.values()}
    assert kinds == set(Kind)
    texts = run.families["texts"].types
    offered = _charsets(run.settings)
    assert {"utf8mb4", "latin1", "ucs2", "utf16", "utf32"} <= set(offered)
    assert {f"c_{cs}" for cs in offered} <= set(texts)
    fsps = {
        (s.split("(")[0], parse_column_type(s).fsp) for s in run.families["dates"].types.values()
    }
    for base in ("datetime", "timestamp", "time"):
        assert {fsp for b, fsp in fsps if b == base} == set(_FSP)


def test_collector_and_replay_carry_exactly_what_mysql_holds(run: Run) -> None:
    for name, family in run.families.items():
        _assert_rows(f"collector {name}", family, _message_rows(run.collected[name], family))
        _assert_rows(f"replay {name}", family, _message_rows(run.replayed[name], family))
        by_key = {m.content["id"]: (m.content, m.column_types) for m in run.collected[name]}
        assert {m.content["id"]: (m.content, m.column_types) for m in run.replayed[name]} == (
            by_key
        ), name


@pytest.mark.parametrize("path", ["collector", "replay"])
def test_kafka_holds_each_message_byte_for_byte(run: Run, path: str) -> None:
    messages = run.collected if path == "collector" else run.replayed
    sent = [m.encode() for batch in messages.values() for m in batch]
    scene = run.scenes[path]
    records = _topic_records(run.settings, scene.topic, len(sent))
    assert sorted(records) == sorted(sent)
    by_table: dict[str, list[SimpleBinlog]] = {}
    for record in records:
        message = decode_message(record)
        by_table.setdefault(message.table_name, []).append(message)
    for name, family in run.families.items():
        _assert_rows(f"kafka {path} {name}", family, _message_rows(by_table[family.name], family))


# -- the stores --------------------------------------------------------------------------------


def _consume(run: Run, path: str, target: MirrorTarget, settings: Settings) -> None:
    """The mirror's consumer loop for ``target`` until its group committed ``path``'s topic."""
    scene = run.scenes[path]
    kafka = settings.kafka.model_copy(update={"topic_prefix": scene.topic_prefix})
    mirror = settings.mirror.model_copy(update={"group_prefix": f"mt{scene.tag}"})
    stop_event = threading.Event()
    router = ChangeRouter(settings.tables, ShardRouter(list(settings.shard_rules)), target)
    applier = build_applier(settings, target)
    consumer = MirrorConsumer(
        kafka, mirror, target, ["local"], router, applier, MirrorMetrics(target), stop_event
    )
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        wait_for(lambda: scene.committed_lag(target) == 0, 120, f"{target} to commit {path}")
    finally:
        stop_event.set()
        thread.join(30)
        applier.close()
    assert not thread.is_alive()


def _store_settings(run: Run, path: str) -> Settings:
    """The run's settings with a Redis prefix, warehouse schema and Kudu prefix per path."""
    prefix = f"{run.settings.redis.key_prefix}{path[0]}"
    return run.settings.model_copy(
        update={
            "redis": run.settings.redis.model_copy(update={"key_prefix": prefix}),
            "mirror": run.settings.mirror.model_copy(update={"warehouse_schema": prefix}),
            "kudu": run.settings.kudu.model_copy(update={"table_prefix": f"{prefix}."}),
        }
    )


def _redis_rows(settings: Settings, family: Family) -> dict[int, dict[str, Any]]:
    stored = live_redis_rows(settings, family.table.name)
    return {
        int(key): {name: _as_mysql(spec, row.get(name)) for name, spec in family.types.items()}
        for key, row in stored.items()
    }


def _from_postgres(kind: Kind, value: Any) -> Any:
    if value is None:
        return None
    if kind in (Kind.INT, Kind.YEAR, Kind.BIT):
        return int(value)
    if isinstance(value, memoryview):
        return bytes(value)
    if kind in (Kind.TEXT, Kind.ENUM, Kind.SET):
        return value.encode("utf-8")
    return value


def _warehouse_rows(settings: Settings, family: Family) -> dict[int, dict[str, Any]]:
    """Each column as PostgreSQL holds it: text, bytes and numbers raw; dates and TIME read
    back to MySQL's text by validation's ``PostgresCanonical`` (the zero-part date encoding
    of ``mirror.pgtypes`` included); FLOAT/DOUBLE as their binary value (float8)."""
    canonical = PostgresCanonical()
    selected = []
    for name, spec in family.types.items():
        column = parse_column_type(spec)
        quoted = sql.Identifier(name).as_string(None)
        if column.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP, Kind.TIME):
            selected.append(visit(column, canonical)(quoted))
        elif column.kind in (Kind.FLOAT, Kind.DOUBLE):
            selected.append(f"{quoted}::float8")
        elif column.kind in (Kind.BINARY, Kind.GEOMETRY):
            selected.append(quoted)
        elif column.kind in (Kind.INT, Kind.YEAR, Kind.BIT):
            selected.append(f"{quoted}::numeric::text")
        elif column.kind in (Kind.INET4, Kind.INET6):
            selected.append(f"host({quoted})")
        else:
            selected.append(f"{quoted}::text")
    table = sql.Identifier(settings.mirror.warehouse_schema, family.table.name).as_string(None)
    with pg_connect(settings) as conn, conn.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'UTC'")
        cursor.execute(f"SELECT {', '.join(selected)} FROM {table}")
        rows = {}
        for values in cursor.fetchall():
            row = {
                name: _from_postgres(parse_column_type(spec).kind, value)
                for (name, spec), value in zip(family.types.items(), values, strict=True)
            }
            rows[int(row["id"])] = row
    return rows


def _kudu_rows(settings: Settings, family: Family) -> dict[int, dict[str, Any]]:
    """Kudu's values read back by ``KuduType.from_java`` (in ``kudu_rows``), then encoded to
    the wire by the contract's ``encode``: the text of a datetime with its fsp digits."""
    from tests.integration.mirror.kudu_store import kudu_rows

    stored = kudu_rows(settings, family.table.name)
    rows = {}
    for row in stored.values():
        wire = {}
        for name, spec in family.types.items():
            column = parse_column_type(spec)
            value = row[name]
            wire[name] = _as_mysql(spec, None if value is None else encode(column, value, name))
        rows[int(wire["id"])] = wire
    return rows


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", _TARGETS)
@pytest.mark.parametrize("path", ["collector", "replay"])
def test_each_store_holds_exactly_what_mysql_holds(
    run: Run, path: str, target: MirrorTarget
) -> None:
    settings = _store_settings(run, path)
    _consume(run, path, target, settings)
    for name, family in run.families.items():
        if name in _NOT_IN.get(target, set()):
            continue
        if target == "redis":
            rows = _redis_rows(settings, family)
        elif target == "kudu":
            rows = _kudu_rows(settings, family)
        else:
            rows = _warehouse_rows(settings, family)
        _assert_rows(f"{target} from {path}: {name}", family, rows)


def test_kudu_refuses_a_zero_date_as_documented(run: Run) -> None:
    from simple_binlog.errors import UnsupportedTypeError

    family = run.families["zdates"]
    assert "kudu" not in family.table.targets
    column = parse_column_type(family.types["d"])
    with pytest.raises(UnsupportedTypeError, match="zero date"):
        kudu_type(column).to_java("0000-00-00")


# -- the lake ----------------------------------------------------------------------------------


@dataclass
class LakeState:
    raw: dict[str, list[dict[str, Any]]]  # family → its raw layer rows (both paths)
    snapshot: dict[str, dict[int, dict[str, Any]]]  # family → id → column → the snapshot's
    snapshot_types: dict[str, dict[str, str]]  # family → column → its Spark type
    days: list[date]  # the days merged


def _snapshot_select(name: str, spec: str) -> str:
    """A snapshot column as read for the comparison: dates and numbers as Spark's text of
    them, FLOAT/DOUBLE as their binary value, the rest (strings, binaries) raw."""
    kind, quoted = parse_column_type(spec).kind, f"`{name}`"
    if kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP, Kind.INT, Kind.YEAR, Kind.BIT):
        return f"CAST({quoted} AS STRING) AS {quoted}"
    if kind in (Kind.UINT64, Kind.DECIMAL):
        return f"CAST({quoted} AS STRING) AS {quoted}"
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        return f"CAST({quoted} AS DOUBLE) AS {quoted}"
    return quoted


def _from_snapshot(spec: str, value: Any) -> Any:
    """A snapshot value (``_snapshot_select``) in MySQL's form: a DATE/DATETIME/TIMESTAMP
    decoded by merge's own ``snapshot_date_text`` (the documented zero-part date encoding,
    docs/merge.md) with the column's fsp digits; integers from their exact text; binaries as
    bytes; text as its UTF-8 bytes."""
    if value is None:
        return None
    column = parse_column_type(spec)
    if column.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP):
        return snapshot_date_text(value, column.fsp or 0)
    if column.kind in (Kind.INT, Kind.YEAR, Kind.BIT):
        return int(value)
    if isinstance(value, bytearray):
        return bytes(value)
    if column.kind in (Kind.TEXT, Kind.ENUM, Kind.SET):
        return value.encode("utf-8", "surrogatepass")
    return value


@pytest.fixture(scope="module")
def lake(run: Run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeState]:
    """Both paths' topics written by the real stream writer (one run, ``--available-now``)
    into an Iceberg raw layer on local disk, then each day found there merged by the real
    merge (``skip_readiness``: today is not over) into the snapshot, read by
    ``snapshot_as_of`` in one Spark session."""
    from cdc_platform.iceberg import LakeCatalog, lake_session
    from cdc_platform.lake_snapshots import snapshot_as_of
    from merge.job import Merger, MergeRequest
    from tests.integration.stream_writer.harness import WriterEnv, WriterProcess

    tmp = tmp_path_factory.mktemp("types-lake")
    topics = [run.scenes[path].topic for path in ("collector", "replay")]
    env = WriterEnv.create(tmp, topics[0], run.settings)
    writer = WriterProcess(env, tmp / "writer.log", "--topic", topics[1], "--available-now")
    try:
        code = writer.proc.wait(timeout=SPARK_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        writer.kill9()
        raise AssertionError("the stream writer did not finish\n" + writer.diagnostics()) from None
    assert code == 0, writer.diagnostics()
    router = ShardRouter(list(run.settings.shard_rules))
    tables = {
        name: router.route(family.schema, family.name).name for name, family in run.families.items()
    }
    raw = {name: env.rows(table) for name, table in tables.items()}
    days = sorted({date.fromisoformat(row["dt"]) for rows in raw.values() for row in rows})
    settings = env.settings.model_copy(
        update={
            "stream_writer": env.settings.stream_writer.model_copy(
                update={"database": env.database, "name": env.name}
            ),
            "merge": env.settings.merge.model_copy(
                update={"database": f"{env.database}_snap", "check": False}
            ),
            "tables": [
                family.table.model_copy(update={"targets": ["hive"]})
                for family in run.families.values()
            ],
        }
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = lake_session(settings, "cdc-mirror-types-lake", {"spark.sql.shuffle.partitions": "1"})
    catalog = LakeCatalog.open(spark, settings, check=False)
    try:
        merger = Merger(settings, spark)
        for day in days:
            for name in run.families:
                merger.merge(MergeRequest(run.families[name].table.name, day, skip_readiness=True))
        snapshot, snapshot_types = {}, {}
        for name, family in run.families.items():
            frame = snapshot_as_of(spark, settings, family.table.name, days[-1])
            snapshot_types[name] = dict(frame.dtypes)
            selected = frame.selectExpr(
                *(_snapshot_select(column, spec) for column, spec in family.types.items())
            )
            snapshot[name] = {
                int(row["id"]): {
                    column: _from_snapshot(spec, row[column])
                    for column, spec in family.types.items()
                }
                for row in selected.collect()
            }
        yield LakeState(raw, snapshot, snapshot_types, days)
    finally:
        for database in (settings.stream_writer.database, settings.merge.database):
            if spark.catalog.databaseExists(f"{catalog.catalog}.{database}"):
                catalog.drop_namespace(database)
        spark.sql(f"DROP DATABASE IF EXISTS spark_catalog.{settings.merge.database}_dt CASCADE")
        spark.stop()


def test_the_raw_layer_holds_each_paths_messages(run: Run, lake: LakeState) -> None:
    """The stream writer's raw rows of each path carry the message's content and columnTypes:
    every value equals MySQL's."""
    for name, family in run.families.items():
        by_source: dict[str, dict[int, dict[str, Any]]] = {"BINLOG": {}, "MOCK": {}}
        for row in lake.raw[name]:
            assert orjson.loads(row["columnTypes"]) == family.types, name
            content = orjson.loads(row["content"])
            by_source[row["source"]][content["id"]] = {
                column: _as_mysql(spec, content[column]) for column, spec in family.types.items()
            }
        assert len(lake.raw[name]) == len(family.mysql) * 2, name
        _assert_rows(f"raw layer from the collector: {name}", family, by_source["BINLOG"])
        _assert_rows(f"raw layer from the replay: {name}", family, by_source["MOCK"])


def test_the_snapshot_holds_exactly_what_mysql_holds(run: Run, lake: LakeState) -> None:
    for name, family in run.families.items():
        types = lake.snapshot_types[name]
        for column, spec in family.types.items():
            assert types[column] == hive_type(spec), (name, column, types[column])
        _assert_rows(f"snapshot of {lake.days[-1]}: {name}", family, lake.snapshot[name])
