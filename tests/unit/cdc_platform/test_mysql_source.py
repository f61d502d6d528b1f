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
from tests.unit.cdc_platform.fake_mysql import fake_mysql, public_pem
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


# RSA full authentication: a redirected server asks for it and serves its own public key.
RSA_CASES = [
    ("caching_sha2_password", False),  # MySQL 8's default, named in the handshake
    ("caching_sha2_password", True),  # after an auth switch
    ("sha256_password", False),
    ("sha256_password", True),
]
RSA_IDS = ["caching_sha2", "caching_sha2-switch", "sha256", "sha256-switch"]


def _rsa_instance(port: int, **extra: object) -> MySQLInstance:
    return MySQLInstance(
        name="orders-eu", host="127.0.0.1", port=port, password=SecretStr(PASSWORD), **extra
    )


@pytest.mark.parametrize(("plugin", "switch"), RSA_CASES, ids=RSA_IDS)
@pytest.mark.parametrize("connect", ENTRY_POINTS, ids=lambda f: f.__name__.strip("_"))
def test_a_server_asking_for_rsa_full_authentication_never_gets_the_password(
    connect, plugin, switch
):
    caught: Exception | None = None
    with fake_mysql(plugin, switch=switch) as server:
        try:
            connect(_rsa_instance(server.port))
        except ConfigError as exc:
            caught = exc
    assert server.recovered is None, f"the server decrypted the password: {server.recovered!r}"
    assert PASSWORD.encode() not in server.received
    assert server.received, "the client never reached the fake server"
    assert type(caught).__name__ == "CleartextPasswordRefusedError"
    message = str(caught)
    assert f"MySQL instance 'orders-eu' at 127.0.0.1:{server.port}" in message
    assert f"'{plugin}'" in message and "TLS" in message
    assert "server_public_key" in message and "allow_cleartext_password: true" in message
    assert message.endswith(".") and "\n" not in message and PASSWORD not in message


@pytest.mark.parametrize("switch", [False, True], ids=["handshake", "switch"])
def test_the_caching_sha2_fast_path_still_connects(switch):
    with fake_mysql("caching_sha2_password", switch=switch, fast=True) as server:
        _collector_reader(_rsa_instance(server.port))
    assert server.received.endswith(b"\x01\x00\x00\x00\x01")  # authenticated, then COM_QUIT
    assert server.recovered is None and PASSWORD.encode() not in server.received


@pytest.mark.parametrize(("plugin", "switch"), RSA_CASES, ids=RSA_IDS)
def test_a_pinned_server_key_is_the_only_key_the_password_is_encrypted_with(plugin, switch):
    # The real server (its key pinned): it reads the password and the collector connects.
    with fake_mysql(plugin, switch=switch) as server:
        _collector_reader(_rsa_instance(server.port, server_public_key=public_pem().decode()))
    assert server.recovered == PASSWORD.encode()
    assert PASSWORD.encode() not in server.received
    # Another server, same pinned key: its own key is ignored, it cannot decrypt anything.
    with fake_mysql(plugin, switch=switch) as server:
        _collector_reader(_rsa_instance(server.port, server_public_key=public_pem(1).decode()))
    assert server.recovered is None and PASSWORD.encode() not in server.received


def test_a_pinned_server_key_may_be_a_file(tmp_path):
    key_file = tmp_path / "server.pem"
    key_file.write_bytes(public_pem())
    with fake_mysql("caching_sha2_password") as server:
        _collector_reader(_rsa_instance(server.port, server_public_key=str(key_file)))
    assert server.recovered == PASSWORD.encode()


def test_a_pinned_key_that_is_not_a_public_key_is_refused(tmp_path):
    with pytest.raises(ValueError, match="server_public_key is not a PEM public key"):
        _rsa_instance(1, server_public_key="-----BEGIN PUBLIC KEY-----\nnot a key\n")
    missing = _rsa_instance(1, server_public_key=str(tmp_path / "absent.pem"))
    with pytest.raises(ConfigError, match="cannot be read") as caught:
        reader.connect(missing)
    assert "'orders-eu'" in str(caught.value) and str(tmp_path) in str(caught.value)


def test_an_instance_that_allows_cleartext_accepts_the_servers_key():
    with fake_mysql("caching_sha2_password") as server:
        _collector_reader(_rsa_instance(server.port, allow_cleartext_password=True))
    assert server.recovered == PASSWORD.encode()


def test_no_key_is_pinned_unless_the_instance_says_so():
    assert MySQLInstance(name="a", host="127.0.0.1").server_public_key == ""
