"""``GET /api/table-mirrors/{name}/live-schema`` and ``/live-counts``: the web admin reads a
table mirror's MySQL shape with the password it keeps, for tokens of role ``component`` only
(merge with ``config_store.source: webui``, ``cdc_platform.live_tables.AdminLiveTables``).

Who may ask, what is audited, that no password leaves the admin, the one-sentence answers for
an unknown mirror and an unreachable MySQL, and ``AdminLiveTables`` reading the real app. The
MySQL reader behind the app is the fake (``FakeLiveTables``) except where MySQL is away: there
it is the real ``LiveTables`` aimed at a port nobody listens on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.live_tables import AdminLiveTables, FakeLiveTables, LiveTableSource
from cdc_platform.mysql_schema import LiveSchema
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from tests.unit.webui.harness import (
    MYSQL_PASSWORD,
    instance_body,
    login,
    make_app,
    make_token,
    mirror_body,
)

MIRROR = "ordercenter_orderinfo"
SCHEMA = LiveSchema(
    table=MIRROR,
    shards=["ordercenter_00.orderinfo_00", "ordercenter_00.orderinfo_01"],
    # Not alphabetical: the order must survive the trip.
    columns={"id": "bigint(20) unsigned", "user_id": "bigint(20)", "amount": "decimal(12,2)"},
    key=["id"],
    shards_agree=False,
    differences=["ordercenter_00.orderinfo_01 lacks column amount"],
)
DAY = dt.date(2026, 11, 20)


class Recording:
    """The admin's MySQL reader factory: a fake reader, and the snapshots it was built with."""

    def __init__(self) -> None:
        self.fake = FakeLiveTables({MIRROR: SCHEMA}, {MIRROR: {DAY: 3}})
        self.snapshots: list[ConfigSnapshot] = []

    def __call__(self, snapshot: ConfigSnapshot) -> LiveTableSource:
        self.snapshots.append(snapshot)
        return self.fake


@pytest.fixture()
def reader() -> Recording:
    return Recording()


def _instance_and_mirror(client: TestClient) -> str:
    """Logs in as the admin, adds the instance and its mirror; returns the CSRF token."""
    csrf = login(client)
    headers = {"X-CSRF-Token": csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    made = client.post("/api/table-mirrors?initial_load=false", json=mirror_body(), headers=headers)
    assert made.status_code == 201, made.text
    return csrf


@dataclass
class Admin:
    client: TestClient
    csrf: str


@pytest.fixture()
def admin(tmp_path: Path, reader: Recording) -> Iterator[Admin]:
    with TestClient(make_app(tmp_path, live_tables=reader)) as client:
        yield Admin(client, _instance_and_mirror(client))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _via(client: TestClient) -> httpx.MockTransport:
    """An httpx transport that hands each request to the app under test."""

    def forward(request: httpx.Request) -> httpx.Response:
        answer = client.get(
            request.url.path,
            params=dict(request.url.params),
            headers={"Authorization": request.headers["Authorization"]},
        )
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    return httpx.MockTransport(forward)


def _audit(client: TestClient) -> list[tuple[str, str, str, str]]:
    return [
        (e["actor"], e["action"], e["object_type"], e["object_name"])
        for e in client.get("/api/audit").json()
    ]


def test_a_component_token_gets_the_shape_read_with_the_stored_password_and_never_the_password(
    admin: Admin, reader: Recording
) -> None:
    client = admin.client
    token = make_token(client, admin.csrf, "component", name="merge")
    version = client.get("/api/config-snapshot").json()["version"]
    answer = client.get(f"/api/table-mirrors/{MIRROR}/live-schema", headers=_bearer(token))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["columns"] == [
        {"name": "id", "type": "bigint(20) unsigned"},
        {"name": "user_id", "type": "bigint(20)"},
        {"name": "amount", "type": "decimal(12,2)"},
    ]
    assert (body["key"], body["shards_agree"]) == (["id"], False)
    assert MYSQL_PASSWORD not in answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    # The reader was given the instance with its decrypted password, and only this mirror.
    (snapshot,) = reader.snapshots
    (instance,) = snapshot.instances
    assert instance.password is not None
    assert instance.password.get_secret_value() == MYSQL_PASSWORD
    assert [t.name for t in snapshot.tables] == [MIRROR]
    assert ("token:merge", "use_secret", "live_schema", MIRROR) in _audit(client)
    # Audited, yet not a configuration change: the components' snapshot keeps its version.
    assert client.get("/api/config-snapshot").json()["version"] == version


def test_counts_by_the_check_column_only(admin: Admin) -> None:
    client = admin.client
    token = make_token(client, admin.csrf, "component", name="merge")
    url = f"/api/table-mirrors/{MIRROR}/live-counts"
    counted = client.get(
        url, params={"column": "created_at", "today": "2026-11-26"}, headers=_bearer(token)
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["counts"] == [{"day": "2026-11-20", "rows": 3}]
    other = client.get(
        url, params={"column": "user_id", "today": "2026-11-26"}, headers=_bearer(token)
    )
    assert other.status_code == 422
    assert other.json()["detail"] == [
        f"table mirror {MIRROR!r} is counted by its check column (created_at), not by 'user_id'."
    ]
    assert ("token:merge", "use_secret", "live_counts", MIRROR) in _audit(client)


def test_only_component_tokens_may_ask_and_refusals_are_audited(
    admin: Admin, reader: Recording
) -> None:
    client, csrf = admin.client, admin.csrf
    url = f"/api/table-mirrors/{MIRROR}/live-schema"
    collector = make_token(client, csrf, "collector", name="c1")
    viewer_token = make_token(client, csrf, "viewer", name="v1")
    assert client.get(url, headers=_bearer(collector)).status_code == 403
    assert client.get(url, headers=_bearer(viewer_token)).status_code == 403
    # An admin's own session is no component either.
    assert client.get(url).status_code == 403
    audit = _audit(client)
    assert ("token:c1", "refused", "live_schema", MIRROR) in audit
    assert ("token:v1", "refused", "live_schema", MIRROR) in audit
    assert ("admin", "refused", "live_schema", MIRROR) in audit
    client.cookies.clear()
    nobody = client.get(url)
    assert nobody.status_code == 401
    assert client.get(url, headers=_bearer("cdcm_nonsense")).status_code == 401
    assert reader.snapshots == []  # MySQL was never read for any of them


def test_an_unknown_mirror_and_an_unreachable_mysql_answer_one_sentence(tmp_path: Path) -> None:
    # The real reader: the instance of the harness is on a port nobody listens on.
    with TestClient(make_app(tmp_path)) as client:
        csrf = _instance_and_mirror(client)
        token = make_token(client, csrf, "component", name="merge")
        unknown = client.get("/api/table-mirrors/nope_t/live-schema", headers=_bearer(token))
        assert unknown.status_code == 404
        assert unknown.json()["detail"] == ["no table mirror named 'nope_t'."]
        away = client.get(f"/api/table-mirrors/{MIRROR}/live-schema", headers=_bearer(token))
        assert away.status_code == 503
        (sentence,) = away.json()["detail"]
        assert sentence.startswith("MySQL instance 'orders' at 127.0.0.1:1 cannot be reached")
        assert MYSQL_PASSWORD not in away.text
        # The failed read is on record too.
        assert ("token:merge", "use_secret", "live_schema", MIRROR) in _audit(client)

        source = AdminLiveTables("http://admin", SecretStr(token), transport=_via(client))
        with pytest.raises(ConfigError, match=r"cannot read the live schema of 'nope_t': no table"):
            source.live_schema("nope_t")
        with pytest.raises(ServiceUnavailableError, match=r"MySQL instance 'orders' at 127"):
            source.live_schema(MIRROR)


def test_the_admin_source_reads_the_real_app(admin: Admin) -> None:
    client, csrf = admin.client, admin.csrf
    token = make_token(client, csrf, "component", name="merge")
    source = AdminLiveTables("http://admin", SecretStr(token), transport=_via(client))
    assert source.live_schema(MIRROR) == SCHEMA
    assert list(source.live_schema(MIRROR).columns) == ["id", "user_id", "amount"]
    assert source.count_per_day(MIRROR, "created_at", dt.date(2026, 11, 26)) == {DAY: 3}
    viewer = AdminLiveTables(
        "http://admin",
        SecretStr(make_token(client, csrf, "viewer", name="v2")),
        transport=_via(client),
    )
    with pytest.raises(ConfigError, match=r"refused config_store.token \(403: only API tokens"):
        viewer.live_schema(MIRROR)
