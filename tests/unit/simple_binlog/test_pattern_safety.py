"""Regexes an admin or a config file supplies cannot cost more than a bound: catastrophic
patterns are refused with one sentence wherever they enter (detector rules, shard rules,
include/exclude filters), and what is accepted runs in linear time in Python.

Written as an attacker would try it: ``(a+)+$`` against ``aaaa…!``.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cdc_platform.config import CollectorSettings
from collector.service import TableFilter
from governance import DetectorRule
from governance.detectors import DetectorSet
from simple_binlog.patterns import check_pattern
from simple_binlog.routing import ShardRouter, ShardRule

CATASTROPHIC = [
    r"(a+)+$",  # nested unbounded quantifiers
    r"(a*)*b",
    r"(a|aa)+$",  # ambiguous alternatives repeated without bound
    r"(\w+\s?)+$",
    r"(a?){25}a{25}",  # bounded, yet 2**25 ways to match
    r"(a{1,30}){1,30}$",
    r"a.*a.*a.*a.*b",  # four unbounded repeats in a row: n**4 steps
    r"(a)\1",  # a backreference
]
ATTACK_TEXT = "a" * 5000 + "!"


def _sentence(error: ValidationError) -> str:
    [first] = error.errors()
    return str(first["msg"]).removeprefix("Value error, ")


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_detector_rule_with_a_catastrophic_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(ValidationError) as caught:
        DetectorRule(name="pwn", pattern=pattern)
    assert "\n" not in _sentence(caught.value)
    assert repr(pattern) in _sentence(caught.value)


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_shard_rule_with_a_catastrophic_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(ValidationError, match="regular expression"):
        ShardRule(schema_pattern=f"^(?P<db>{pattern})$")
    with pytest.raises(ValidationError, match="regular expression"):
        ShardRule(table_pattern=f"(?P<table>x)|{pattern}")


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_an_include_or_exclude_filter_with_a_catastrophic_pattern_is_refused(
    pattern: str,
) -> None:
    with pytest.raises(ValidationError, match="regular expression"):
        CollectorSettings(include=[pattern])
    with pytest.raises(ValidationError, match="regular expression"):
        CollectorSettings(exclude=[r"mysql\..*", pattern])


@pytest.mark.timeout(10)
def test_an_accepted_detector_pattern_runs_in_linear_time() -> None:
    # Quadratic on a backtracking engine (each start runs to the end, then backs off).
    rule = DetectorRule(name="tagged", pattern=r"[a-z]+@x")
    detectors = DetectorSet.build([], [rule])
    assert detectors.scan("a" * 300_000) == []
    assert [(d.start, d.end) for d in detectors.scan("é abc@x")] == [(2, 7)]


@pytest.mark.timeout(10)
def test_accepted_filters_and_shard_rules_run_in_linear_time() -> None:
    table_filter = TableFilter([r"[a-z_]+[0-9]*\.[a-z_]+x"], [])
    long_name = "a" * 200_000
    assert not table_filter(long_name, long_name)
    router = ShardRouter([ShardRule(schema_pattern=r"^(?P<db>[a-z_]+?)(_\d+)?$")])
    assert router.route("shop_07", "orders_01").name == "shop_orders"


@pytest.mark.parametrize(
    "pattern",
    [
        r"^(?P<db>.+?)(_\d+)?$",  # the default shard rule
        r"(?<![0-9])9[0-9]{15}(?![0-9])",  # a lookaround with bounded repeats
        r"(?:[0-9]{1,3}\.){3}[0-9]{1,3}",
        r"(?:\d{4}[ -]?){3}\d{4}",
        r"(?i)order-[0-9a-f]{8}",
        r".*shop.*\..*",
    ],
)
def test_ordinary_patterns_stay_accepted(pattern: str) -> None:
    assert DetectorRule(name="ok", pattern=pattern).pattern == pattern
    assert CollectorSettings(include=[pattern]).include == [pattern]


def test_a_lookaround_with_an_unbounded_repeat_is_refused() -> None:
    with pytest.raises(ValidationError, match="bound each repeat"):
        DetectorRule(name="pwn", pattern=r"(?<![0-9])[0-9]+(?![0-9])")


# Accepted before on Python's merged parse, yet exponential or divergent in Java (Spark runs
# shard rules as rlike('^(?:…)$')), or costly on Python's re (a lookaround).
JAVA_ATTACKS = [
    r"(?P<table>(?:\w|[a-z_]){1,64})_x",  # \w and [a-z_] share characters: 2**64 in Java
    r"(?:\w|[a-z_])*?_x",  # lazy: Java's loop memo does not cover it
    r"(?i)(?:a|A)*",  # case-insensitive overlap
    r"(?:\s|\S)*",  # \xa0 is Python's \s and Java's \S
    r"(?:[a-c]|[b-d])*",
    r"\100",  # octal '@' in Python, group 1 then '00' in Java
    r"[\1]",
    r"a\0",
    r"a\Z",
    r"[a-z&&[^e]]",  # an intersection in Java, literal characters in Python
    r"(?<!x)(?:a?){13}b",  # a lookaround: runs on re, 8192 ways per position
]


@pytest.mark.parametrize("pattern", JAVA_ATTACKS)
def test_patterns_exponential_or_different_in_java_are_refused(pattern: str) -> None:
    with pytest.raises(ValidationError) as caught:
        DetectorRule(name="pwn", pattern=pattern + "z")
    assert "\n" not in _sentence(caught.value)
    assert repr(pattern + "z") in _sentence(caught.value)
    with pytest.raises(ValidationError, match="regular expression"):
        ShardRule(table_pattern=f"(?P<table>x)|{pattern}")
    with pytest.raises(ValidationError, match="regular expression"):
        CollectorSettings(include=[pattern])


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?P<db>[a-z]+)_\d+",
        r"(?P<table>[a-z_]+)_\d{2}",
        r"^(?P<db>[a-z_]+?)(_\d+)?$",
        r"(?P<table>(?:[a-z]|_|-)+)_\d+",  # exclusive branches stay accepted
        r"(?P<table>(?:\w|-){1,64})_\d+",
        r"(?P<db>(?:ab|ac)+)",  # a common prefix is factored out
        r"(?<![0-9])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9])",
        r"\x40[a-z]{1,20}",
    ],
)
def test_ordinary_shard_rules_stay_accepted(pattern: str) -> None:
    field = "schema_pattern" if "db>" in pattern else "table_pattern"
    if "(?P<" in pattern:
        assert getattr(ShardRule(**{field: pattern}), field) == pattern
    assert DetectorRule(name="ok", pattern=pattern).pattern == pattern


def test_the_default_shard_rule_stays_accepted() -> None:
    rule = ShardRule()
    for pattern in (rule.schema_pattern, rule.table_pattern):
        assert check_pattern(pattern) == pattern


@pytest.mark.timeout(10)
def test_a_detector_scans_a_long_value_in_its_first_max_chars_and_counts_it() -> None:
    rule = DetectorRule(name="tagged", pattern=r"(?<![0-9])9[0-9]{15}(?![0-9])")
    detectors = DetectorSet.build([], [rule], max_chars=1_000)
    assert detectors.scan("9" + "1" * 15) != []
    assert detectors.scan("x" * 999 + " 9111111111111111") == []
    assert detectors.truncated == 1
