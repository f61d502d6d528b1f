"""API tokens as an attacker holding one would use them: a collector token reads only its own
instance's config, tokens expire, die with their owner's account, are listed (never shown)
and revoked by admins only, and every hand-over of a secret lands in the audit log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.unit.webui.harness import (
    ADMIN_PASSWORD,
    MYSQL_PASSWORD,
    VIEWER_PASSWORD,
    create_viewer,
    csrf_of,
    instance_body,
    login,
    make_app,
    make_token,
)
from webui.context import WebContext
from webui.models import ApiToken


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _two_instances(client: TestClient, csrf: str) -> None:
    headers = {"X-CSRF-Token": csrf}
    for name, password in (("orders", MYSQL_PASSWORD), ("billing", "Billing-Secret-0c1d")):
        body = instance_body(name, password=password)
        assert client.post("/api/instances", json=body, headers=headers).status_code == 201


def test_a_collector_token_for_one_instance_cannot_read_another(
    client: TestClient, admin_csrf: str
):
    _two_instances(client, admin_csrf)
    stolen = make_token(client, admin_csrf, "collector", name="orders-collector")
    attacker = TestClient(client.app)

    own = attacker.get("/api/collector-config/orders", headers=_bearer(stolen))
    assert own.status_code == 200
    assert own.json()["password"] == MYSQL_PASSWORD

    other = attacker.get("/api/collector-config/billing", headers=_bearer(stolen))
    assert other.status_code == 403
    assert "Billing-Secret-0c1d" not in other.text
    assert other.json()["detail"] == [
        "this collector token may read only the config of instance 'orders'."
    ]
    # Not even whether an instance exists leaks: a name that does not exist is refused alike.
    assert attacker.get("/api/collector-config/nope", headers=_bearer(stolen)).status_code == 403


def test_a_collector_token_needs_an_existing_instance(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    _two_instances(client, admin_csrf)
    unscoped = client.post(
        "/api/tokens", json={"name": "any", "role": "collector"}, headers=headers
    )
    assert unscoped.status_code == 422
    assert unscoped.json()["detail"] == [
        "instance: a collector token needs the name of the one instance whose config it reads."
    ]
    unknown = client.post(
        "/api/tokens",
        json={"name": "ghost", "role": "collector", "instance": "ghost"},
        headers=headers,
    )
    assert unknown.status_code == 422
    assert unknown.json()["detail"] == ["instance: there is no instance named 'ghost'."]
    scoped_admin = client.post(
        "/api/tokens",
        json={"name": "adm", "role": "admin", "instance": "orders"},
        headers=headers,
    )
    assert scoped_admin.status_code == 422


def test_the_token_form_scopes_collector_tokens(client: TestClient, admin_csrf: str):
    _two_instances(client, admin_csrf)
    made = client.post(
        "/tokens",
        data={
            "csrf_token": admin_csrf,
            "name": "form-collector",
            "role": "collector",
            "instance": "billing",
        },
    )
    assert made.status_code == 201
    token = made.text.split('id="new-token-value">', 1)[1].split("<", 1)[0]
    bot = TestClient(client.app)
    assert bot.get("/api/collector-config/billing", headers=_bearer(token)).status_code == 200
    assert bot.get("/api/collector-config/orders", headers=_bearer(token)).status_code == 403


def test_tokens_expire(client: TestClient, admin_csrf: str):
    _two_instances(client, admin_csrf)
    headers = {"X-CSRF-Token": admin_csrf}
    made = client.post(
        "/api/tokens",
        json={"name": "short", "role": "viewer", "expires_in_days": 1},
        headers=headers,
    ).json()
    expires = datetime.fromisoformat(made["expires_at"])
    assert timedelta(hours=23) < expires - datetime.now(UTC) <= timedelta(days=1)
    token = made["token"]
    bot = TestClient(client.app)
    assert bot.get("/api/instances", headers=_bearer(token)).status_code == 200

    ctx = client.app.state.ctx
    assert isinstance(ctx, WebContext)
    with ctx.sessions.begin() as db:
        row = db.scalar(select(ApiToken).where(ApiToken.name == "short"))
        assert row is not None
        row.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    assert bot.get("/api/instances", headers=_bearer(token)).status_code == 401
    listed = {t["name"]: t for t in client.get("/api/tokens").json()}
    assert listed["short"]["state"] == "expired"


def test_token_lifetime_has_a_default_and_a_maximum(tmp_path: Path):
    app = make_app(tmp_path, token_default_lifetime_days=7, token_max_lifetime_days=30)
    with TestClient(app) as client:
        headers = {"X-CSRF-Token": login(client)}
        default = client.post("/api/tokens", json={"name": "d"}, headers=headers).json()
        left = datetime.fromisoformat(default["expires_at"]) - datetime.now(UTC)
        assert timedelta(days=6, hours=23) < left <= timedelta(days=7)
        forever = client.post(
            "/api/tokens", json={"name": "f", "expires_in_days": 3650}, headers=headers
        )
        assert forever.status_code == 422
        assert forever.json()["detail"] == [
            "expires_in_days: a token may live at most 30 days (webui.token_max_lifetime_days)."
        ]


def test_tokens_stop_working_when_their_owner_is_disabled(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    _two_instances(client, admin_csrf)
    ops = {"username": "ops", "password": "Ops-password-42", "role": "admin"}
    assert client.post("/api/users", json=ops, headers=headers).status_code == 201
    leaver = TestClient(client.app)
    leaver_csrf = login(leaver, "ops", "Ops-password-42")
    admin_token = make_token(leaver, leaver_csrf, "admin", name="ops-automation")
    collector_token = make_token(leaver, leaver_csrf, "collector", name="ops-collector")
    # A token made with a token belongs to the same person.
    chained = TestClient(client.app).post(
        "/api/tokens", json={"name": "chained", "role": "viewer"}, headers=_bearer(admin_token)
    )
    assert chained.status_code == 201
    chained_token = chained.json()["token"]
    bot = TestClient(client.app)
    assert bot.get("/api/instances", headers=_bearer(admin_token)).status_code == 200

    disable = client.put("/api/users/ops/state", json={"disabled": True}, headers=headers)
    assert disable.status_code == 200

    assert bot.get("/api/instances", headers=_bearer(admin_token)).status_code == 401
    assert bot.get("/api/instances", headers=_bearer(chained_token)).status_code == 401
    assert (
        bot.get("/api/collector-config/orders", headers=_bearer(collector_token)).status_code == 401
    )
    # Enabling the account again does not bring its old tokens back.
    client.put("/api/users/ops/state", json={"disabled": False}, headers=headers)
    assert bot.get("/api/instances", headers=_bearer(admin_token)).status_code == 401
    states = {t["name"]: t["state"] for t in client.get("/api/tokens").json()}
    assert states["ops-automation"] == states["chained"] == "revoked"


def test_only_admins_list_and_revoke_tokens_and_never_see_a_value(
    client: TestClient, admin_csrf: str
):
    headers = {"X-CSRF-Token": admin_csrf}
    _two_instances(client, admin_csrf)
    secret = make_token(client, admin_csrf, "collector", name="eu-collector")
    viewer_token = make_token(client, admin_csrf, "viewer", name="dashboards")
    create_viewer(client, admin_csrf)
    viewer = TestClient(client.app)
    login(viewer, "viewer", VIEWER_PASSWORD)

    assert viewer.get("/api/tokens").status_code == 403
    assert (
        TestClient(client.app).get("/api/tokens", headers=_bearer(viewer_token)).status_code == 403
    )
    assert "eu-collector" not in viewer.get("/users").text

    listed = client.get("/api/tokens")
    assert listed.status_code == 200
    assert secret not in listed.text
    row = next(t for t in listed.json() if t["name"] == "eu-collector")
    assert "token" not in row
    assert row["instance"] == "orders" and row["state"] == "active"
    page = client.get("/users")
    assert "eu-collector" in page.text and secret not in page.text

    viewer_csrf = csrf_of(viewer.get("/").text)
    refused = viewer.delete(f"/api/tokens/{row['id']}", headers={"X-CSRF-Token": viewer_csrf})
    assert refused.status_code == 403
    revoked = client.delete(f"/api/tokens/{row['id']}", headers=headers)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    bot = TestClient(client.app)
    assert bot.get("/api/collector-config/orders", headers=_bearer(secret)).status_code == 401


def test_each_secret_hand_over_is_audited(client: TestClient, admin_csrf: str):
    _two_instances(client, admin_csrf)
    token = make_token(client, admin_csrf, "collector", name="eu-collector")
    bot = TestClient(client.app)
    first = bot.get("/api/collector-config/orders", headers=_bearer(token))
    again = bot.get("/api/collector-config/orders", headers=_bearer(token))
    assert first.status_code == again.status_code == 200
    unchanged = bot.get(
        "/api/collector-config/orders",
        headers={**_bearer(token), "If-None-Match": first.headers["etag"]},
    )
    assert unchanged.status_code == 304
    assert bot.get("/api/collector-config/billing", headers=_bearer(token)).status_code == 403

    audit = client.get("/api/audit").json()
    reads = [e for e in audit if e["object_type"] == "collector_config"]
    assert [(e["actor"], e["action"], e["object_name"]) for e in reversed(reads)] == [
        ("token:eu-collector", "read_secret", "orders"),
        ("token:eu-collector", "read_secret", "orders"),
        ("token:eu-collector", "refused", "billing"),
    ]
    assert all(e["at"] for e in reads)
    assert MYSQL_PASSWORD not in str(audit)
    assert ADMIN_PASSWORD not in str(audit)
