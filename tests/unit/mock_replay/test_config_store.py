"""A replay reads its instances (connection and shard rules) through the configuration
store, once, at start."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from cdc_platform.config import CONFIG_ENV_VAR, Settings
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from mock_replay.api import ReplayService
from mock_replay.runner import ReplayRequest
from simple_binlog.errors import ConfigError

SETTINGS = Settings()  # the built-in instance 'local' only


def _instance(name: str, password: str | None = "secret") -> InstanceConfig:
    return InstanceConfig(
        name=name,
        host="10.0.0.7",
        port=3307,
        user="reader",
        password=SecretStr(password) if password is not None else None,
    )


def test_the_login_is_the_snapshots_and_needs_its_password() -> None:
    login = _instance("orders").login()
    assert (login.name, login.host, login.port, login.user) == (
        "orders",
        "10.0.0.7",
        3307,
        "reader",
    )
    assert login.password.get_secret_value() == "secret"
    with pytest.raises(ConfigError, match="no password for instance 'orders'"):
        _instance("orders", password=None).login()


def test_the_service_knows_the_snapshots_instances_not_the_settings() -> None:
    service = ReplayService(SETTINGS, ConfigSnapshot(version=2, instances=(_instance("orders"),)))
    with pytest.raises(ConfigError, match=r"no MySQL instance named 'local' .*known: orders"):
        service.start(ReplayRequest("local", "shop", "orders"))


def test_by_default_the_service_reads_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text("instances:\n  - {name: billing, host: 127.0.0.1, port: 3306}\n")
    monkeypatch.setenv(CONFIG_ENV_VAR, str(config))
    service = ReplayService(SETTINGS)
    with pytest.raises(ConfigError, match=r"no MySQL instance named 'local' .*known: billing"):
        service.start(ReplayRequest("local", "shop", "orders"))


def test_from_the_web_admin_a_run_reads_its_instances_login_with_its_source_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The component token's snapshot carries no password: the run asks for the snapshot of
    its own instance's source_reader token (``load_source_snapshot``), and only that one."""
    webui = Settings(
        config_store={"source": "webui", "token": "component", "source_tokens": {"orders": "r"}}
    )
    asked: list[str] = []

    def source_snapshot(settings: Settings, instance: str) -> ConfigSnapshot:
        asked.append(instance)
        raise ConfigError("the source_reader token was asked")

    monkeypatch.setattr(
        "mock_replay.api.load_snapshot",
        lambda _: ConfigSnapshot(version=1, instances=(_instance("orders", password=None),)),
    )
    monkeypatch.setattr("mock_replay.api.load_source_snapshot", source_snapshot)
    service = ReplayService(webui)
    with pytest.raises(ConfigError, match="the source_reader token was asked"):
        service.start(ReplayRequest("orders", "shop", "orders"))
    assert asked == ["orders"]
