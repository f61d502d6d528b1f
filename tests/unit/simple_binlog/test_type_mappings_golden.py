"""The type mappings give, byte for byte, what they gave before the type table replaced them.

``data/type_mappings_golden.json`` was written by the mappings as they were before
``simple_binlog.types`` (merge's ``hive_type``, the warehouse's ``pg_type`` and ``pg_text``),
for every base type SimpleBinlog parses, in upper and lower case, with and without lengths,
precisions, fractional seconds, labels, ``unsigned``/``signed``/``zerofill`` and surrounding
spaces; mock_replay's ``binlog_spelling`` (the columnTypes text) and its SQL of a column's JSON member (``_json_member``, for a column named
``c`1``); ``pg_text`` for a set of wire values that covers every conversion (zero dates, base64,
numbers, NULL, malformed input). A value that raised is recorded as ``!<exception name>``.

Changed on purpose since (issue 24): ``binlog_spelling`` is the server's COLUMN_TYPE verbatim,
and the replay's JSON member of TIME is ``CAST(… AS CHAR)`` (exactly fsp digits) and of BINARY(n)
its n bytes (no trailing zeros trimmed), and of DOUBLE(M,D) its stored value
(``CAST(… AS DOUBLE)``), not the D decimals the server prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from merge.types import hive_type
from mirror.pgtypes import pg_text, pg_type
from mock_replay.plan import _json_member, binlog_spelling

_GOLDEN = json.loads((Path(__file__).parent / "data" / "type_mappings_golden.json").read_text())
_NONE = "<None>"


def _spec(key: str) -> str | None:
    return None if key == _NONE else key


def _text_or_error(spec: str | None, value: Any) -> str | None:
    try:
        return pg_text(spec, value)
    except Exception as exc:  # noqa: BLE001 - the golden file records which error was raised
        return f"!{type(exc).__name__}"


def test_golden_file_covers_many_spellings() -> None:
    assert len(_GOLDEN["hive_type"]) > 1000
    assert len(_GOLDEN["pg_text"]) > 300


@pytest.mark.parametrize("spec", sorted(_GOLDEN["hive_type"]))
def test_snapshot_type_unchanged(spec: str) -> None:
    assert hive_type(spec) == _GOLDEN["hive_type"][spec]


@pytest.mark.parametrize("key", sorted(_GOLDEN["pg_type"]))
def test_warehouse_type_unchanged(key: str) -> None:
    assert pg_type(_spec(key)) == _GOLDEN["pg_type"][key]


@pytest.mark.parametrize("key", sorted(_GOLDEN["pg_text"]))
def test_warehouse_value_text_unchanged(key: str) -> None:
    spec = _spec(key)
    got = [_text_or_error(spec, value) for value in _GOLDEN["values"]]
    assert got == _GOLDEN["pg_text"][key]


@pytest.mark.parametrize("spec", sorted(_GOLDEN["replay_json_member"]))
def test_replay_json_member_unchanged(spec: str) -> None:
    assert _json_member("c`1", spec) == _GOLDEN["replay_json_member"][spec]


@pytest.mark.parametrize("spec", sorted(_GOLDEN["binlog_spelling"]))
def test_column_types_text_unchanged(spec: str) -> None:
    assert binlog_spelling(spec) == _GOLDEN["binlog_spelling"][spec]
