"""An attacker redirects an instance to their own server, which asks for the password in
cleartext (``mysql_clear_password``, or MariaDB's ``dialog`` as PAM does) on a connection
without TLS. Every place that connects to a source refuses with one sentence and the server
never sees the password; an instance that allows cleartext sends it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import SecretStr

from cdc_platform.config import MySQLInstance, Settings, TableMirror
from collector import reader
from collector.binlog_stream import BinlogStream
from mirror.backend import MirrorBackend
from mock_replay.source import MySQLSource
from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRule
from tests.unit.cdc_platform.fake_mysql import fake_mysql
from webui.schema_source import InstanceAccess, MariaDBSchemaSource

PASSWORD = "Hunter2-source-password"


def _instance(port: int, allow: bool) -> MySQLInstance:
    allowed = {"allow_cleartext_password": True} if allow else {}
    return MySQLInstance(
        name="orders-eu", host="127.0.0.1", port=port, password=SecretStr(PASSWORD), **allowed
    )


def _collector_reader(instance: MySQLInstance) -> None:
    reader.connect(instance).close()


def _binlog_stream(instance: MySQLInstance) -> None:
    stream = BinlogStream(instance, 4242, "0-1-1")
    try:
        next(iter(stream))
    finally:
        stream.close()


def _replay_source(instance: MySQLInstance) -> None:
    source = MySQLSource(instance)
    try:
        source.load()
    finally:
        source.close()


def _admin_schema_reader(instance: MySQLInstance) -> None:
    allowed = {"allow_cleartext_password": True} if instance.allow_cleartext_password else {}
    access = InstanceAccess(
        instance.name,
        instance.host,
        instance.port,
        instance.user,
        PASSWORD,
        (ShardRule(),),
        **allowed,
    )
    MariaDBSchemaSource(connect_timeout_s=5).live_schema(access, "ordercenter", "orderinfo")


def _row_check(instance: MySQLInstance) -> None:
    from cdc_mirror import verify

    mirror = TableMirror(instance=instance.name, db_prefix="ordercenter", table_prefix="x")
    settings = Settings(instances=[instance], tables=[mirror])
    verify._mysql_connect(settings, mirror).close()


def _mirror_backend(instance: MySQLInstance) -> None:
    mirror = TableMirror(instance=instance.name, db_prefix="d", table_prefix="t")
    MirrorBackend(Settings(instances=[instance], tables=[mirror])).live_schema(mirror.name)


ENTRY_POINTS: list[Callable[[MySQLInstance], None]] = [
    _collector_reader,
    _binlog_stream,
    _replay_source,
    _admin_schema_reader,
    _row_check,
    _mirror_backend,
]


@pytest.mark.parametrize("plugin", ["mysql_clear_password", "dialog"])
@pytest.mark.parametrize("connect", ENTRY_POINTS, ids=lambda f: f.__name__.strip("_"))
def test_a_server_asking_for_the_cleartext_password_never_gets_it(connect, plugin):
    with fake_mysql(plugin) as server, pytest.raises(ConfigError) as caught:
        connect(_instance(server.port, allow=False))
    assert PASSWORD.encode() not in server.received
    assert server.received, "the client never reached the fake server"
    message = str(caught.value)
    assert type(caught.value).__name__ == "CleartextPasswordRefusedError"
    assert f"MySQL instance 'orders-eu' at 127.0.0.1:{server.port}" in message
    assert f"'{plugin}'" in message and "allow_cleartext_password: true" in message
    assert message.endswith(".") and "\n" not in message and PASSWORD not in message


@pytest.mark.parametrize("plugin", ["mysql_clear_password", "dialog"])
def test_an_instance_that_allows_cleartext_sends_the_password(plugin):
    with fake_mysql(plugin) as server:
        _collector_reader(_instance(server.port, allow=True))
    assert PASSWORD.encode() + b"\x00" in server.received


def test_the_setting_is_off_unless_the_instance_says_so():
    assert MySQLInstance(name="a", host="127.0.0.1").allow_cleartext_password is False
