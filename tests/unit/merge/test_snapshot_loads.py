"""A merge's metadata reads of its snapshot table: the table's state and a tag's facts each
cost one catalog load (a metastore call and a read of the metadata file, a GET on S3), also
when there is no table yet; Spark's catalog is a stand-in here, no session is started."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest
from pyspark.errors import AnalysisException

from merge.hours import Hour
from merge.snapshot import SnapshotStore, TableState, facts_property


class _NotFound(AnalysisException):
    """What PySpark raises for the JVM's NoSuchTableException (its condition)."""

    def __init__(self) -> None:
        Exception.__init__(self, "[TABLE_OR_VIEW_NOT_FOUND] no such table")

    def getCondition(self) -> str:
        return "TABLE_OR_VIEW_NOT_FOUND"


class _Ref:
    def __init__(self, snapshot_id: int, tag: bool = True) -> None:
        self.snapshot_id, self.tag = snapshot_id, tag

    def isTag(self) -> bool:
        return self.tag

    def snapshotId(self) -> int:
        return self.snapshot_id


class _Snapshot:
    def snapshotId(self) -> int:
        return 30


class _JavaTable:
    """The few calls of Iceberg's Java Table a state or facts read makes."""

    def __init__(self) -> None:
        self._refs = {
            "main": _Ref(30, tag=False),
            "dt-2026-11-19": _Ref(10),
            "dt-2026-11-20": _Ref(20),
            "hr-2026-11-21-03": _Ref(25),
            "cdc_merge_0a1b2c": _Ref(29, tag=False),
        }

    def currentSnapshot(self) -> _Snapshot:
        return _Snapshot()

    def refs(self) -> Any:
        refs = self._refs

        class Refs(dict[str, _Ref]):
            def keySet(self) -> list[str]:
                return list(refs)

            def containsKey(self, key: str) -> bool:
                return key in refs

        return Refs(refs)

    def properties(self) -> dict[str, str]:
        return {facts_property("dt-2026-11-20"): json.dumps({"rawSnapshotId": 7})}


def _store(table: _JavaTable | None) -> tuple[SnapshotStore, list[str]]:
    """A store whose catalog loads are counted (``loads``) and return ``table`` (None: the
    catalog has no such table)."""
    loads: list[str] = []
    store = SnapshotStore.__new__(SnapshotStore)

    def load(name: str) -> _JavaTable:
        loads.append(name)
        if table is None:
            raise _NotFound()
        return table

    class Catalog:
        def tableExists(self, name: str) -> bool:
            loads.append(name)  # Iceberg's catalog answers it by loading the table
            return table is not None

    class Spark:
        catalog = Catalog()

    store.spark = Spark()  # type: ignore[assignment]
    store._java = load  # type: ignore[method-assign]
    store._plain = lambda name: name  # type: ignore[method-assign]
    return store, loads


def test_the_state_of_a_table_is_one_load() -> None:
    store, loads = _store(_JavaTable())
    state = store.state("orders")
    assert state == TableState(
        30, {date(2026, 11, 19): 10, date(2026, 11, 20): 20}, {Hour(date(2026, 11, 21), 3): 25}
    )
    assert loads == ["orders"]


def test_the_facts_of_a_tag_are_one_load() -> None:
    store, loads = _store(_JavaTable())
    assert store.merge_facts("orders", "dt-2026-11-20") == {"rawSnapshotId": 7}
    assert store.merge_facts("orders", "dt-2026-11-19") == {}
    assert loads == ["orders", "orders"]


def test_no_table_yet_is_an_empty_state_and_no_facts_after_one_load() -> None:
    store, loads = _store(None)
    assert store.state("orders") == TableState(None, {})
    assert store.merge_facts("orders", "dt-2026-11-20") == {}
    assert loads == ["orders", "orders"]


def test_another_catalog_failure_is_not_taken_for_a_missing_table() -> None:
    store, _ = _store(_JavaTable())

    def broken(name: str) -> None:
        raise AnalysisException("[TABLE_OR_VIEW_NOT_FOUND] wrong")  # no condition: not ours

    store._java = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(AnalysisException):
        store.state("orders")
