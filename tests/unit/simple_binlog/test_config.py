"""Configuration: YAML file + environment overrides, one-sentence errors, no leaked secrets."""

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from cdc_platform.config import (
    CONFIG_ENV_VAR,
    ENV_PREFIX,
    LOCAL_PASSWORDS,
    LOCAL_PORTS,
    Settings,
    load_settings,
)
from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRule

REAL_PASSWORD = "Sup3r-Secret-Pa55"  # a password that must never show up anywhere


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No CDC_MIRROR_* variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


@pytest.fixture
def write_config(tmp_path):
    def write(text: str) -> Path:
        path = tmp_path / "cdc-mirror.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    return str(caught.value)


def assert_one_sentence(message: str) -> None:
    assert message.endswith(".")
    assert "\n" not in message
    assert "Traceback" not in message
    assert ". " not in message.rstrip(".")


def test_defaults_load_without_a_file():
    settings = load_settings()
    assert settings == Settings()
    assert [i.name for i in settings.instances] == ["local"]
    assert settings.instances[0].host == "127.0.0.1"
    assert settings.instances[0].port == LOCAL_PORTS["mariadb"]
    assert settings.kafka.partitions == 6
    assert settings.kafka.bootstrap_servers == f"127.0.0.1:{LOCAL_PORTS['kafka']}"
    assert settings.kafka.min_insync_replicas <= settings.kafka.replication_factor
    assert settings.shard_rules == [ShardRule()]
    assert settings.instance("local") is settings.instances[0]


def test_every_port_the_stack_or_a_component_listens_on_by_default_is_below_linuxs_ephemeral_range():
    """32768-60999 are handed to outgoing connections' local ports: a default there could be
    held by a client at the moment its service restarts."""
    settings = Settings()
    defaults = {
        **LOCAL_PORTS,
        "collector metrics": settings.collector.metrics_port,
        "mirror metrics": settings.mirror.metrics_port,
        "stream writer metrics": settings.stream_writer.metrics_port,
        "merge metrics": settings.merge.metrics_port,
        "scheduler metrics": settings.scheduler.metrics_port,
        "web admin": settings.webui.port,
    }
    assert {name: port for name, port in defaults.items() if port >= 32768} == {}
    assert len(set(defaults.values())) == len(defaults)


def test_file_values_override_defaults(write_config):
    path = write_config(
        """
instances:
  - name: orders-db
    host: 127.0.0.1
    port: 3306
    replica_server_id: 9001
  - name: users_db
    host: 127.0.0.1
kafka:
  partitions: 12
  topic_prefix: prod.binlog.
shard_rules:
  - schema_pattern: '^(?P<db>shop)_\\d+$'
"""
    )
    settings = load_settings(path)
    assert [i.name for i in settings.instances] == ["orders-db", "users_db"]
    assert settings.instance("orders-db").port == 3306
    assert settings.instance("orders-db").replica_server_id == 9001
    assert settings.kafka.partitions == 12
    assert settings.kafka.topic_prefix == "prod.binlog."
    # Untouched settings of a touched section keep their defaults.
    assert settings.kafka.replication_factor == 1
    assert settings.shard_rules[0].schema_pattern == r"^(?P<db>shop)_\d+$"
    assert settings.shard_rules[0].table_pattern == ShardRule().table_pattern


def test_config_file_from_the_environment(monkeypatch, write_config):
    path = write_config("kafka:\n  partitions: 3\n")
    monkeypatch.setenv(CONFIG_ENV_VAR, str(path))
    assert load_settings().kafka.partitions == 3


def test_load_settings_restores_the_config_variable(write_config):
    path = write_config("kafka:\n  partitions: 3\n")
    load_settings(path)
    assert CONFIG_ENV_VAR not in os.environ


def test_environment_overrides_defaults(monkeypatch):
    monkeypatch.setenv("CDC_MIRROR_KAFKA__PARTITIONS", "24")
    assert load_settings().kafka.partitions == 24


def test_environment_overrides_the_file_and_merges_with_it(monkeypatch, write_config):
    path = write_config("kafka:\n  partitions: 12\n  topic_prefix: from.file.\n")
    monkeypatch.setenv("CDC_MIRROR_KAFKA__PARTITIONS", "24")
    settings = load_settings(path)
    assert settings.kafka.partitions == 24
    assert settings.kafka.topic_prefix == "from.file."


def test_bad_environment_value_names_the_field(monkeypatch):
    monkeypatch.setenv("CDC_MIRROR_KAFKA__PARTITIONS", "lots")
    with pytest.raises(ConfigError, match=r"'kafka\.partitions'"):
        load_settings()


def test_wrong_type_is_one_sentence_naming_the_field(write_config):
    message = config_error(write_config("kafka:\n  partitions: abc\n"))
    assert "'kafka.partitions'" in message
    assert "'abc'" in message
    assert_one_sentence(message)


def test_out_of_range_value_names_the_field(write_config):
    message = config_error(write_config("kafka:\n  partitions: 0\n"))
    assert "'kafka.partitions'" in message
    assert_one_sentence(message)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("bogus: 1\n", "'bogus'"),
        ("kafka:\n  partitons: 12\n", "'kafka.partitons'"),
        (
            "instances:\n  - name: a\n    host: 127.0.0.1\n    hostname: db1\n",
            "'instances[0].hostname'",
        ),
        ("shard_rules:\n  - db_pattern: x\n", "'shard_rules[0].db_pattern'"),
    ],
)
def test_unknown_fields_are_refused_by_name(write_config, text, field):
    message = config_error(write_config(text))
    assert field in message
    assert "is not a known setting" in message
    assert_one_sentence(message)


def test_bad_instance_name(write_config):
    message = config_error(write_config('instances: [{name: "Bad Name", host: 127.0.0.1}]\n'))
    assert "'instances[0].name'" in message
    assert "'Bad Name'" in message
    assert_one_sentence(message)


def test_instance_without_a_name_is_refused(write_config):
    message = config_error(write_config("instances:\n  - host: 127.0.0.1\n"))
    assert "'instances[0].name'" in message
    assert "required but missing" in message
    assert_one_sentence(message)


def test_duplicate_and_empty_instances(write_config):
    duplicated = "instances: [{name: a, host: 127.0.0.1}, {name: a, host: localhost}]\n"
    assert "repeated: a" in config_error(write_config(duplicated))
    assert "at least one" in config_error(write_config("instances: []\n"))


def test_unknown_instance_lookup():
    with pytest.raises(ConfigError, match="no MySQL instance named 'nope'"):
        load_settings().instance("nope")


def test_min_insync_replicas_cannot_exceed_replication_factor(write_config):
    message = config_error(
        write_config("kafka:\n  replication_factor: 2\n  min_insync_replicas: 3\n")
    )
    assert "'kafka'" in message
    assert "min_insync_replicas (3) cannot exceed replication_factor (2)" in message
    assert_one_sentence(message)
    settings = load_settings(
        write_config("kafka:\n  replication_factor: 3\n  min_insync_replicas: 2\n")
    )
    assert (settings.kafka.replication_factor, settings.kafka.min_insync_replicas) == (3, 2)


def test_invalid_shard_rule_is_a_config_error(write_config):
    message = config_error(write_config("shard_rules:\n  - schema_pattern: '^(?P<x>.+)$'\n"))
    assert "'shard_rules[0].schema_pattern'" in message
    assert "(?P<db>" in message


@pytest.mark.parametrize("password", sorted(LOCAL_PASSWORDS))
def test_local_default_password_refused_for_a_remote_instance(write_config, password):
    message = config_error(
        write_config(
            f"instances:\n  - name: prod\n    host: db.prod.example.com\n    password: {password}\n"
        )
    )
    assert "'instances[0]'" in message
    assert "db.prod.example.com" in message
    assert password not in message
    assert_one_sentence(message)


def test_default_password_refused_for_remote_postgres(write_config):
    message = config_error(write_config("postgres:\n  host: 10.1.2.3\n"))
    assert "'postgres'" in message
    assert "cdc-pg-local" not in message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_local_default_password_allowed_on_loopback(write_config, host):
    settings = load_settings(write_config(f"instances:\n  - name: local\n    host: '{host}'\n"))
    assert settings.instances[0].host == host


def test_real_password_allowed_on_a_remote_host(write_config):
    settings = load_settings(
        write_config(
            "instances:\n  - name: prod\n    host: db.prod.example.com\n"
            f"    password: {REAL_PASSWORD}\n"
        )
    )
    assert settings.instances[0].password.get_secret_value() == REAL_PASSWORD


def test_passwords_never_appear_in_str_or_repr(write_config):
    path = write_config(
        f"""
instances:
  - name: prod
    host: db.prod.example.com
    password: {REAL_PASSWORD}-mysql
postgres:
  host: pg.prod.example.com
  password: {REAL_PASSWORD}-pg
redis:
  url: redis://:{REAL_PASSWORD}-redis@cache.example.com:6379/0
stack:
  admin_password: {REAL_PASSWORD}-admin
kafka:
  client_properties:
    sasl.password: {REAL_PASSWORD}-kafka
"""
    )
    settings = load_settings(path)
    assert isinstance(settings.instances[0].password, SecretStr)
    assert isinstance(settings.redis.url, SecretStr)
    assert settings.stack.admin_password.get_secret_value() == f"{REAL_PASSWORD}-admin"
    assert settings.kafka.client_properties == {"sasl.password": f"{REAL_PASSWORD}-kafka"}
    for shown in (
        str(settings),
        repr(settings),
        str(settings.instances),
        repr(settings.kafka),
        str(settings.postgres),
        str(settings.redis),
    ):
        assert REAL_PASSWORD not in shown
        assert "cdc-local" not in shown


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            "instances:\n  - name: prod\n    host: db.prod.example.com\n    password: 12345678\n",
            "instances[0].password",
        ),
        ("redis:\n  url: 12345678\n", "redis.url"),
        ("stack:\n  admin_password: 12345678\n", "stack.admin_password"),
        (
            "kafka:\n  client_properties:\n    sasl.password: 12345678\n",
            "kafka.client_properties.sasl.password",
        ),
    ],
)
def test_secret_values_never_appear_in_error_messages(write_config, text, field):
    message = config_error(write_config(text))
    assert f"'{field}'" in message
    assert "12345678" not in message
    assert "***" in message


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="does not exist") as caught:
        load_settings(missing)
    assert str(missing) in str(caught.value)


def test_missing_config_file_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CONFIG_ENV_VAR, str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings()


def test_a_directory_is_not_a_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path)


@pytest.mark.parametrize(
    "text", ["kafka: [unclosed\n", "kafka:\n  partitions: 1\n bad: indent\n", "- a\n- b\n"]
)
def test_unreadable_yaml_is_a_config_error(write_config, text):
    path = write_config(text)
    message = config_error(path)
    assert f"config file {path} cannot be read" in message
    assert "\n" not in message


def test_empty_file_gives_defaults(write_config):
    assert load_settings(write_config("")) == Settings()
