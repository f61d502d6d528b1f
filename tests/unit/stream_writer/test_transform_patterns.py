"""The shard rules' regexes as Spark (Java) gets them: anchored, named groups in Java syntax,
group numbers unchanged. (Spark's routing is also checked against the Python router on every
batch; tests/integration/stream_writer exercises it.)"""

from __future__ import annotations

import re

import pytest

from simple_binlog.routing import ShardRule
from stream_writer.transform import _java_pattern


@pytest.mark.parametrize("name", ["ordercenter_07", "ordercenter", "a_b_12", "x_1_2", "db7"])
def test_java_pattern_matches_like_python_fullmatch(name: str) -> None:
    rule = ShardRule()
    java = _java_pattern(rule.schema_pattern)
    assert java.startswith("^(?:") and java.endswith(")$")
    assert "(?P<" not in java and "(?<db>" in java
    # Back in Python syntax, the anchored pattern behaves like the rule's fullmatch, with the
    # same group number for 'db'.
    as_python = re.compile(java.replace("(?<", "(?P<"))
    python_match = re.fullmatch(rule.schema_pattern, name)
    java_match = as_python.match(name)
    assert (python_match is None) == (java_match is None)
    if python_match and java_match:
        index = re.compile(rule.schema_pattern).groupindex["db"]
        assert java_match.group(index) == python_match.group("db")
