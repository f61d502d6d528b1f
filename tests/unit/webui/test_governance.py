"""The governance policy set through the API and the forms (temporary SQLite database, the
static schema source): validation with one sentence per problem and nothing saved, the audit
log, roles, the collector config's ``governance`` field and its etag, lookup table CSV,
detection counts stored once per Kafka offset."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from governance import DetectionRecord, GovernanceSettings, PolicyAction
from tests.unit.webui.harness import (
    create_viewer,
    instance_body,
    login,
    make_app,
    make_token,
    mirror_body,
)
from webui import governance
from webui.admin import Problems
from webui.db import make_engine, migrate, session_factory
from webui.detections import (
    OffsetMoved,
    Received,
    aggregate,
    hour_of,
    load_series,
    store_batch,
)
from webui.models import DetectionCount, DetectionOffset
from webui.schema_source import StaticSchemaSource

TABLE = "ordercenter_orderinfo"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def mirrored(client: TestClient, admin_csrf: str) -> dict[str, str]:
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    assert client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code == 201
    return headers


def _policy(column: str, action: str, **extra: object) -> dict[str, object]:
    return {"table": TABLE, "column": column, "action": action, **extra}


@pytest.mark.parametrize(
    "body, sentence",
    [
        (
            _policy("nope", "mask"),
            "column nope does not exist in ordercenter_00.orderinfo_00 "
            "(columns: id, user_id, amount, created_at).",
        ),
        (
            _policy("id", "drop"),
            "the policy drops ordercenter_orderinfo.id, a key column of the table; a row "
            "without its key cannot be mirrored (use 'hash' instead).",
        ),
        (_policy("amount", "blur"), "action: Input should be 'pass', 'mask', 'hash' or 'drop'."),
        (
            {"table": "Orders!", "column": "id", "action": "mask"},
            "table: 'Orders!' is not a logical table name (lowercase, digits, '_').",
        ),
        (
            _policy("amount", "mask", keep_last=20),
            "keep_last: Input should be less than or equal to 8.",
        ),
    ],
)
def test_refused_policies_say_why_and_save_nothing(
    client: TestClient, mirrored: dict[str, str], body: dict[str, object], sentence: str
):
    before = client.get("/api/audit").json()
    refused = client.put("/api/governance/policies", json=body, headers=mirrored)
    assert refused.status_code == 422
    assert refused.json()["detail"] == [sentence]
    assert client.get("/api/governance/policies").json() == []
    assert client.get("/api/audit").json() == before
    assert client.get("/api/governance").json()["settings"]["version"] == 0


def test_policy_set_changes_reach_the_collector_config_with_a_new_etag(
    client: TestClient, admin_csrf: str, mirrored: dict[str, str]
):
    collector = TestClient(client.app)
    token = _bearer(make_token(client, admin_csrf, "collector"))
    first = collector.get("/api/collector-config/orders", headers=token)
    etag = first.headers["ETag"]
    assert first.json()["governance"]["policies"] == []
    unchanged = collector.get(
        "/api/collector-config/orders", headers={**token, "If-None-Match": etag}
    )
    assert unchanged.status_code == 304

    saved = client.put(
        "/api/governance/policies", json=_policy("user_id", "hash"), headers=mirrored
    )
    assert saved.status_code == 200, saved.text
    changed = collector.get(
        "/api/collector-config/orders", headers={**token, "If-None-Match": etag}
    )
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    assert changed.json()["version"] > first.json()["version"]
    served = changed.json()["governance"]
    assert served["version"] == 1
    assert served["policies"] == [
        {"table": TABLE, "column": "user_id", "action": "hash", "keep_last": 4}
    ]
    assert "hash_salt" not in served and "source" not in served and "webui" not in served

    again = collector.get(
        "/api/collector-config/orders", headers={**token, "If-None-Match": changed.headers["ETag"]}
    )
    assert again.status_code == 304
    client.put(
        "/api/governance/settings",
        json={"enabled": True, "default_action": "mask", "builtin_detectors": ["email"]},
        headers=mirrored,
    )
    latest = collector.get("/api/collector-config/orders", headers=token).json()
    assert latest["etag"] != changed.json()["etag"]
    assert (latest["governance"]["enabled"], latest["governance"]["default_action"]) == (
        True,
        "mask",
    )
    # The collectors' own model reads what is served: enabled, with a hash policy, no salt.
    received = GovernanceSettings.from_published(latest["governance"])
    assert received.policies[0].action is PolicyAction.HASH
    assert received.hash_salt is None


def test_every_change_is_audited_with_before_and_after(
    client: TestClient, mirrored: dict[str, str]
):
    h = mirrored
    assert client.put(
        "/api/governance/policies", json=_policy("amount", "mask"), headers=h
    ).is_success
    assert client.put(
        "/api/governance/policies", json=_policy("amount", "drop"), headers=h
    ).is_success
    rule = {"name": "order_no", "pattern": r"ORD\d{10}", "description": "order numbers"}
    assert client.post("/api/governance/detectors", json=rule, headers=h).status_code == 201
    lookup = {"name": "cities", "entries": {"010": "beijing", "021": "shanghai"}}
    assert client.post("/api/governance/lookup-tables", json=lookup, headers=h).status_code == 201
    standardise = {"table": TABLE, "column": "user_id", "kind": "lookup", "lookup": "cities"}
    assert client.put("/api/governance/standardise", json=standardise, headers=h).is_success
    assert client.delete(f"/api/governance/policies/{TABLE}/amount", headers=h).status_code == 204
    audit = [
        (e["action"], e["object_type"], e["object_name"], e["before"], e["after"])
        for e in client.get("/api/audit").json()
    ][:6]
    assert audit == [
        (
            "delete",
            "column_policy",
            f"{TABLE}.amount",
            {"table": TABLE, "column": "amount", "action": "drop", "keep_last": 4},
            None,
        ),
        (
            "create",
            "standardise_rule",
            f"{TABLE}.user_id",
            None,
            {**standardise, "function": None, "on_missing": "keep"},
        ),
        (
            "create",
            "lookup_table",
            "cities",
            None,
            {"entries": 2, "added": {"010": "beijing", "021": "shanghai"}},
        ),
        ("create", "detector_rule", "order_no", None, {**rule, "validator": None, "enabled": True}),
        (
            "update",
            "column_policy",
            f"{TABLE}.amount",
            {"table": TABLE, "column": "amount", "action": "mask", "keep_last": 4},
            {"table": TABLE, "column": "amount", "action": "drop", "keep_last": 4},
        ),
        (
            "create",
            "column_policy",
            f"{TABLE}.amount",
            None,
            {"table": TABLE, "column": "amount", "action": "mask", "keep_last": 4},
        ),
    ]
    assert client.get("/api/governance").json()["settings"]["version"] == 6


def test_set_rules_are_checked_as_the_collectors_check_them(
    client: TestClient, mirrored: dict[str, str]
):
    h = mirrored
    missing = {"table": TABLE, "column": "user_id", "kind": "lookup", "lookup": "nope"}
    refused = client.put("/api/governance/standardise", json=missing, headers=h)
    assert refused.json()["detail"] == [
        "the policy set is refused: the standardise rule for ordercenter_orderinfo.user_id "
        "names the unknown lookup table 'nope'."
    ]
    recrypt = {"table": TABLE, "column": "user_id", "kind": "recrypt", "function": "not a path"}
    refused = client.put("/api/governance/standardise", json=recrypt, headers=h)
    assert refused.status_code == 422
    assert refused.json()["detail"] == [
        "function: 'not a path' is not a dotted path like 'mypkg.crypto:old_to_new'."
    ]
    both = {**recrypt, "function": "mypkg.crypto:old_to_new", "lookup": "cities"}
    assert client.put("/api/governance/standardise", json=both, headers=h).status_code == 422
    builtin = {"name": "email", "pattern": "x+"}
    refused = client.post("/api/governance/detectors", json=builtin, headers=h)
    assert refused.json()["detail"] == [
        "name: 'email' is a built-in detector's name; pick another."
    ]
    empty = {"name": "anything", "pattern": ".*"}
    refused = client.post("/api/governance/detectors", json=empty, headers=h)
    assert refused.json()["detail"] == [
        "pattern: '.*' matches the empty string, so it would match everywhere."
    ]
    assert client.post(
        "/api/governance/lookup-tables", json={"name": "cities", "entries": {"1": "a"}}, headers=h
    ).is_success
    used = {"table": TABLE, "column": "user_id", "kind": "lookup", "lookup": "cities"}
    assert client.put("/api/governance/standardise", json=used, headers=h).is_success
    refused = client.delete("/api/governance/lookup-tables/cities", headers=h)
    assert refused.json()["detail"] == [
        "lookup table 'cities' is used by the standardise rule for "
        "ordercenter_orderinfo.user_id; delete that rule first."
    ]
    unknown = {"enabled": True, "default_action": "pass", "builtin_detectors": ["ssn"]}
    refused = client.put("/api/governance/settings", json=unknown, headers=h)
    assert refused.status_code == 422


def test_viewers_read_but_cannot_change_and_collectors_read_nothing(
    client: TestClient, admin_csrf: str
):
    create_viewer(client, admin_csrf)
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    collector_token = make_token(client, admin_csrf, "collector")
    viewer = TestClient(client.app)
    csrf = login(viewer, "viewer", "viewer-password-1")
    headers = {"X-CSRF-Token": csrf}
    assert viewer.get("/api/governance").status_code == 200
    assert viewer.get("/api/lineage").status_code == 200
    assert viewer.get("/api/detections").status_code == 200
    refused = viewer.put(
        "/api/governance/policies", json=_policy("amount", "mask"), headers=headers
    )
    assert refused.status_code == 403
    page = viewer.post(
        "/governance/policies",
        data={"csrf_token": csrf, "table": TABLE, "column": "amount", "action": "mask"},
    )
    assert page.status_code == 403
    page_for_viewer = viewer.get("/governance")
    assert page_for_viewer.status_code == 200
    assert 'id="policy-form"' not in page_for_viewer.text, "viewers get no edit forms"
    anonymous = TestClient(client.app)
    assert anonymous.get("/api/governance").status_code == 401
    assert anonymous.get("/api/lineage/openlineage").status_code == 401
    assert anonymous.get("/lineage", follow_redirects=False).status_code == 303
    assert anonymous.get("/api/governance", headers=_bearer(collector_token)).status_code == 403
    no_csrf = client.put("/api/governance/policies", json=_policy("amount", "mask"))
    assert no_csrf.status_code == 403


def test_forms_refuse_with_the_values_typed_and_upload_lookup_csv(
    client: TestClient, admin_csrf: str, mirrored: dict[str, str]
):
    refused = client.post(
        "/governance/policies",
        data={"csrf_token": admin_csrf, "table": TABLE, "column": "zzz", "action": "drop"},
    )
    assert refused.status_code == 422
    assert "column zzz does not exist in ordercenter_00.orderinfo_00" in refused.text
    assert re.search(r'name="column" value="zzz"', refused.text)

    uploaded = client.post(
        "/governance/lookup-tables",
        data={"csrf_token": admin_csrf, "name": "cities"},
        files={"file": ("cities.csv", b'old,new\n010,beijing\n"1,2","a ""b"""\n')},
        follow_redirects=False,
    )
    assert uploaded.status_code == 303
    table = client.get("/api/governance/lookup-tables/cities").json()
    assert table["entries"] == {"010": "beijing", "1,2": 'a "b"'}
    edit = client.get("/governance/lookup-tables/cities")
    assert "&#34;1,2&#34;" in edit.text or '"1,2"' in edit.text

    bad = client.post(
        "/governance/lookup-tables/cities",
        data={"csrf_token": admin_csrf, "entries": "010,a\n010,b\nonly-one"},
    )
    assert bad.status_code == 422
    assert "line 2: the value &#39;010&#39; is mapped twice." in bad.text
    assert "line 3: expected two values, &#39;old value,new value&#39;." in bad.text
    assert client.get("/api/governance/lookup-tables/cities").json() == table, "nothing saved"

    for page in ("/governance", "/detections", "/lineage", f"/lineage?q=ods_snapshot.{TABLE}.id"):
        assert client.get(page).status_code == 200, page


def test_parse_lookup_entries():
    assert governance.parse_lookup_entries("source,target\n a , b \n\n") == {"a": "b"}
    with pytest.raises(Problems) as refused:
        governance.parse_lookup_entries(",x\na,b,c")
    assert refused.value.messages == [
        "line 1: expected two values, 'old value,new value'.",
        "line 2: expected two values, 'old value,new value'.",
    ]


# --- detection counts ---------------------------------------------------------------------


def _record(offset: int, count: int, at_ms: int, column: str = "phone") -> Received:
    record = DetectionRecord(
        instance="orders",
        logical_table=TABLE,
        schema_name="ordercenter_00",
        table_name="orderinfo_00",
        column=column,
        detector="cn_mobile",
        count=count,
        first_offset=1,
        last_offset=2,
        detected_at_ms=at_ms,
        action=PolicyAction.MASK,
    )
    return Received("cdc.binlog.orders.detections", 0, offset, record.encode())


def test_detection_counts_are_stored_once_per_offset(tmp_path: Path):
    sessions = session_factory(engine := make_engine(f"sqlite:///{tmp_path / 'a.sqlite'}"))
    migrate(engine)
    hour = 1_700_000_000 // 3600 * 3600
    batch = [
        _record(0, 3, hour * 1000 + 5),
        _record(1, 4, hour * 1000 + 60_000),
        _record(2, 1, (hour + 3600) * 1000),
        Received("cdc.binlog.orders.detections", 0, 3, b"not json"),
    ]
    with sessions.begin() as db:
        assert store_batch(db, "cdc.binlog.orders.detections", 0, batch) == 3
    with sessions.begin() as db:  # the same records again (e.g. read twice): nothing counted
        assert store_batch(db, "cdc.binlog.orders.detections", 0, batch[:3]) == 0
    with sessions.begin() as db:
        assert (
            store_batch(db, "cdc.binlog.orders.detections", 0, [*batch, _record(4, 2, hour * 1000)])
            == 1
        )
    with sessions() as db:
        rows = {(r.hour, r.column_name, r.count) for r in db.scalars(select(DetectionCount))}
        assert rows == {(hour, "phone", 9), (hour + 3600, "phone", 1)}
        assert db.get(DetectionOffset, ("cdc.binlog.orders.detections", 0)).next_offset == 5
        series, totals = load_series(db, hour, hour + 7200)
        assert [(s.label, s.points) for s in series] == [
            (f"{TABLE}.phone cn_mobile", [(hour, 9.0), (hour + 3600, 1.0), (hour + 7200, 0.0)])
        ]
        assert [(t.column, t.action, t.count) for t in totals] == [("phone", "mask", 10)]


def test_a_batch_that_lost_the_offset_race_counts_nothing(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'a.sqlite'}")
    migrate(engine)
    sessions = session_factory(engine)
    topic = "cdc.binlog.orders.detections"
    with sessions.begin() as db:
        store_batch(db, topic, 0, [_record(0, 1, 0)])
    db = sessions()
    stored = db.get(DetectionOffset, (topic, 0))  # this reader saw next_offset 1 …
    assert stored is not None and stored.next_offset == 1
    with sessions.begin() as other:  # … another process stores 1..2 meanwhile
        store_batch(other, topic, 0, [_record(1, 5, 0), _record(2, 5, 0)])
    with pytest.raises(OffsetMoved):
        store_batch(db, topic, 0, [_record(1, 5, 0)])
    db.rollback()
    db.close()
    with sessions() as check:
        assert check.scalar(select(func.sum(DetectionCount.count))) == 11


def test_aggregate_sums_per_hour_and_series():
    records = [
        DetectionRecord.decode(r.payload or b"")
        for r in (_record(0, 2, 3_600_000), _record(1, 3, 3_600_999), _record(2, 1, 0, "email"))
    ]
    assert aggregate(records) == {
        (3600, "orders", TABLE, "phone", "cn_mobile", "mask"): 5,
        (0, "orders", TABLE, "email", "cn_mobile", "mask"): 1,
    }
    assert hour_of(7_199_999) == 3600


def test_lineage_names_a_mirror_whose_mysql_side_is_not_found(
    tmp_path: Path, client: TestClient, mirrored: dict[str, str]
):
    # The app of ``client`` knows the schema; a second app on the same database does not.
    other = make_app(tmp_path, schemas=StaticSchemaSource({}))
    with TestClient(other) as second:
        login(second)
        [table] = second.get("/api/lineage").json()
    assert table["problem"] == (
        "no table of instance 'orders' matches 'ordercenter'/'orderinfo' now."
    )
    assert table["columns"] == [] and table["mysql_tables"] == []
    assert table["hive_snapshot"] == "ods_snapshot.ordercenter_orderinfo", "tables still show"


def test_a_detector_rule_is_changed_through_its_form(client: TestClient, admin_csrf: str):
    created = client.post(
        "/governance/detectors",
        data={
            "csrf_token": admin_csrf,
            "name": "order_no",
            "pattern": r"ORD\d{8}",
            "enabled": "on",
        },
        follow_redirects=False,
    )
    assert created.status_code == 303
    form = client.get("/governance", params={"detector": "order_no"})
    assert 'name="existing" value="order_no"' in form.text
    refused = client.post(
        "/governance/detectors",
        data={"csrf_token": admin_csrf, "existing": "order_no", "name": "order_no", "pattern": "("},
    )
    assert refused.status_code == 422
    assert 'name="existing" value="order_no"' in refused.text, "the form stays an edit form"
    changed = client.post(
        "/governance/detectors",
        data={
            "csrf_token": admin_csrf,
            "existing": "order_no",
            "name": "order_no",
            "pattern": r"ORD\d{10}",
            "validator": "luhn",
        },
        follow_redirects=False,
    )
    assert changed.status_code == 303
    [rule] = client.get("/api/governance/detectors").json()
    assert (rule["pattern"], rule["validator"], rule["enabled"]) == (r"ORD\d{10}", "luhn", False)
    assert client.get("/governance", params={"detector": "nope"}).status_code == 404
