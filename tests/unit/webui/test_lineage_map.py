"""Lineage computation and search (``webui.lineage_map``) and its OpenLineage document
(``webui.openlineage``): pure logic over a sharded table, both directions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from cdc_platform.config import Settings, TableMirror
from webui.lineage_map import (
    ColumnTreatment,
    LineageIndex,
    MirrorSource,
    Naming,
    build_lineage,
)
from webui.openlineage import Namespaces, openlineage_events

SHARDS = tuple(f"ordercenter_{d:02d}.orderinfo_{t:02d}" for d in range(2) for t in range(2))
COLUMNS = {
    "id": "bigint(20) unsigned",
    "user_id": "bigint(20)",
    "phone": "varchar(20)",
    "id_card": "varchar(18)",
    "email": "varchar(100)",
    "amount": "decimal(12,2)",
}
NAMING = Naming.from_settings(Settings())
TREATMENTS = {
    "ordercenter_orderinfo": {
        "phone": ColumnTreatment("mask"),
        "email": ColumnTreatment("hash", standardise="lookup table 'emails'"),
        "id_card": ColumnTreatment("drop"),
    }
}


def _lineage(**mirror: object) -> LineageIndex:
    spec: dict[str, object] = {
        "instance": "orders",
        "db_prefix": "ordercenter",
        "table_prefix": "orderinfo",
        "redis_columns": ["id", "phone", "id_card"],
        **mirror,
    }
    source = MirrorSource(TableMirror.model_validate(spec), "cdc.binlog.orders", SHARDS, COLUMNS)
    other = MirrorSource(
        TableMirror(instance="users", db_prefix="usercenter", table_prefix="user"),
        "cdc.binlog.users",
        ("usercenter.user",),
        {"uid": "int(11)", "name": "varchar(20)"},
    )
    return LineageIndex(build_lineage([source, other], NAMING, TREATMENTS))


def test_downstream_of_a_mysql_column_of_one_shard():
    [hit] = _lineage().search("ordercenter_01.orderinfo_00.user_id")
    assert (hit.kind, hit.direction, hit.table.logical_table) == (
        "MySQL column",
        "downstream",
        "ordercenter_orderinfo",
    )
    assert hit.sources == ("orders/ordercenter_01.orderinfo_00.user_id",)
    assert dict((name, kind) for kind, name in hit.targets) == {
        "ods_binlog_source.ordercenter_orderinfo.content.user_id": "Hive raw column",
        "ods_snapshot.ordercenter_orderinfo.user_id": "Hive snapshot column",
        "cdc_warehouse.cdc_mirror.ordercenter_orderinfo.user_id": "warehouse column",
    }, "user_id is not among the Redis projection columns"


@pytest.mark.parametrize(
    "query, kind",
    [
        ("ods_snapshot.ordercenter_orderinfo.user_id", "Hive snapshot column"),
        ("ODS_SNAPSHOT.OrderCenter_OrderInfo.USER_ID", "Hive snapshot column"),
        ("ods_binlog_source.ordercenter_orderinfo.content.user_id", "Hive raw column"),
        ("ods_binlog_source.ordercenter_orderinfo.user_id", "Hive raw column"),
        ("cdc_warehouse.cdc_mirror.ordercenter_orderinfo.user_id", "warehouse column"),
        ("cdc_mirror.ordercenter_orderinfo.user_id", "warehouse column"),
    ],
)
def test_upstream_of_a_downstream_column_is_every_shard(query: str, kind: str):
    [hit] = _lineage().search(query)
    assert (hit.kind, hit.direction, hit.column and hit.column.name) == (
        kind,
        "upstream",
        "user_id",
    )
    assert hit.sources == tuple(f"orders/{shard}.user_id" for shard in SHARDS)


@pytest.mark.parametrize(
    "query",
    [
        "ods_snapshot.ordercenter_orderinfo",
        "ods_binlog_source.ordercenter_orderinfo",
        "cdc_warehouse.cdc_mirror.ordercenter_orderinfo",
        "cdc:ordercenter_orderinfo:",
        "cdc:ordercenter_orderinfo:18446744073709551615",  # a whole key
    ],
)
def test_upstream_of_a_downstream_table_is_every_shard(query: str):
    [hit] = _lineage().search(query)
    assert hit.direction == "upstream"
    assert hit.sources == tuple(f"orders/{shard}" for shard in SHARDS)


def test_instance_and_database_give_every_table_they_hold():
    hits = _lineage().search("orders")
    assert [(h.kind, h.table.logical_table) for h in hits] == [
        ("MySQL instance", "ordercenter_orderinfo")
    ]
    [database] = _lineage().search("orders/ordercenter_01")
    assert database.kind == "MySQL database"
    assert database.sources == (
        "orders/ordercenter_01.orderinfo_00",
        "orders/ordercenter_01.orderinfo_01",
    )
    assert ("Hive snapshot table", "ods_snapshot.ordercenter_orderinfo") in database.targets
    [topic] = _lineage().search("cdc.binlog.users")
    assert (topic.direction, topic.sources) == ("both", ("users/usercenter.user",))


def test_dropped_column_has_no_downstream_and_policies_are_noted():
    index = _lineage()
    [dropped] = index.search("ordercenter_00.orderinfo_00.id_card")
    assert dropped.targets == ()
    assert dropped.column is not None and "dropped" in dropped.column.note
    assert index.search("ods_snapshot.ordercenter_orderinfo.id_card") == []
    assert index.search("cdc_mirror.ordercenter_orderinfo.id_card") == []
    [masked] = index.search("ods_snapshot.ordercenter_orderinfo.phone")
    assert masked.column is not None and masked.column.note == "masked before Kafka"
    assert ("Redis value member", "cdc:ordercenter_orderinfo:* row.phone") in masked.targets
    [hashed] = index.search("cdc_mirror.ordercenter_orderinfo.email")
    assert hashed.column is not None
    assert hashed.column.note == (
        "salted hash before Kafka (joins still work); standardised: lookup table 'emails'"
    )


def test_targets_follow_the_mirror_targets():
    index = _lineage(targets=["warehouse"])
    assert index.search("ods_snapshot.ordercenter_orderinfo") == []
    assert index.search("cdc:ordercenter_orderinfo:1") == []
    [hit] = index.search("ordercenter_00.orderinfo_00")
    assert [kind for kind, _ in hit.targets] == ["Kafka topic", "warehouse table"]


def test_unknown_names_find_nothing():
    index = _lineage()
    assert index.search("") == []
    assert index.search("ods_snapshot.nope") == []
    assert index.search("cdc:other_table:1") == []


# --- OpenLineage --------------------------------------------------------------------------


def _events() -> list[dict]:
    tables = _lineage().tables
    namespaces = Namespaces(
        mysql={"orders": "mysql://10.0.0.1:3306", "users": "mysql://10.0.0.2:3306"},
        kafka="kafka://127.0.0.1:29092",
        hive="hive://127.0.0.1:25432",
        postgres="postgres://127.0.0.1:25432",
        redis="redis://127.0.0.1:26379",
    )
    return openlineage_events(tables, namespaces, datetime(2026, 11, 22, 12, 0, tzinfo=UTC))


def test_openlineage_run_events_have_the_required_fields():
    events = _events()
    assert [e["job"]["name"] for e in events] == [
        "orders.ordercenter_orderinfo",
        "users.usercenter_user",
    ]
    for event in events:
        assert event["eventType"] == "COMPLETE"
        assert event["eventTime"] == "2026-11-22T12:00:00Z"
        assert event["schemaURL"].endswith("/OpenLineage.json#/$defs/RunEvent")
        assert event["producer"].startswith("https://")
        uuid.UUID(event["run"]["runId"])
        for dataset in event["inputs"] + event["outputs"]:
            assert set(dataset) == {"namespace", "name", "facets"}
            for facet in dataset["facets"].values():
                assert facet["_producer"] == event["producer"]
                assert facet["_schemaURL"].startswith("https://openlineage.io/spec/facets/")
    assert events == _events(), "the same configuration exports the same document (run ids too)"


def test_openlineage_column_lineage_covers_every_shard_and_the_policies():
    event = _events()[0]
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        ("mysql://10.0.0.1:3306", shard) for shard in SHARDS
    ]
    outputs = {(d["namespace"], d["name"]): d["facets"] for d in event["outputs"]}
    assert set(outputs) == {
        ("kafka://127.0.0.1:29092", "cdc.binlog.orders"),
        ("hive://127.0.0.1:25432", "ods_binlog_source.ordercenter_orderinfo"),
        ("hive://127.0.0.1:25432", "ods_snapshot.ordercenter_orderinfo"),
        ("postgres://127.0.0.1:25432", "cdc_warehouse.cdc_mirror.ordercenter_orderinfo"),
        ("redis://127.0.0.1:26379", "cdc:ordercenter_orderinfo:"),
    }
    snapshot = outputs[("hive://127.0.0.1:25432", "ods_snapshot.ordercenter_orderinfo")]
    schema_fields = [f["name"] for f in snapshot["schema"]["fields"]]
    assert schema_fields == ["id", "user_id", "phone", "email", "amount"], "id_card is dropped"
    lineage = snapshot["columnLineage"]["fields"]
    assert set(lineage) == set(schema_fields), "column lineage names only schema fields"
    for name, entry in lineage.items():
        assert [(i["name"], i["field"]) for i in entry["inputFields"]] == [
            (shard, name) for shard in SHARDS
        ]
    identity = lineage["id"]["inputFields"][0]["transformations"]
    assert identity == [
        {"type": "DIRECT", "subtype": "IDENTITY", "description": "copied", "masking": False}
    ]
    for masked in ("phone", "email"):
        [transformation] = lineage[masked]["inputFields"][0]["transformations"]
        assert (transformation["subtype"], transformation["masking"]) == ("TRANSFORMATION", True)
        assert lineage[masked]["transformationType"] == "MASKED"
    warehouse = outputs[
        ("postgres://127.0.0.1:25432", "cdc_warehouse.cdc_mirror.ordercenter_orderinfo")
    ]
    types = {f["name"]: f["type"] for f in warehouse["schema"]["fields"]}
    assert types["id"] == "numeric(20)" and types["phone"] == "text"
    redis = outputs[("redis://127.0.0.1:26379", "cdc:ordercenter_orderinfo:")]
    assert list(redis["columnLineage"]["fields"]) == ["row.id", "row.phone"]
    raw = outputs[("hive://127.0.0.1:25432", "ods_binlog_source.ordercenter_orderinfo")]
    content_inputs = {i["field"] for i in raw["columnLineage"]["fields"]["content"]["inputFields"]}
    assert content_inputs == set(COLUMNS) - {"id_card"}


def test_namespaces_never_carry_a_secret():
    settings = Settings.model_validate(
        {
            "redis": {"url": "redis://:redis-secret-pw@10.1.2.3:6380/0"},
            "kafka": {"bootstrap_servers": "k1:9092,k2:9092"},
        }
    )
    namespaces = Namespaces.from_settings(settings, {"orders": ("10.0.0.1", 3306)})
    assert namespaces.redis == "redis://10.1.2.3:6380"
    assert namespaces.kafka == "kafka://k1:9092"
    assert namespaces.mysql == {"orders": "mysql://10.0.0.1:3306"}
    assert "secret" not in repr(namespaces)
