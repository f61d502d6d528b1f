"""The mirror backend takes its instances and table mirrors as a configuration snapshot; the
settings only give the connections and names of the rest."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from mirror.backend import MirrorBackend
from simple_binlog.errors import ConfigError

SETTINGS = Settings()  # its own instance 'local' and no table mirror


def _snapshot(password: str | None = None) -> ConfigSnapshot:
    instance = InstanceConfig(
        name="crm",
        host="127.0.0.1",
        port=3306,
        user="reader",
        password=SecretStr(password) if password else None,
        topic="custom.crm",
    )
    table = TableMirror(instance="crm", db_prefix="crm", table_prefix="users")
    return ConfigSnapshot(version=4, instances=(instance,), tables=(table,))


def test_lineage_names_the_snapshots_table_and_its_instances_topic() -> None:
    lineage = MirrorBackend(SETTINGS, _snapshot()).lineage("crm_users", ["crm_00.users_00"])
    assert lineage["kafka_topic"] == "custom.crm"
    assert lineage["mysql"] == {"instance": "crm", "shards": ["crm_00.users_00"]}
    assert lineage["hive_raw"] == f"{SETTINGS.stream_writer.database}.crm_users"
    with pytest.raises(ConfigError, match="no table mirror named 'crm_users'"):
        MirrorBackend(SETTINGS).lineage("crm_users")  # the settings' tables by default


def test_reading_mysql_needs_the_instances_password() -> None:
    with pytest.raises(ConfigError, match="no password for instance 'crm'"):
        MirrorBackend(SETTINGS, _snapshot()).live_schema("crm_users")
