"""Where the policy set comes from: the web admin (ETag poll, cache), the config file, and
the swap at a transaction boundary. The web admin is httpx's own MockTransport here; the
integration tests poll the real admin."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from governance import GovernanceSettings
from governance.policy import Governance, compile_governance
from governance.source import (
    ConfigFilePolicySource,
    GovernanceRuntime,
    StaticPolicySource,
    WebUIPolicySource,
)
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from simple_binlog.message import EventType, SimpleBinlog, Source
from simple_binlog.routing import ShardRouter, ShardRule

LOCAL = GovernanceSettings.model_validate(
    {
        "enabled": True,
        "source": "webui",
        "hash_salt": "the-collector-salt-123",
        "webui": {"url": "http://admin.test", "token": "cdc_collector_token"},
    }
)


def _published(version: int, action: str = "mask") -> dict[str, Any]:
    return GovernanceSettings.model_validate(
        {
            "enabled": True,
            "version": version,
            "hash_salt": "stand-in-salt-never-used",
            "policies": [{"table": "shop_users", "column": "phone", "action": action}],
        }
    ).published_policy_set()


class FakeAdmin:
    """Serves /api/collector-config/<instance> like the web admin: ETag and 304."""

    def __init__(self) -> None:
        self.version = 1
        self.action = "mask"
        self.down = False
        self.status = 200
        self.requests: list[httpx.Request] = []

    def body(self) -> dict[str, Any]:
        return {
            "instance": "local",
            "version": self.version,
            "governance": _published(self.version, self.action),
        }

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.status != 200:
            return httpx.Response(self.status, json={"detail": "no"})
        etag = f"etag-{self.version}-{self.action}"
        if request.headers.get("if-none-match") == f'"{etag}"':
            return httpx.Response(304)
        return httpx.Response(200, content=orjson.dumps(self.body()), headers={"ETag": f'"{etag}"'})


def _source(admin: FakeAdmin, tmp_path: Path) -> WebUIPolicySource:
    return WebUIPolicySource(LOCAL, "local", tmp_path, transport=httpx.MockTransport(admin.handle))


def test_first_fetch_then_304_then_a_new_version(tmp_path: Path) -> None:
    admin = FakeAdmin()
    source = _source(admin, tmp_path)
    first = source.initial()
    assert first.version == 1 and first.policies[0].action == "mask"
    assert first.hash_salt is not None  # the local salt, not the admin's
    assert first.hash_salt.get_secret_value() == "the-collector-salt-123"
    assert admin.requests[0].url.path == "/api/collector-config/local"
    assert admin.requests[0].headers["authorization"] == "Bearer cdc_collector_token"
    assert source.poll() is None  # 304
    assert admin.requests[1].headers["if-none-match"] == '"etag-1-mask"'
    admin.version, admin.action = 2, "hash"
    second = source.poll()
    assert second is not None and second.version == 2 and second.policies[0].action == "hash"


def test_admin_down_at_start_uses_the_cached_set(tmp_path: Path, caplog: Any) -> None:
    admin = FakeAdmin()
    _source(admin, tmp_path).initial()  # caches version 1
    cache = tmp_path / "governance-local.json"
    assert cache.stat().st_mode & 0o777 == 0o600
    assert b"the-collector-salt-123" not in cache.read_bytes()
    admin.down = True
    with caplog.at_level(logging.WARNING):
        cached = _source(admin, tmp_path).initial()
    assert cached.version == 1 and cached.policies[0].action == "mask"
    assert "cached policy set version 1" in caplog.text


def test_admin_down_at_start_without_a_cache_is_one_sentence(tmp_path: Path) -> None:
    admin = FakeAdmin()
    admin.down = True
    with pytest.raises(ServiceUnavailableError, match="nothing is published") as caught:
        _source(admin, tmp_path).initial()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "sentence"),
    [(401, "refused"), (403, "refused"), (404, "does not know the instance")],
)
def test_refusals_are_config_errors(tmp_path: Path, status: int, sentence: str) -> None:
    admin = FakeAdmin()
    admin.status = status
    with pytest.raises(ConfigError, match=sentence):
        _source(admin, tmp_path).initial()


def test_an_admin_without_governance_is_refused(tmp_path: Path) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"instance": "local", "governance": {}})

    source = WebUIPolicySource(LOCAL, "local", tmp_path, transport=httpx.MockTransport(handle))
    with pytest.raises(ServiceUnavailableError, match="serves no governance policy set"):
        source.initial()


def test_poll_failures_keep_the_set_and_are_logged_once(tmp_path: Path, caplog: Any) -> None:
    admin = FakeAdmin()
    source = _source(admin, tmp_path)
    source.initial()
    admin.down = True
    with caplog.at_level(logging.WARNING):
        assert source.poll() is None
        assert source.poll() is None
    assert caplog.text.count("cannot be reached") == 1


def _compiler(settings: GovernanceSettings) -> Governance | None:
    return compile_governance(settings, ShardRouter([ShardRule()]), "local")


def _phone_message() -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=1_795_333_510_000_001,
        execute_time=1_795_333_510_000,
        event_type=EventType.INSERT,
        schema_name="shop_01",
        table_name="users_01",
        source=Source.BINLOG,
        content={"id": 1, "phone": "13812345678"},
        column_types={"id": "int(11)", "phone": "varchar(20)"},
        primary_keys=("id",),
    )


def test_runtime_swaps_only_at_a_boundary_and_keeps_pending_detections(tmp_path: Path) -> None:
    admin = FakeAdmin()
    runtime = GovernanceRuntime(_source(admin, tmp_path), _compiler)
    current = runtime.start(poll=False)
    assert current is not None and runtime.version == 1
    current.apply(_phone_message())
    admin.version, admin.action = 2, "hash"
    fresh = runtime._source.poll()  # what the polling thread does
    assert fresh is not None
    runtime.offer(fresh)
    assert runtime.current is current  # not before the boundary
    swapped = runtime.at_boundary()
    assert swapped is not None and swapped is not current and runtime.version == 2
    assert len(swapped.batch) == 1  # the detection of the open transaction carried over
    assert swapped.apply(_phone_message()).column_types["phone"] == "char(64)"
    runtime.close()


def test_a_set_that_cannot_be_compiled_leaves_the_old_one(caplog: Any) -> None:
    runtime = GovernanceRuntime(StaticPolicySource(LOCAL), _compiler)
    runtime.start(poll=False)
    broken = LOCAL.policy_set(
        GovernanceSettings.from_published(
            {
                "enabled": True,
                "version": 5,
                "standardise": [
                    {"table": "t", "column": "c", "kind": "recrypt", "function": "nope.x:y"}
                ],
            }
        )
    )
    with caplog.at_level(logging.ERROR):
        runtime.offer(broken)
    assert runtime.at_boundary() is runtime.current and runtime.version == 0
    assert "version 5 cannot be applied" in caplog.text


def test_the_polling_thread_delivers_a_new_set(tmp_path: Path) -> None:
    admin = FakeAdmin()
    runtime = GovernanceRuntime(_source(admin, tmp_path), _compiler, poll_interval_s=0.01)
    runtime.start()
    admin.version = 3
    deadline = time.monotonic() + 10
    while runtime.at_boundary() is not None and runtime.version != 3:
        assert time.monotonic() < deadline, "the new set never arrived"
        time.sleep(0.01)
    runtime.close()
    assert runtime.version == 3


def test_config_file_changes_are_picked_up(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "config.yaml"
    config: dict[str, Any] = {"governance": {"enabled": True, "version": 1}}
    path.write_text(yaml.safe_dump(config))
    source = ConfigFilePolicySource(GovernanceSettings.model_validate(config["governance"]), path)
    assert source.poll() is None  # unchanged
    config["governance"]["default_action"] = "mask"
    config["governance"]["version"] = 2
    path.write_text(yaml.safe_dump(config))
    os.utime(path, (time.time() + 5, time.time() + 5))
    fresh = source.poll()
    assert fresh is not None and fresh.default_action == "mask" and fresh.version == 2
    path.write_text("governance: {default_action: scramble}\n")
    os.utime(path, (time.time() + 10, time.time() + 10))
    with caplog.at_level(logging.ERROR):
        assert source.poll() is None
    assert "the policies in force stay" in caplog.text
