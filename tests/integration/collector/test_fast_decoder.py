"""The collector's own decoder against python-mysql-replication's, on the same binlog.

Every column type (the table of tests/integration/test_binlog_values.py), NULLs, empty values,
multi-row events, updates with key changes and deletes, and a DDL in the middle: the range is
read once through python-mysql-replication's event objects (``messages_from_rows``, the
reference) and once through ``read_range`` (raw events, compiled row decoders: the native
decoder, then its Python reference); every message must be the same, field for field.
"""

from __future__ import annotations

import random

from cdc_platform.config import Settings
from collector.decoding import EventContext, fix_reader_quirks, messages_from_rows
from collector.reader import SchemaCache, ServerPosition, read_range, server_position
from collector.row_decoder import NATIVE_DECODER
from collector.schema import BinlogTableSchemas
from simple_binlog.offsets import OffsetGenerator
from tests.integration import test_binlog_values as every
from tests.integration.test_binlog_values import admin  # noqa: F401 - a fixture

DB = every.DB  # the database of the `admin` fixture, shared with that module


def reference(settings: Settings, start: ServerPosition, stop: ServerPosition) -> list[dict]:
    """python-mysql-replication's events → messages, as the collector did before."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    fix_reader_quirks()
    instance = settings.instances[0]
    schemas = BinlogTableSchemas(SchemaCache(instance).get)
    offsets = OffsetGenerator()
    reader = BinLogStreamReader(
        connection_settings={
            "host": instance.host,
            "port": instance.port,
            "user": instance.user,
            "password": instance.password.get_secret_value(),
        },
        server_id=random.randrange(2_000_000_000, 2_100_000_000),
        auto_position=start.gtid,
        blocking=True,
        is_mariadb=True,
    )
    messages, gtid = [], None
    try:
        for event in reader:
            here = (reader.log_file, reader.log_pos)
            if here > (stop.file, stop.pos):
                break
            if isinstance(event, MariadbGtidEvent):
                gtid = event.gtid
            elif (
                isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent)
                and event.schema == DB
            ):
                table = schemas.for_event(event)
                context = EventContext.of(event, reader, gtid)
                messages += messages_from_rows(
                    type(event).__name__, event.rows, table, context, offsets
                )
            if here >= (stop.file, stop.pos):
                break
    finally:
        reader.close()
    return [m.to_json() for m in messages]


def _normalised(document: dict) -> dict:
    # python-mysql-replication lists an empty label first among an ENUM's values (its index
    # 0, the invalid value), which the reference path spelled into the type: enum('','a',…).
    types = {
        name: spec.replace("enum('',", "enum(") for name, spec in document["columnTypes"].items()
    }
    return {**document, "columnTypes": types}


def test_fast_decoder_equals_the_library(local_stack: Settings, admin) -> None:  # noqa: F811
    with admin.cursor() as cursor:
        cursor.execute(every.DDL)
        start = server_position(cursor)
        for values in every.ROWS:
            cursor.execute(f"INSERT INTO {DB}.every_type VALUES {values}")
        cursor.execute(
            f"UPDATE {DB}.every_type SET id = id + 100, vc = 'moved', e = 'b' WHERE id < 100"
        )
        cursor.execute(f"DELETE FROM {DB}.every_type WHERE id = 104")
        cursor.execute(
            f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, a VARCHAR(300), n DECIMAL(30,10))"
        )
        rng = random.Random(7)
        admin.begin()
        for key in range(500):
            cursor.execute(
                f"INSERT INTO {DB}.t VALUES (%s, %s, %s)",
                (key, "x" * rng.randrange(300), f"{rng.uniform(-1e9, 1e9):.10f}"),
            )
        admin.commit()
        cursor.execute(f"ALTER TABLE {DB}.t ADD COLUMN b INT UNSIGNED NULL AFTER id, DROP COLUMN a")
        cursor.execute(f"UPDATE {DB}.t SET b = id * 7, n = -n WHERE id % 3 = 0")
        cursor.execute(f"DELETE FROM {DB}.t WHERE id % 5 = 0")
        stop = server_position(cursor)

    expected = reference(local_stack, start, stop)
    fast = [
        m.to_json()
        for m in read_range(local_stack.instances[0], start.gtid, stop, OffsetGenerator(), [DB])
    ]

    assert len(expected) == 4 + 3 + 1 + 500 + 167 + 100
    assert len(fast) == len(expected)
    for position, (mine, theirs) in enumerate(zip(fast, expected, strict=True)):
        assert mine == _normalised(theirs), f"message {position} differs"

    # The same events through the Python row readers, the native decoder's reference.
    python = [
        m.to_json()
        for m in read_range(
            local_stack.instances[0], start.gtid, stop, OffsetGenerator(), [DB], native=False
        )
    ]
    assert NATIVE_DECODER, "collector._native is not built; this test compares it"
    assert python == fast
