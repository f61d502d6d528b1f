"""``cdc-mirror sql-server`` as an attacker on the network would meet it, without Spark: it
refuses at once to listen where other machines reach it unless logins are checked, and the
password it is given never leaves the process in clear.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from cdc_mirror.processes import free_port, port_free
from cdc_mirror.sql_server import (
    PASSWORD_ITERATIONS,
    _check_port_free,
    _listening,
    address_family,
    check_bind,
    hash_password,
    hive_auth_properties,
    thrift_conf,
)
from cdc_platform.config import Settings, SqlServerSettings
from simple_binlog.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "correct horse battery staple"


def _sql_server(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real command; a server that starts (today's bug) is killed, JVM and all."""
    child = subprocess.Popen(
        [sys.executable, "-m", "cdc_mirror", "sql-server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **env},
        start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"sql-server did not refuse the bind, it ran: {err[-2000:]}")
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_a_non_loopback_bind_without_authentication_is_refused_at_once(host: str) -> None:
    port = free_port()
    started = time.monotonic()
    result = _sql_server("--host", host, "--port", str(port), env={})
    assert time.monotonic() - started < 20, "the refusal came after starting Spark"
    assert result.returncode == 2  # a configuration error (ExitCode.CONFIG)
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert host in message and "sql_server.password" in message and "127.0.0.1" in message
    assert "Traceback" not in result.stderr
    assert port_free(port)


def test_the_password_is_not_echoed_when_its_user_is_missing() -> None:
    result = _sql_server("--host", "0.0.0.0", env={"CDC_MIRROR_SQL_SERVER__PASSWORD": PASSWORD})
    assert result.returncode == 2  # a configuration error (ExitCode.CONFIG)
    assert "sql_server" in result.stderr
    assert PASSWORD not in result.stderr + result.stdout


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_authentication(host: str) -> None:
    check_bind(host, SqlServerSettings())


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "db.example.com", ""])
def test_other_addresses_need_authentication(host: str) -> None:
    with pytest.raises(ConfigError, match=r"sql_server\.user and sql_server\.password"):
        check_bind(host, SqlServerSettings())
    check_bind(host, SqlServerSettings(user="bi", password=SecretStr(PASSWORD)))
    check_bind(host, SqlServerSettings(ldap_url="ldaps://ldap.example.com"))


def test_user_and_password_go_together() -> None:
    with pytest.raises(ValueError, match="together"):
        SqlServerSettings(user="bi")
    with pytest.raises(ValueError, match="together"):
        SqlServerSettings(password=SecretStr(PASSWORD))


def test_the_server_settings_carry_no_password() -> None:
    auth = SqlServerSettings(user="bi", password=SecretStr(PASSWORD))
    conf = thrift_conf("0.0.0.0", 10000, auth)
    properties = hive_auth_properties(auth)
    assert conf["spark.hadoop.hive.server2.authentication"] == "CUSTOM"
    assert PASSWORD not in repr(conf) + repr(properties) + repr(auth)
    assert PASSWORD not in repr(Settings(sql_server=auth))


def test_the_sessions_are_locked_down_whatever_the_authentication() -> None:
    for auth in (SqlServerSettings(), SqlServerSettings(ldap_url="ldaps://ldap.example.com")):
        conf = thrift_conf("127.0.0.1", 10000, auth)
        assert conf["spark.sql.extensions"] == "io.cdcmirror.spark.SqlLockdown"
        assert conf["spark.sql.runSQLOnFiles"] == "false"


def test_ldap_settings_pass_through() -> None:
    auth = SqlServerSettings(ldap_url="ldaps://ldap.example.com", ldap_base_dn="ou=people")
    assert thrift_conf("0.0.0.0", 1, auth)["spark.hadoop.hive.server2.authentication"] == "LDAP"
    assert hive_auth_properties(auth) == {
        "hive.server2.authentication.ldap.url": "ldaps://ldap.example.com",
        "hive.server2.authentication.ldap.baseDN": "ou=people",
    }


def test_the_password_hash_is_salted_pbkdf2() -> None:
    first = hash_password(SecretStr(PASSWORD))
    second = hash_password(SecretStr(PASSWORD))
    assert first.iterations == PASSWORD_ITERATIONS
    assert first.salt != second.salt and first.digest != second.digest
    derived = hashlib.pbkdf2_hmac(
        "sha256", PASSWORD.encode(), base64.b64decode(first.salt), first.iterations
    )
    assert base64.b64encode(derived).decode() == first.digest


@pytest.mark.parametrize(
    ("host", "family"),
    [
        ("127.0.0.1", socket.AF_INET),
        ("localhost", socket.AF_INET),
        ("0.0.0.0", socket.AF_INET),
        ("::1", socket.AF_INET6),
        ("::", socket.AF_INET6),
    ],
)
def test_the_port_probes_use_the_family_of_the_address(
    host: str, family: socket.AddressFamily
) -> None:
    assert address_family(host) == family


def test_the_server_can_start_on_ipv6_loopback() -> None:
    """``--host ::1`` passes the loopback check; its port probes must then work on IPv6."""
    check_bind("::1", SqlServerSettings())
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as free:
        free.bind(("::1", 0))
        port = free.getsockname()[1]
    _check_port_free("::1", port)
    assert not _listening("::1", port)
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as server:
        server.bind(("::1", port))
        server.listen()
        assert _listening("::1", port)
        with pytest.raises(ConfigError, match=r"cannot listen on ::1:"):
            _check_port_free("::1", port)
