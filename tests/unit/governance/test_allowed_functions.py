"""A policy set names code only through the fixed registry and this host's allow-list.

Written as an attacker with the web admin's admin role would try it: the policy set a
collector receives names ``os:system`` or a module whose import is the attack.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from governance import GovernanceSettings
from governance.policy import compile_governance
from simple_binlog.errors import ConfigError
from simple_binlog.message import EventType, SimpleBinlog, Source
from simple_binlog.routing import ShardRouter, ShardRule

ATTACKER = "tests.unit.governance.attacker"
ALLOWED = "tests.unit.governance.plugins:old_to_new"


def _received(**fields: Any) -> GovernanceSettings:
    return GovernanceSettings.from_published({"enabled": True, "version": 3, **fields})


def _compile(received: GovernanceSettings, *allowed: str) -> Any:
    local = GovernanceSettings.model_validate(
        {"allowed_functions": list(allowed)} if allowed else {}
    )
    return compile_governance(local.policy_set(received), ShardRouter([ShardRule()]), "x")


def _validator(name: str) -> GovernanceSettings:
    return _received(detectors=[{"name": "pwn", "pattern": "x", "validator": name}])


def _recrypt(name: str) -> GovernanceSettings:
    return _received(
        standardise=[{"table": "s_t", "column": "c", "kind": "recrypt", "function": name}]
    )


@pytest.fixture()
def no_attack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDC_MIRROR_ATTACKER_IMPORTED", raising=False)
    monkeypatch.delitem(sys.modules, ATTACKER, raising=False)


@pytest.mark.parametrize("received", [_validator("os:system"), _recrypt("os:system")])
def test_os_system_in_a_received_set_is_refused(received: GovernanceSettings) -> None:
    with pytest.raises(ConfigError, match=r"governance\.allowed_functions") as caught:
        _compile(received)
    assert "'os:system'" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("build", [_validator, _recrypt])
def test_an_attacker_module_is_never_imported(build: Any, no_attack: None) -> None:
    with pytest.raises(ConfigError, match="not allowed"):
        _compile(build(f"{ATTACKER}:run"))
    assert ATTACKER not in sys.modules
    assert "CDC_MIRROR_ATTACKER_IMPORTED" not in os.environ


def test_a_function_allowed_by_the_other_host_is_still_refused_here() -> None:
    # The allow-list of the receiving process decides, not the sender's.
    with pytest.raises(ConfigError, match="not allowed"):
        _compile(_recrypt(ALLOWED), "tests.unit.governance.plugins:is_order_code")


def test_a_function_this_host_allows_runs() -> None:
    governance = _compile(_recrypt(ALLOWED), ALLOWED)
    message = SimpleBinlog(
        source=Source.BINLOG,
        binlog_offset=1,
        schema_name="s",
        table_name="t",
        event_type=EventType.INSERT,
        execute_time=1,
        primary_keys=("id",),
        column_types={"id": "int(11)", "c": "varchar(20)"},
        content={"id": 1, "c": "old:abc"},
    )
    assert governance.apply(message).content["c"] == "new:cba"


def test_a_received_set_cannot_widen_the_allow_list() -> None:
    with pytest.raises(ValidationError):
        _received(allowed_functions=["os:system"])


def test_the_allow_list_is_not_published() -> None:
    local = GovernanceSettings(allowed_functions=[ALLOWED])  # type: ignore[call-arg]
    assert "allowed_functions" not in local.published_policy_set()


def test_the_allow_list_names_functions_only() -> None:
    with pytest.raises(ValidationError, match="not a dotted path"):
        GovernanceSettings(allowed_functions=["os.system"])  # type: ignore[call-arg]
