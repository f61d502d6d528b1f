"""Detectors: every valid planted value is found, near-misses are not (property tests)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governance import BUILTIN_DETECTORS, DetectorRule
from governance.detectors import (
    DetectorSet,
    email_valid,
    ipv6_valid,
    luhn_valid,
    prc_id_check_character,
    prc_id_valid,
)
from governance.functions import FunctionRegistry
from simple_binlog.errors import ConfigError
from tests.unit.governance.planted import VALID, near_misses

ALL = DetectorSet.build(list(BUILTIN_DETECTORS), [])

# Text around a planted value: letters and punctuation that cannot extend a match.
_FILLER = st.text(alphabet="abcdefghijklmnopqrstuvw ,;()[]\u4e2d\u6587", max_size=30)


def _found(text: str) -> list[tuple[str, str]]:
    return [(d.detector, text[d.start : d.end]) for d in ALL.scan(text)]


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(sorted(VALID)), left=_FILLER, right=_FILLER
)
def test_every_valid_planted_value_is_found_in_any_text(
    seed: int, kind: str, left: str, right: str
) -> None:
    value = VALID[kind](random.Random(seed))
    # A space and a comma around it: letters would lengthen an e-mail or IPv6 address.
    assert _found(f"{left} {value}, {right}") == [(kind, value)]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), left=_FILLER, right=_FILLER)
def test_near_misses_are_not_detections(seed: int, left: str, right: str) -> None:
    for miss in near_misses(random.Random(seed)):
        assert _found(f"{left} {miss}, {right}") == [], miss


@settings(max_examples=200, deadline=None)
@given(digits=st.text(alphabet="0123456789", min_size=20, max_size=60))
def test_digits_inside_a_longer_run_are_not_detections(digits: str) -> None:
    # 20+ digits in a row: too long for a card (19), an ID (18) or a phone (11).
    assert [d for d in ALL.scan(digits) if d.detector != "ipv4"] == []


def test_several_values_in_one_text_are_each_found() -> None:
    rng = random.Random(7)
    planted = {kind: make(rng) for kind, make in VALID.items()}
    text = " / ".join(planted[kind] for kind in BUILTIN_DETECTORS)
    assert _found(text) == [(kind, planted[kind]) for kind in BUILTIN_DETECTORS]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("+86 138-1234-5678", [("cn_mobile", "+86 138-1234-5678")]),
        ("tel:13912345678;", [("cn_mobile", "13912345678")]),
        ("4111 1111 1111 1111", [("bank_card", "4111 1111 1111 1111")]),
        ("4111-1111-1111-1111", [("bank_card", "4111-1111-1111-1111")]),
        ("mail Ann.Lee+cdc@sub.example.co.uk.", [("email", "Ann.Lee+cdc@sub.example.co.uk")]),
        ("from 192.168.1.20.", [("ipv4", "192.168.1.20")]),
        ("peer [2001:db8::8a2e:370:7334]", [("ipv6", "2001:db8::8a2e:370:7334")]),
        ("fe80::1", [("ipv6", "fe80::1")]),
    ],
)
def test_formats_people_write(text: str, expected: list[tuple[str, str]]) -> None:
    assert _found(text) == expected


def test_an_id_that_also_passes_luhn_counts_as_an_id_only() -> None:
    rng = random.Random(1)
    while True:
        first17 = f"440305{rng.randrange(19500101, 19991231):08d}{rng.randrange(1000):03d}"
        value = first17 + prc_id_check_character(first17)
        if prc_id_valid(value) and value[-1] != "X" and luhn_valid(value):
            break
    assert _found(value) == [("prc_id", value)]


def test_validators() -> None:
    assert prc_id_valid("11010519491231002X")
    assert not prc_id_valid("110105194912310021")  # check character
    assert not prc_id_valid("11010519490231002X")  # 31 February
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")
    assert not luhn_valid("0000000000000")
    assert email_valid("a@b.cn")
    assert not email_valid("a@b")
    assert not ipv6_valid("::")


def test_only_the_enabled_builtins_run() -> None:
    phones_only = DetectorSet.build(["cn_mobile"], [])
    assert [d.detector for d in phones_only.scan("13812345678 a@b.cn 10.0.0.1")] == ["cn_mobile"]


def test_user_rule_with_a_builtin_validator() -> None:
    rule = DetectorRule(name="hk_card", pattern=r"(?<![0-9])9[0-9]{15}(?![0-9])", validator="luhn")
    detectors = DetectorSet.build([], [rule])
    good = next(
        f"9{n:014d}{d}" for n in range(10**5) for d in "0123456789" if luhn_valid(f"9{n:014d}{d}")
    )
    bad = good[:-1] + str((int(good[-1]) + 1) % 10)
    assert [d.detector for d in detectors.scan(f"x {good} y")] == ["hk_card"]
    assert detectors.scan(bad) == []


def test_user_rule_with_a_plugin_validator() -> None:
    rule = DetectorRule(
        name="order_code",
        pattern=r"ORD-[0-9]{6}",
        validator="tests.unit.governance.plugins:is_order_code",
    )
    allowed = FunctionRegistry(["tests.unit.governance.plugins:is_order_code"])
    detectors = DetectorSet.build([], [rule], allowed)
    assert [d.detector for d in detectors.scan("ORD-000011 ORD-000001")] == ["order_code"]


def test_disabled_user_rules_do_not_run() -> None:
    rule = DetectorRule(name="word", pattern="secret", enabled=False)
    assert DetectorSet.build([], [rule]).scan("secret") == []


@pytest.mark.parametrize(
    ("validator", "sentence"),
    [
        ("tests.unit.governance.nope:check", "cannot be imported"),
        ("tests.unit.governance.plugins:missing", "is not a function"),
        ("tests.unit.governance.plugins:NOT_CALLABLE", "is not a function"),
    ],
)
def test_a_plugin_validator_that_cannot_be_loaded_is_one_sentence(
    validator: str, sentence: str
) -> None:
    rule = DetectorRule(name="x", pattern="x", validator=validator)
    with pytest.raises(ConfigError, match=sentence) as caught:
        DetectorSet.build([], [rule], FunctionRegistry([validator]))
    assert "\n" not in str(caught.value)
