"""docker-compose.yml agrees with the local stack and with the code it runs.

- Host ports are the local stack's (``LOCAL_PORTS``), and the servers' settings are the ones
  ``stack/services.py`` writes into my.cnf, server.properties, zoo.cfg and redis.conf (minus
  paths, bind addresses and the local stack's fsync shortcuts, named below).
- Every cdc-mirror component runs (the scheduler and the replay worker included), with a
  restart policy and (but the replay worker, which serves no endpoint) a healthcheck on its own
  port, and its command line is one the CLI accepts; so is the scheduler's maintenance command.
- The environment of every cdc-mirror container loads as valid ``Settings`` pointing at the
  containers, and the web admin scrapes every component.
- ``docker compose config`` accepts the file, where the compose client is installed (skipped
  otherwise: it is a Docker CLI plugin, not a Python package).
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdc_mirror.cli import app as cli_app
from cdc_platform.config import LOCAL_PORTS, Settings, load_settings
from stack.services import Kafka, MariaDB, PostgreSQL, Redis, ZooKeeper

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker-compose.yml"
COMPONENTS = ("collector-a", "collector-b", "stream-writer", "mirror-redis", "mirror-warehouse",
              "webui", "scheduler", "replay-worker")  # fmt: skip
# The components that serve /metrics; the web admin and Prometheus scrape each of them.
METRICS_PORTS = {29100, 29101, 29102, 29110, 29112, 29104}
HEALTH_PORT = re.compile(r"http://127\.0\.0\.1:(\d+)/")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def written_config(method: Any, start: str) -> dict[str, str]:
    """The ``key = value`` lines of the config file a local-stack service writes, from its source
    (the f-string after ``start``); values with their braces' expressions left as written."""
    source = inspect.getsource(method)
    text = source[source.index(start) :]
    text = text[: text.index('"""')]
    settings = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "[")):
            continue
        key, _, value = line.partition("=") if "=" in line else line.partition(" ")
        settings[key.strip()] = value.strip()
    return settings


def published(service: dict[str, Any]) -> dict[int, str]:
    """container port → the host side, e.g. 3306 → '127.0.0.1:23306'."""
    ports = {}
    for entry in service.get("ports", []):
        host, port, container = str(entry).split("#")[0].strip().rsplit(":", 2)
        ports[int(container)] = f"{host}:{port}"
    return ports


def test_host_ports_are_the_local_stacks_on_loopback(services: dict[str, Any]) -> None:
    expected = {
        "mariadb": (3306, LOCAL_PORTS["mariadb"]),
        "postgres": (5432, LOCAL_PORTS["postgresql"]),
        "redis": (6379, LOCAL_PORTS["redis"]),
        "zookeeper": (2181, LOCAL_PORTS["zookeeper"]),
        "kafka": (29092, LOCAL_PORTS["kafka"]),
    }
    for name, (container, host) in expected.items():
        assert published(services[name]) == {container: f"127.0.0.1:{host}"}, name
    # The web admin's port is its default, published by the namespace holder.
    assert published(services["app-net"])[29200] == "127.0.0.1:29200"


def test_mariadb_runs_with_the_local_stacks_server_settings(services: dict[str, Any]) -> None:
    local = written_config(MariaDB.initialise, "[mariadbd]")
    # Paths, the bind address and the local stack's durability shortcuts differ on purpose
    # (the compose file's comment says why); log-bin differs only by its directory.
    for key in ("datadir", "socket", "pid-file", "port", "bind-address", "log-error",
                "innodb-flush-log-at-trx-commit", "sync-binlog"):  # fmt: skip
        local.pop(key)
    local["log-bin"] = Path(local["log-bin"].strip("{}").split("/")[-1].strip(' "')).name
    # The stack's own server writes its class defaults (the failover pair overrides them).
    local["server-id"] = str(MariaDB.server_id)
    assert MariaDB.extra_config == ""
    local.pop("{self.extra_config}")
    flags = {}
    for flag in services["mariadb"]["command"]:
        key, _, value = flag.removeprefix("--").partition("=")
        flags[key] = value
    assert local["log-bin"] == flags["log-bin"] == "mariadb-bin"
    assert {k: v.strip("'") for k, v in local.items()} == flags


def test_kafka_runs_with_the_local_stacks_broker_settings(services: dict[str, Any]) -> None:
    local = written_config(Kafka.initialise, "process.roles")
    # Listeners differ (container names; a host listener); log.dirs is a path.
    for key in ("listeners", "advertised.listeners", "controller.quorum.voters",
                "listener.security.protocol.map", "log.dirs"):  # fmt: skip
        local.pop(key)
    environment = services["kafka"]["environment"]
    for key, value in local.items():
        assert str(environment["KAFKA_" + key.upper().replace(".", "_")]) == value, key


def test_zookeeper_and_redis_run_with_the_local_stacks_settings(services: dict[str, Any]) -> None:
    local = written_config(ZooKeeper.initialise, "tickTime")
    environment = services["zookeeper"]["environment"]
    assert str(environment["ZOO_TICK_TIME"]) == local["tickTime"]
    assert str(environment["ZOO_INIT_LIMIT"]) == local["initLimit"]
    assert str(environment["ZOO_SYNC_LIMIT"]) == local["syncLimit"]
    assert str(environment["ZOO_AUTOPURGE_SNAPRETAINCOUNT"]) == local["autopurge.snapRetainCount"]
    assert str(environment["ZOO_AUTOPURGE_PURGEINTERVAL"]) == local["autopurge.purgeInterval"]
    assert environment["ZOO_4LW_COMMANDS_WHITELIST"] == local["4lw.commands.whitelist"]
    assert environment["ZOO_CFG_EXTRA"] == (
        f"minSessionTimeout={local['minSessionTimeout']} "
        f"maxSessionTimeout={local['maxSessionTimeout']}"
    )
    redis_local = written_config(Redis.initialise, "bind 127.0.0.1")
    command = services["redis"]["command"]
    for key in ("appendonly", "appendfsync", "save"):
        assert command[command.index(f"--{key}") + 1] == redis_local[key], key


def test_postgres_has_the_local_stacks_connection_limit(services: dict[str, Any]) -> None:
    local = inspect.getsource(PostgreSQL)
    assert '"max_connections=200"' in local
    assert "max_connections=200" in services["postgres"]["command"]


def test_every_component_runs_with_a_restart_policy_in_the_shared_namespace(
    services: dict[str, Any],
) -> None:
    for name in COMPONENTS:
        service = services[name]
        assert service["restart"] == "unless-stopped", name
        assert service["network_mode"] == "service:app-net", name
        assert service["init"] is True, name
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy", name
    assert services["app-net"]["restart"] == "unless-stopped"


def test_each_component_checks_its_own_port_and_no_two_share_one(services: dict[str, Any]) -> None:
    ports = {}
    for name in COMPONENTS:
        command = services[name]["command"]
        if name == "replay-worker":
            assert "healthcheck" not in services[name]
            continue
        if name == "scheduler":  # no option: its port is a setting
            port = Settings().scheduler.metrics_port
        else:
            option = "--metrics-port" if "--metrics-port" in command else "--port"
            port = int(command[command.index(option) + 1])
        check = " ".join(services[name]["healthcheck"]["test"])
        match = HEALTH_PORT.search(check)
        assert match is not None and int(match.group(1)) == port, name
        ports[name] = port
    assert len(set(ports.values())) == len(ports), ports
    # The mirror backend's default port stays free for `cdc-mirror mirror backend`.
    assert 29111 not in ports.values()


def test_every_command_line_is_one_the_cli_accepts(services: dict[str, Any]) -> None:
    runner = CliRunner()
    maintenance = load_settings(ROOT / "docker" / "cdc-mirror.yaml").scheduler.maintenance_command
    commands = {name: services[name]["command"] for name in (*COMPONENTS, "cdc-mirror")}
    commands["scheduler: maintenance_command"] = maintenance
    for name, command in commands.items():
        assert command[0] == "cdc-mirror", name
        words = [w for w in command[1:] if not w.startswith("-")]
        options = [w for w in command[1:] if w.startswith("--")]
        path = []
        for word in words:  # subcommands come before the first option
            if command.index(word) > (command.index(options[0]) if options else len(command)):
                break
            path.append(word)
        result = runner.invoke(cli_app, [*path, "--help"], env={"COLUMNS": "300"})
        assert result.exit_code == 0, (name, result.output)
        for option in options:
            assert option in result.output, (name, option)


def _interpolated(value: str) -> str:
    """Compose's ${VAR:?message} / ${VAR} with a test value per variable."""
    return re.sub(r"\$\{(\w+)(?::\?[^}]*)?\}", lambda m: f"test-{m.group(1).lower()}", value)


def test_every_containers_environment_loads_as_settings_for_the_containers(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*COMPONENTS, "cdc-mirror"):
        environment = {k: _interpolated(str(v)) for k, v in services[name]["environment"].items()}
        assert environment["CDC_MIRROR_CONFIG"] == "/etc/cdc-mirror/cdc-mirror.yaml"
        mounts = services[name]["volumes"]
        assert "./docker/cdc-mirror.yaml:/etc/cdc-mirror/cdc-mirror.yaml:ro" in mounts, name
        with monkeypatch.context() as patch:
            for key, value in environment.items():
                patch.setenv(key, value)
            settings = load_settings(ROOT / "docker" / "cdc-mirror.yaml")
        assert settings.instances[0].host == "mariadb"
        assert settings.instances[0].password.get_secret_value() == "test-cdc_mysql_password"
        assert settings.kafka.bootstrap_servers == "kafka:9092"
        assert settings.zookeeper.hosts == "zookeeper:2181"
        assert settings.postgres.host == "postgres"
        assert str(settings.stack.home) == "/var/lib/cdc-mirror"
        # The mirrors refuse to start without a table for their target.
        assert {t for table in settings.tables for t in table.targets} == {"hive", "warehouse", "redis"}
        if name == "webui":
            scraped = {int(HEALTH_PORT.search(t.url).group(1)) for t in settings.webui.scrape_targets}  # type: ignore[union-attr]
            assert scraped == METRICS_PORTS


def test_prometheus_scrapes_every_component_and_loads_the_alert_rules(
    services: dict[str, Any],
) -> None:
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["monitoring"]
    assert prometheus["network_mode"] == "service:app-net"
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    assert targets == {f"127.0.0.1:{p}" for p in METRICS_PORTS}
    assert "scheduler" in {job["job_name"] for job in config["scrape_configs"]}
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in prometheus["volumes"]


def _compose_client() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0:
        return [docker, "compose"]
    return None


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    client = _compose_client()
    if client is None:
        pytest.skip("the docker compose client (a Docker CLI plugin) is not installed here")
    example = (ROOT / "docker" / ".env.example").read_text()
    variables = re.findall(r"^(\w+)=", example, re.MULTILINE)
    env_file = tmp_path / "env"
    env_file.write_text("".join(f"{v}=test-{v.lower()}\n" for v in variables))
    done = subprocess.run(
        [*client, "--env-file", str(env_file), "-f", str(COMPOSE), "--profile", "tools",
         "--profile", "monitoring", "config", "--format", "json"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert set(COMPONENTS) | {"cdc-mirror", "prometheus", "app-net"} <= set(resolved["services"])
    # Every ${VAR:?} the file needs is in .env.example.
    empty = tmp_path / "empty.env"
    empty.write_text("")
    missing = subprocess.run(
        [*client, "--env-file", str(empty), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )  # fmt: skip
    assert missing.returncode != 0
    assert "set CDC_" in missing.stderr


def test_the_config_file_is_valid_for_the_product() -> None:
    """docker/cdc-mirror.yaml as ``cdc-mirror config validate`` checks it (unknown keys are
    refused)."""
    result = CliRunner().invoke(
        cli_app, ["config", "validate", str(ROOT / "docker" / "cdc-mirror.yaml")], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
