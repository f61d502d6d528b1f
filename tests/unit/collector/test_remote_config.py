"""The collector's config from the web admin: validating a reply, what a change means (switch
or not), the ETag poll, the encrypted cache and the poller's failure handling. The web admin
is httpx's own MockTransport here; the integration tests run the real admin."""

from __future__ import annotations

import hashlib
import json
import logging
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from cdc_platform.config import CollectorSettings, Settings
from cdc_platform.governance_model import GovernanceWebUISource
from collector.metrics import CollectorMetrics
from collector.remote_config import (
    CollectorConfigFeed,
    InstanceDeletedError,
    RemoteConfigRuntime,
    diff_configs,
    parse_remote_config,
)
from governance import GovernanceSettings
from simple_binlog.errors import ConfigError, ServiceUnavailableError

PASSWORD = "Mysql-Secret-7f3a9c"
TOKEN = "cdc_collector_token_1"
LOCAL = Settings.model_validate(
    {
        "instances": [{"name": "orders", "host": "127.0.0.1", "replica_server_id": 777}],
        "collector": {"max_rows_per_transaction": 321, "config_source": "webui"},
        "governance": {
            "enabled": True,
            "source": "webui",
            "hash_salt": "the-collector-salt-123",
            "webui": {"url": "http://admin.test", "token": TOKEN},
        },
    }
)


def _policy_set(version: int, action: str = "mask") -> dict[str, Any]:
    return GovernanceSettings.model_validate(
        {
            "enabled": True,
            "version": version,
            "hash_salt": "stand-in-salt-never-used",
            "policies": [{"table": "shop_users", "column": "phone", "action": action}],
        }
    ).published_policy_set()


def document(version: int = 1, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "instance": "orders",
        "version": version,
        "host": "10.0.0.12",
        "port": 3306,
        "user": "cdc",
        "password": PASSWORD,
        "gtid_start": "0-1-100",
        "include": [r"shop_\d+\..*"],
        "exclude": [],
        "shard_rules": [{}],
        "collector_group": "default",
        "topic": "cdc.binlog.orders",
        "tables": [],
        "governance": _policy_set(1),
        **overrides,
    }
    canonical = json.dumps(body, sort_keys=True).encode()
    body["etag"] = hashlib.sha256(canonical).hexdigest()[:32]
    return body


# -- validating a reply (pure) ------------------------------------------------------------------


def test_a_reply_becomes_the_instance_and_collector_settings() -> None:
    config = parse_remote_config(document(), LOCAL, "orders")
    assert (config.instance.host, config.instance.port, config.instance.user) == (
        "10.0.0.12",
        3306,
        "cdc",
    )
    assert config.instance.password.get_secret_value() == PASSWORD
    assert config.instance.replica_server_id == 777  # local: the admin does not hold it
    assert config.collector.include == [r"shop_\d+\..*"] and config.collector.exclude == []
    assert config.collector.start == "0-1-100"
    assert config.collector.max_rows_per_transaction == 321  # the rest stays local
    assert config.version == 1 and config.etag == document()["etag"]


def test_an_instance_missing_from_the_file_gets_the_default_replica_id() -> None:
    config = parse_remote_config(document(), LOCAL, "payments")
    assert config.instance.name == "payments" and config.instance.replica_server_id == 4101


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"include": ["shop_(\\d+"]}, "config field 'include' is invalid"),
        ({"port": 0}, "config field 'port' is invalid"),
        ({"gtid_start": "yesterday"}, "config field 'start' is invalid"),
        ({"version": "two"}, "malformed 'version'"),
        ({"governance": ["not", "a", "set"]}, "'governance' is not an object"),
    ],
)
def test_an_invalid_reply_is_refused_with_one_sentence(
    overrides: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_remote_config(document(**overrides), LOCAL, "orders")
    assert expected in str(refused.value)
    assert PASSWORD not in str(refused.value)


def test_a_reply_without_a_field_names_it() -> None:
    body = document()
    del body["host"]
    with pytest.raises(ConfigError, match="lacks 'host'"):
        parse_remote_config(body, LOCAL, "orders")


# -- what a change means (pure) -----------------------------------------------------------------


def _diff(**overrides: Any) -> tuple[tuple[str, ...], bool]:
    old = parse_remote_config(document(1), LOCAL, "orders")
    new = parse_remote_config(document(2, **overrides), LOCAL, "orders")
    diff = diff_configs(old, new)
    return diff.changed, diff.needs_switch


def test_filters_connection_and_password_changes_switch_the_reading() -> None:
    assert _diff(include=[r"shop_\d+\..*", r"crm\..*"]) == (("include/exclude filters",), True)
    assert _diff(exclude=[r"shop_\d+\.tmp_.*"]) == (("include/exclude filters",), True)
    assert _diff(host="10.0.0.13") == (("connection",), True)
    assert _diff(password="Another-Secret-1") == (("password",), True)


def test_other_changes_need_no_switch() -> None:
    assert _diff() == ((), False)  # only the version moved (e.g. a table mirror changed)
    assert _diff(gtid_start="0-1-200") == (("GTID start",), False)
    assert _diff(shard_rules=[{"schema_pattern": "^(?P<db>.+?)(_s\\d+)?$"}]) == (
        ("shard rules",),
        False,
    )
    assert _diff(governance=_policy_set(2, "hash")) == (("policy set",), False)
    assert _diff(topic="cdc.binlog.other") == (("topic",), False)
    assert _diff(watermark_heartbeat_s=30) == (("watermark heartbeat period",), False)


def test_the_instance_s_heartbeat_period_overrides_the_file_s() -> None:
    assert parse_remote_config(document(1), LOCAL, "orders").collector.watermark_heartbeat_s == 10
    assert (
        parse_remote_config(
            document(1, watermark_heartbeat_s=None), LOCAL, "orders"
        ).collector.watermark_heartbeat_s
        == 10
    )
    remote = parse_remote_config(document(1, watermark_heartbeat_s=2.5), LOCAL, "orders")
    assert remote.collector.watermark_heartbeat_s == 2.5
    assert remote.collector.max_rows_per_transaction == 321  # the rest stays the file's
    with pytest.raises(ConfigError, match="watermark_heartbeat_s"):
        parse_remote_config(document(1, watermark_heartbeat_s=-1), LOCAL, "orders")


def test_the_description_never_carries_the_password() -> None:
    old = parse_remote_config(document(1), LOCAL, "orders")
    new = parse_remote_config(document(2, password="Another-Secret-1"), LOCAL, "orders")
    described = diff_configs(old, new).describe()
    assert described == "password" and "Another-Secret-1" not in described


# -- the poll and the cache -----------------------------------------------------------------


class FakeAdmin:
    """Serves /api/collector-config/<instance> like the web admin: ETag, 304, 404."""

    def __init__(self) -> None:
        self.body = document()
        self.status = 200
        self.down = False
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("refused", request=request)
        if self.status != 200:
            return httpx.Response(self.status, json={"detail": "no"})
        etag = f'"{self.body["etag"]}"'
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"ETag": etag})
        return httpx.Response(200, json=self.body, headers={"ETag": etag})


def _feed(admin: FakeAdmin, cache_dir: Path, token: str = TOKEN) -> CollectorConfigFeed:
    webui = GovernanceWebUISource(url="http://admin.test", token=token)
    return CollectorConfigFeed(webui, "orders", cache_dir, httpx.MockTransport(admin.handle))


def _runtime(
    admin: FakeAdmin, cache_dir: Path, deleted: list[bool] | None = None
) -> tuple[RemoteConfigRuntime, CollectorMetrics]:
    metrics = CollectorMetrics()
    sink = deleted if deleted is not None else []
    runtime = RemoteConfigRuntime(
        _feed(admin, cache_dir), LOCAL, "orders", metrics, lambda: sink.append(True)
    )
    return runtime, metrics


def test_polls_send_the_etag_and_an_unchanged_config_is_a_304(tmp_path: Path) -> None:
    admin = FakeAdmin()
    feed = _feed(admin, tmp_path)
    first = feed.fetch()
    assert first == admin.body
    feed.accepted(first)
    assert feed.fetch() is None
    assert admin.requests[-1].headers["if-none-match"] == f'"{admin.body["etag"]}"'
    assert admin.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("status", "error", "sentence"),
    [
        (404, InstanceDeletedError, "has no instance 'orders' (deleted?)"),
        (403, ConfigError, "refused governance.webui.token (403)"),
        (502, ServiceUnavailableError, "answered 502"),
    ],
)
def test_answers_other_than_200_are_one_sentence(
    tmp_path: Path, status: int, error: type[Exception], sentence: str
) -> None:
    admin = FakeAdmin()
    admin.status = status
    with pytest.raises(error) as raised:
        _feed(admin, tmp_path).fetch()
    assert sentence in str(raised.value) and TOKEN not in str(raised.value)


def test_the_cache_is_private_and_the_password_encrypted(tmp_path: Path) -> None:
    admin = FakeAdmin()
    feed = _feed(admin, tmp_path)
    feed.accepted(admin.body)
    assert stat.S_IMODE(feed.cache_path.stat().st_mode) == 0o600
    assert PASSWORD.encode() not in feed.cache_path.read_bytes()
    assert _feed(admin, tmp_path).cached() == admin.body
    # Another token cannot read it: as if there were no cache.
    assert _feed(admin, tmp_path, token="cdc_another_token_2").cached() is None


def test_an_unreachable_admin_at_start_uses_the_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = FakeAdmin()
    _feed(admin, tmp_path).accepted(document(4))
    admin.down = True
    runtime, metrics = _runtime(admin, tmp_path)
    with caplog.at_level(logging.WARNING):
        assert runtime.start(poll=False).version == 4
        runtime.poll_once()
        runtime.poll_once()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # said once, not on every failing poll
    assert "Running on the cached config version 4" in warnings[0]
    assert metrics.config_version.labels("orders")._value.get() == 4


def test_no_admin_and_no_cache_stops_the_start(tmp_path: Path) -> None:
    admin = FakeAdmin()
    admin.down = True
    runtime, _ = _runtime(admin, tmp_path)
    with pytest.raises(ServiceUnavailableError, match="cannot start until the web admin answers"):
        runtime.start(poll=False)


def test_an_invalid_config_is_logged_once_and_the_old_one_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = FakeAdmin()
    runtime, metrics = _runtime(admin, tmp_path)
    first = runtime.start(poll=False)
    admin.body = document(2, include=["shop_(\\d+"])
    with caplog.at_level(logging.ERROR):
        assert runtime.poll_once() is None
        assert runtime.poll_once() is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "config version 2" in errors[0] and "version 1" in errors[0]
    assert runtime.latest is first
    assert metrics.errors.labels("orders", "config")._value.get() == 1


def test_a_new_config_replaces_the_latest_and_a_standby_counts_it(tmp_path: Path) -> None:
    admin = FakeAdmin()
    runtime, metrics = _runtime(admin, tmp_path)
    runtime.start(poll=False)
    assert runtime.poll_once() is None  # 304
    admin.body = document(2, include=[r"crm\..*"])
    fresh = runtime.poll_once()
    assert fresh is not None and runtime.latest is fresh and fresh.collector.include == [r"crm\..*"]
    assert metrics.config_version.labels("orders")._value.get() == 2
    assert metrics.config_reloads.labels("orders")._value.get() == 1


def test_a_deleted_instance_stops_the_process(tmp_path: Path) -> None:
    admin = FakeAdmin()
    deleted: list[bool] = []
    runtime, _ = _runtime(admin, tmp_path, deleted)
    runtime.start(poll=False)
    admin.status = 404
    runtime.poll_once()
    assert deleted == [True]
    assert runtime.failure is not None and "deleted?" in str(runtime.failure)


def test_one_reply_serves_the_policy_set_too(tmp_path: Path) -> None:
    admin = FakeAdmin()
    runtime, _ = _runtime(admin, tmp_path)
    runtime.start(poll=False)
    governance = runtime.start_governance()
    assert governance is not None and governance.version == 1
    requests = len(admin.requests)
    admin.body = document(2, governance=_policy_set(2, "hash"))
    runtime.poll_once()
    assert len(admin.requests) == requests + 1  # one request for both
    assert governance.at_boundary() is not None and governance.version == 2


def test_the_web_admin_source_needs_a_collector_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs governance\.webui\.token"):
        CollectorConfigFeed(GovernanceWebUISource(url="http://admin.test"), "orders", tmp_path)


def test_the_file_stays_the_default_source() -> None:
    assert CollectorSettings().config_source == "file"
