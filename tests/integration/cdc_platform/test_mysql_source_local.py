"""The cleartext-password rule leaves ordinary sources alone: every place that connects to a
source reaches the local stack's MariaDB (mysql_native_password, no TLS) as before."""

from __future__ import annotations

from cdc_platform.config import Settings, TableMirror
from simple_binlog.routing import ShardRule


def test_every_entry_point_still_reaches_the_local_mariadb(local_stack: Settings):
    from cdc_mirror import verify
    from cdc_platform.config_store import snapshot_from_settings
    from cdc_platform.mysql_schema import LiveTables
    from collector import reader
    from collector.binlog_stream import BinlogStream
    from mock_replay.source import MySQLSource
    from webui.schema_source import InstanceAccess, MariaDBSchemaSource

    instance = local_stack.instances[0]
    assert instance.allow_cleartext_password is False

    with reader.connect(instance) as connection, connection.cursor() as cursor:
        position = reader.server_position(cursor)
    assert position.file

    stream = BinlogStream(instance, 4_190_001, position.gtid or "0-1-0")
    try:
        header, _ = next(iter(stream))
    finally:
        stream.close()
    assert header.type > 0

    source = MySQLSource(instance)
    try:
        assert source.load().threads_running >= 1
    finally:
        source.close()

    access = InstanceAccess(
        instance.name,
        instance.host,
        instance.port,
        instance.user,
        instance.password.get_secret_value(),
        (ShardRule(),),
    )
    assert MariaDBSchemaSource().live_schema(access, "no_such_db", "no_such_table") is None

    mirror = TableMirror(instance=instance.name, db_prefix="no_such_db", table_prefix="t")
    settings = local_stack.model_copy(update={"tables": [mirror]})
    with verify._mysql_connect(settings, mirror) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT CURRENT_USER()")
        assert str(cursor.fetchone()[0]).startswith(f"{instance.user}@")

    tables = LiveTables(snapshot_from_settings(settings))  # the mirror backend's reader
    with tables.cursor(mirror.name) as (cursor, _router):
        cursor.execute("SELECT @@time_zone")
        assert cursor.fetchone()[0] == "+00:00"
