"""The governance models: config validation in one sentence, the detection record's JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from cdc_platform.config import load_settings
from governance import (
    DetectionRecord,
    GovernanceSettings,
    PolicyAction,
    describe_governance_error,
)
from simple_binlog.errors import ConfigError, ContractError


def _load(tmp_path: Path, config: dict[str, object]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert "\n" not in message and message.endswith(".")
    return message


@pytest.mark.parametrize(
    ("governance", "expected"),
    [
        ({"default_action": "scramble"}, "config field 'governance.default_action' is invalid"),
        ({"detectors": [{"name": "x", "pattern": "("}]}, "is not a valid regular expression"),
        ({"detectors": [{"name": "x", "pattern": "a*"}]}, "matches the empty string"),
        ({"detectors": [{"name": "email", "pattern": "@"}]}, "built-in detector's name"),
        ({"detectors": [{"name": "x", "pattern": "x", "validator": "nope"}]}, "neither a built-in"),
        ({"builtin_detectors": ["ssn"]}, "'ssn' is not a built-in detector"),
        (
            {"enabled": True, "policies": [{"table": "t", "column": "c", "action": "hash"}]},
            "a policy hashes values but 'hash_salt' is not set",
        ),
        ({"hash_salt": "short"}, "'hash_salt' must be at least 16 characters"),
        (
            {
                "policies": [
                    {"table": "t", "column": "c", "action": "mask"},
                    {"table": "t", "column": "c", "action": "hash"},
                ]
            },
            "column t.c has two policies",
        ),
        (
            {"standardise": [{"table": "t", "column": "c", "kind": "lookup", "lookup": "ids"}]},
            "names the unknown lookup table 'ids'",
        ),
        (
            {"standardise": [{"table": "t", "column": "c", "kind": "recrypt"}]},
            "needs 'function'",
        ),
        (
            {
                "standardise": [
                    {"table": "t", "column": "c", "kind": "recrypt", "function": "not a path"}
                ]
            },
            "is not a dotted path",
        ),
        ({"enabled": True, "source": "webui"}, "needs 'webui.token'"),
        ({"webui": {"url": "ftp://x"}}, "must be an http:// or https:// URL"),
        (
            {"policies": [{"table": "Bad-Name", "column": "c", "action": "mask"}]},
            "is not a logical table name",
        ),
    ],
)
def test_bad_governance_config_is_one_sentence(
    tmp_path: Path, governance: dict[str, object], expected: str
) -> None:
    assert expected in _load(tmp_path, {"governance": governance})


def test_drop_on_a_configured_key_column_is_refused(tmp_path: Path) -> None:
    message = _load(
        tmp_path,
        {
            "tables": [{"db_prefix": "shop", "table_prefix": "users", "key": ["user_id"]}],
            "governance": {
                "policies": [{"table": "shop_users", "column": "user_id", "action": "drop"}]
            },
        },
    )
    assert "drops shop_users.user_id, a key column" in message


def test_the_salt_is_never_shown(tmp_path: Path) -> None:
    settings_path = tmp_path / "c.yaml"
    settings_path.write_text(
        yaml.safe_dump({"governance": {"enabled": True, "hash_salt": "very-secret-salt-1234"}})
    )
    settings = load_settings(settings_path)
    assert "very-secret-salt-1234" not in repr(settings)
    assert "very-secret-salt-1234" not in str(settings.governance.published_policy_set())


def test_the_published_set_round_trips_without_local_fields() -> None:
    local = GovernanceSettings.model_validate(
        {
            "enabled": True,
            "version": 3,
            "hash_salt": "local-salt-0123456789",
            "policies": [{"table": "t", "column": "c", "action": "hash"}],
            "lookup_tables": [{"name": "ids", "entries": {"1": "2"}}],
        }
    )
    published = local.published_policy_set()
    assert {"source", "webui", "hash_salt"}.isdisjoint(published)
    received = GovernanceSettings.from_published(published)
    merged = GovernanceSettings(hash_salt="mine-0123456789abc").policy_set(  # type: ignore[arg-type]
        received
    )
    assert merged.policies == local.policies and merged.version == 3
    assert merged.hash_salt is not None
    assert merged.hash_salt.get_secret_value() == "mine-0123456789abc"


def test_describe_governance_error() -> None:
    with pytest.raises(ValidationError) as caught:
        GovernanceSettings.model_validate({"policies": [{"table": "t", "column": "c"}]})
    assert describe_governance_error(caught.value) == (
        "governance field 'policies.0.action' is invalid: Field required."
    )


def _record() -> DetectionRecord:
    return DetectionRecord(
        instance="local",
        logical_table="shop_users",
        schema_name="shop_01",
        table_name="users_02",
        column="phone",
        detector="cn_mobile",
        count=3,
        first_offset=1_795_333_510_000_001,
        last_offset=1_795_333_510_000_009,
        detected_at_ms=1_795_333_510_000,
        action=PolicyAction.MASK,
        position="mariadb-bin.000004:8407",
        gtid="0-1-77",
    )


def test_detection_record_round_trip() -> None:
    record = _record()
    assert DetectionRecord.decode(record.encode()) == record
    assert record.to_json()["logicalTable"] == "shop_users"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"nope", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"instance": "x"}', "lacks the field 'logicalTable'"),
    ],
)
def test_malformed_detection_records_are_one_sentence(payload: bytes, expected: str) -> None:
    with pytest.raises(ContractError, match=expected):
        DetectionRecord.decode(payload)


def test_a_detection_record_with_a_bad_count_is_refused() -> None:
    document = _record().to_json()
    document["count"] = 0
    with pytest.raises(ContractError, match="field 'count' is invalid"):
        DetectionRecord.from_json(document)
