"""The compiled policy set on SimpleBinlog messages: pass, mask, hash, drop, standardise."""

from __future__ import annotations

import hashlib
import hmac
import random
from typing import Any

import pytest

from governance import GovernanceSettings, PolicyAction
from governance.detectors import Detection
from governance.policy import (
    Governance,
    KeyColumnDroppedError,
    compile_governance,
)
from governance.transforms import TransformFailedError, mask_text
from simple_binlog.errors import ConfigError
from simple_binlog.message import BinlogPosition, EventType, SimpleBinlog, Source, decode_message
from simple_binlog.routing import ShardRouter, ShardRule
from tests.unit.governance.planted import VALID

SALT = "a-test-salt-of-some-length"
TYPES = {
    "id": "bigint(20) unsigned",
    "phone": "varchar(32)",
    "email": "varchar(64)",
    "id_no": "char(18)",
    "note": "text",
    "level": "int(11)",
    "status": "enum('NEW','PAID')",
}


def _governance(**fields: Any) -> Governance:
    settings = GovernanceSettings.model_validate({"enabled": True, "hash_salt": SALT, **fields})
    governance = compile_governance(settings, ShardRouter([ShardRule()]), "local")
    assert governance is not None
    return governance


def _message(
    content: dict[str, Any],
    before: dict[str, Any] | None = None,
    event: EventType = EventType.INSERT,
    offset: int = 1_795_333_510_000_001,
) -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=1_795_333_510_000,
        event_type=event,
        schema_name="shop_03",
        table_name="users_01",
        source=Source.BINLOG,
        content=content,
        column_types=TYPES,
        primary_keys=("id",),
        before_content=before,
        position=BinlogPosition(1, "mariadb-bin.000004", 8407, 0, "0-1-77"),
    )


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "7",
        "phone": "13812345678",
        "email": "ann.lee@example.com",
        "id_no": "11010519491231002X",
        "note": "call +86 139-1234-5678 from 10.1.2.3",
        "level": 1,
        "status": "NEW",
    }
    row.update(overrides)
    return row


def _mac(value: str) -> str:
    return hmac.new(SALT.encode(), value.encode(), hashlib.sha256).hexdigest()


def test_governance_off_compiles_to_nothing() -> None:
    assert compile_governance(GovernanceSettings(), ShardRouter([ShardRule()]), "x") is None


def test_pass_leaves_the_message_as_it_is_and_records_detections() -> None:
    governance = _governance()
    message = _message(_row())
    assert governance.apply(message) is message
    records = {(r.column, r.detector): r for r in governance.batch.drain()}
    assert set(records) == {
        ("phone", "cn_mobile"),
        ("email", "email"),
        ("id_no", "prc_id"),
        ("note", "cn_mobile"),
        ("note", "ipv4"),
    }
    record = records[("note", "ipv4")]
    assert (record.instance, record.logical_table, record.schema_name) == (
        "local",
        "shop_users",
        "shop_03",
    )
    assert (record.count, record.action, record.position, record.gtid) == (
        1,
        PolicyAction.PASS,
        "mariadb-bin.000004:8407",
        "0-1-77",
    )
    assert len(governance.batch) == 0  # drained


def test_detections_are_aggregated_per_column_and_detector() -> None:
    governance = _governance()
    for index in range(5):
        governance.apply(_message(_row(), offset=1_795_333_510_000_001 + index))
    records = {(r.column, r.detector): r for r in governance.batch.drain()}
    assert records[("phone", "cn_mobile")].count == 5
    assert records[("phone", "cn_mobile")].first_offset == 1_795_333_510_000_001
    assert records[("phone", "cn_mobile")].last_offset == 1_795_333_510_000_005


def test_no_record_carries_the_value() -> None:
    governance = _governance()
    governance.apply(_message(_row()))
    encoded = b"".join(record.encode() for record in governance.batch.drain())
    for value in ("13812345678", "ann.lee", "11010519491231002X", "10.1.2.3"):
        assert value.encode() not in encoded


def test_mask_hash_drop_in_content_and_before_content() -> None:
    governance = _governance(
        policies=[
            {"table": "shop_users", "column": "phone", "action": "mask"},
            {"table": "shop_users", "column": "note", "action": "mask"},
            {"table": "shop_users", "column": "email", "action": "hash"},
            {"table": "shop_users", "column": "id_no", "action": "drop"},
        ]
    )
    before = _row(phone="13900001111", email="old@example.com")
    out = governance.apply(_message(_row(), before, EventType.UPDATE))
    assert out.content["phone"] == "*******5678"
    assert out.before_content is not None
    assert out.before_content["phone"] == "*******1111"
    assert out.content["note"] == "call +** ***-****-5678 from **.*.2.3"  # half at most
    assert out.content["email"] == _mac("ann.lee@example.com")
    assert out.before_content["email"] == _mac("old@example.com")
    assert "id_no" not in out.content and "id_no" not in out.before_content
    assert "id_no" not in out.column_types
    assert out.column_types["email"] == "char(64)"
    assert out.column_types["phone"] == "varchar(32)"  # masking keeps the length
    # The published message still satisfies the contract.
    assert decode_message(out.encode()).content == out.content
    encoded = out.encode()
    for plaintext in ("13812345678", "13900001111", "ann.lee", "11010519491231002X", "139-1234"):
        assert plaintext.encode() not in encoded


def test_a_delete_before_image_is_masked_too() -> None:
    governance = _governance(
        policies=[{"table": "shop_users", "column": "*", "action": "mask"}],
    )
    out = governance.apply(_message(_row(level=13812345678), event=EventType.DELETE))
    assert "13812345678" not in out.encode().decode().replace('"level":13812345678', "")
    assert out.content["status"] == "NEW"  # nothing detected: unchanged
    assert out.content["id"] == "7"
    # A table-wide mask leaves number columns as they are (a column's own mask does not).
    assert out.content["level"] == 13812345678
    assert out.column_types == TYPES


def test_unchanged_before_values_are_counted_once() -> None:
    governance = _governance(
        policies=[{"table": "shop_users", "column": "phone", "action": "mask"}]
    )
    governance.apply(_message(_row(), _row(note="x"), EventType.UPDATE))
    records = {(r.column, r.detector): r.count for r in governance.batch.drain()}
    assert records[("phone", "cn_mobile")] == 1
    assert records[("note", "cn_mobile")] == 1


def test_hash_is_deterministic_and_keys_stay_unique() -> None:
    governance = _governance(policies=[{"table": "shop_users", "column": "id", "action": "hash"}])
    hashed = [governance.apply(_message(_row(id=str(n)))).content["id"] for n in range(200)]
    again = [governance.apply(_message(_row(id=str(n)))).content["id"] for n in range(200)]
    assert hashed == again
    assert len(set(hashed)) == 200
    assert hashed[7] == _mac("7")


def test_another_salt_hashes_differently() -> None:
    one = _governance(policies=[{"table": "shop_users", "column": "email", "action": "hash"}])
    other = compile_governance(
        GovernanceSettings(
            enabled=True,
            hash_salt="another-salt-entirely",  # type: ignore[arg-type]
            policies=[{"table": "shop_users", "column": "email", "action": "hash"}],  # type: ignore[list-item]
        ),
        ShardRouter([ShardRule()]),
        "local",
    )
    assert other is not None
    message = _message(_row())
    assert one.apply(message).content["email"] != other.apply(message).content["email"]


def test_dropping_a_primary_key_column_refuses_the_row() -> None:
    governance = _governance(policies=[{"table": "shop_users", "column": "id", "action": "drop"}])
    with pytest.raises(KeyColumnDroppedError, match="primary-key column") as caught:
        governance.apply(_message(_row()))
    assert isinstance(caught.value, ConfigError)
    assert "\n" not in str(caught.value)


def test_the_table_wide_policy_and_the_default_action() -> None:
    governance = _governance(
        default_action="mask",
        policies=[
            {"table": "other_table", "column": "*", "action": "pass"},
            {"table": "shop_users", "column": "*", "action": "hash"},
            {"table": "shop_users", "column": "status", "action": "pass"},
        ],
    )
    out = governance.apply(_message(_row()))
    assert out.content["phone"] == _mac("13812345678")
    assert out.content["status"] == "NEW"
    assert out.content["level"] == _mac("1")
    # Another logical table without policies takes the default action.
    message = _message(_row())
    elsewhere = SimpleBinlog(**{**_fields(message), "schema_name": "crm", "table_name": "leads"})
    assert governance.apply(elsewhere).content["phone"] == "*******5678"


def _fields(message: SimpleBinlog) -> dict[str, Any]:
    return {name: getattr(message, name) for name in SimpleBinlog.__dataclass_fields__}


def test_mask_of_a_non_text_column_publishes_text() -> None:
    governance = _governance(
        policies=[{"table": "shop_users", "column": "level", "action": "mask"}]
    )
    out = governance.apply(_message(_row(level=13812345678)))
    assert out.content["level"] == "*******5678"
    assert out.column_types["level"] == "varchar(80)"
    assert governance.apply(_message(_row(level=3))).content["level"] == "3"


def test_lookup_runs_after_detection_and_before_hashing() -> None:
    governance = _governance(
        lookup_tables=[{"name": "ids", "entries": {"13812345678": "U-1", "5": "500"}}],
        standardise=[
            {"table": "shop_users", "column": "phone", "kind": "lookup", "lookup": "ids"},
            {
                "table": "shop_users",
                "column": "level",
                "kind": "lookup",
                "lookup": "ids",
                "on_missing": "null",
            },
        ],
        policies=[{"table": "shop_users", "column": "phone", "action": "hash"}],
    )
    out = governance.apply(_message(_row(level=5)))
    assert out.content["phone"] == _mac("U-1")  # the canonical value is hashed
    assert out.content["level"] == 500  # an integer column stays an integer
    assert governance.apply(_message(_row(level=6))).content["level"] is None
    detectors = {(r.column, r.detector) for r in governance.batch.drain()}
    assert ("phone", "cn_mobile") in detectors  # the raw value was scanned


def test_a_lookup_giving_text_for_an_integer_is_one_sentence() -> None:
    governance = _governance(
        lookup_tables=[{"name": "levels", "entries": {"1": "gold"}}],
        standardise=[
            {"table": "shop_users", "column": "level", "kind": "lookup", "lookup": "levels"}
        ],
    )
    with pytest.raises(TransformFailedError, match="not an integer"):
        governance.apply(_message(_row()))


def test_recrypt_plugin() -> None:
    governance = _governance(
        standardise=[
            {
                "table": "shop_users",
                "column": "note",
                "kind": "recrypt",
                "function": "tests.unit.governance.plugins:old_to_new",
            }
        ],
        allowed_functions=["tests.unit.governance.plugins:old_to_new"],
    )
    out = governance.apply(_message(_row(note="old:abc")))
    assert out.content["note"] == "new:cba"
    assert governance.apply(_message(_row(note=None))).content["note"] is None


@pytest.mark.parametrize(
    ("function", "sentence"),
    [
        ("tests.unit.governance.plugins:broken", "failed on a value of shop_users.note"),
        ("tests.unit.governance.plugins:returns_list", "returned a list"),
    ],
)
def test_a_failing_recrypt_plugin_is_one_sentence(function: str, sentence: str) -> None:
    governance = _governance(
        standardise=[
            {"table": "shop_users", "column": "note", "kind": "recrypt", "function": function}
        ],
        allowed_functions=[function],
    )
    with pytest.raises(TransformFailedError, match=sentence) as caught:
        governance.apply(_message(_row(note="old:secret-value")))
    assert "secret-value" not in str(caught.value)


def test_a_recrypt_plugin_that_cannot_be_imported_stops_compiling() -> None:
    with pytest.raises(ConfigError, match="cannot be imported"):
        _governance(
            standardise=[
                {
                    "table": "shop_users",
                    "column": "note",
                    "kind": "recrypt",
                    "function": "no_such_module.x:y",
                }
            ],
            allowed_functions=["no_such_module.x:y"],
        )


def test_a_received_set_that_hashes_without_a_local_salt_is_refused() -> None:
    local = GovernanceSettings()
    received = GovernanceSettings(
        enabled=True,
        hash_salt="stand-in-salt-of-the-admin",  # type: ignore[arg-type]
        policies=[{"table": "t", "column": "c", "action": "hash"}],  # type: ignore[list-item]
    )
    with pytest.raises(ConfigError, match="hash_salt is not set"):
        compile_governance(local.policy_set(received), ShardRouter([ShardRule()]), "x")


def test_a_schema_change_gets_a_new_plan() -> None:
    governance = _governance(
        policies=[{"table": "shop_users", "column": "phone", "action": "drop"}]
    )
    governance.apply(_message(_row()))
    wider = {**TYPES, "extra": "varchar(20)"}
    message = SimpleBinlog(
        **{**_fields(_message(_row(extra="13812345678"))), "column_types": wider}
    )
    out = governance.apply(message)
    assert out.column_types == {k: v for k, v in wider.items() if k != "phone"}
    assert out.content["extra"] == "13812345678"  # pass: recorded only


def test_random_rows_with_planted_values_leak_nothing_under_mask() -> None:
    rng = random.Random(11)
    governance = _governance(policies=[{"table": "shop_users", "column": "*", "action": "mask"}])
    for _ in range(300):
        planted = [make(rng) for make in VALID.values()]
        note = " | ".join(planted)
        out = governance.apply(_message(_row(note=note, phone=planted[2])))
        text = out.encode().decode()
        for value in planted:
            assert value not in text


def test_mask_text_keeps_separators_and_at_most_half() -> None:
    assert mask_text("ab 1234 cd", [Detection("x", 3, 7)], 4) == "ab **34 cd"
    assert mask_text("a@b.cn", [Detection("email", 0, 6)], 4) == "a@b.cn"
    assert mask_text("ann@b.cn", [Detection("email", 0, 8)], 4) == "a**@b.cn"
