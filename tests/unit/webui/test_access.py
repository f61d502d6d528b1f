"""Authentication, roles, CSRF, cookies, and secrets kept out of every page, API response,
log line and the database file."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.unit.webui.harness import (
    MYSQL_PASSWORD,
    VIEWER_PASSWORD,
    create_viewer,
    csrf_of,
    instance_body,
    login,
    make_app,
    make_token,
    mirror_body,
)
from webui.pages import NAVIGATION

API_READS = [
    "/api/me",
    "/api/instances",
    "/api/instances/orders",
    "/api/table-mirrors",
    "/api/replays",
    "/api/users",
    "/api/tokens",
    "/api/audit",
    "/api/monitoring",
    "/api/collector-config/orders",
]


@pytest.mark.parametrize("path", [url for url, _ in NAVIGATION] + ["/instances/new"])
def test_pages_redirect_to_login_without_a_session(client: TestClient, path: str):
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/login?next={path.replace('/', '%2F')}" or (
        response.headers["location"] == f"/login?next={path}"
    )


def test_every_api_route_needs_credentials(client: TestClient):
    # Walks the app's own OpenAPI paths, so a route added later is covered too.
    samples = {
        "{name}": "orders",
        "{instance}": "orders",
        "{run_id}": "r1",
        "{token_id}": "1",
        "{username}": "admin",
    }
    checked = 0
    for template, operations in client.app.openapi()["paths"].items():
        path = template
        for placeholder, value in samples.items():
            path = path.replace(placeholder, value)
        for method in operations:
            response = client.request(method, path, json={})
            assert response.status_code == 401, (method, path, response.status_code)
            bad = client.request(
                method, path, json={}, headers={"Authorization": "Bearer cdcm_not-a-real-token"}
            )
            assert bad.status_code == 401, (method, path)
            checked += 1
    assert checked >= 20


def test_viewer_reads_but_cannot_edit(client: TestClient, admin_csrf: str):
    client.post("/api/instances", json=instance_body(), headers={"X-CSRF-Token": admin_csrf})
    create_viewer(client, admin_csrf)
    viewer = TestClient(client.app)
    csrf = login(viewer, "viewer", VIEWER_PASSWORD)
    headers = {"X-CSRF-Token": csrf}

    assert viewer.get("/api/instances").status_code == 200
    for path in ("/", "/instances", "/instances/orders", "/tables", "/users", "/audit"):
        assert viewer.get(path).status_code == 200, path
    assert "New instance" not in viewer.get("/instances").text

    refused = [
        viewer.post("/api/instances", json=instance_body(name="x"), headers=headers),
        viewer.put("/api/instances/orders", json=instance_body(host="10.1.1.1"), headers=headers),
        viewer.delete("/api/instances/orders", headers=headers),
        viewer.post("/api/table-mirrors", json=mirror_body(), headers=headers),
        viewer.post(
            "/api/users", json={"username": "x", "password": "0123456789x"}, headers=headers
        ),
        viewer.post("/api/tokens", json={"name": "mine", "role": "admin"}, headers=headers),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert refused[0].json()["detail"] == ["role 'viewer' cannot change the configuration."]

    form = viewer.post("/instances/orders/delete", data={"csrf_token": csrf})
    assert form.status_code == 403
    assert "can read but not change" in form.text

    viewer_token = make_token(client, admin_csrf, "viewer")
    bot = TestClient(client.app)
    as_token = bot.post(
        "/api/instances",
        json=instance_body(name="y"),
        headers={"Authorization": f"Bearer {viewer_token}"},
    )
    assert as_token.status_code == 403
    assert [i["name"] for i in client.get("/api/instances").json()] == ["orders"]
    assert client.get("/api/instances/orders").json()["host"] == "127.0.0.1"


def test_posts_riding_on_the_cookie_need_the_csrf_token(client: TestClient, admin_csrf: str):
    form = {"name": "orders", "host": "127.0.0.1", "password": MYSQL_PASSWORD}
    assert client.post("/instances/new", data=form).status_code == 403
    assert client.post("/instances/new", data={**form, "csrf_token": "forged"}).status_code == 403
    api = client.post("/api/instances", json=instance_body())
    assert api.status_code == 403
    assert "CSRF" in api.json()["detail"][0]
    assert client.post("/logout", follow_redirects=False).status_code == 403
    assert client.get("/api/instances").json() == [], "nothing was saved"

    ok = client.post("/api/instances", json=instance_body(), headers={"X-CSRF-Token": admin_csrf})
    assert ok.status_code == 201


def test_login_form_needs_its_own_token_and_refuses_open_redirects(client: TestClient):
    no_cookie = TestClient(client.app)
    response = no_cookie.post(
        "/login", data={"username": "admin", "password": "x", "csrf_token": "guess"}
    )
    assert response.status_code == 403

    page = client.get("/login?next=//evil.example/")
    assert 'name="next" value="/"' in page.text
    wrong = client.post(
        "/login",
        data={"username": "admin", "password": "wrong-password", "csrf_token": csrf_of(page.text)},
    )
    assert wrong.status_code == 401
    assert "Unknown user or wrong password." in wrong.text
    nobody = client.post(
        "/login",
        data={
            "username": "nobody",
            "password": "wrong-password",
            "csrf_token": csrf_of(wrong.text),
        },
    )
    assert nobody.status_code == 401


def test_session_cookie_flags_and_tampering(tmp_path: Path):
    with TestClient(make_app(tmp_path, secure_cookies=True), base_url="https://testserver") as c:
        page = c.get("/login")
        response = c.post(
            "/login",
            data={
                "username": "admin",
                "password": "admin-password-1",
                "csrf_token": csrf_of(page.text),
            },
            follow_redirects=False,
        )
        cookie = response.headers["set-cookie"]
        assert cookie.startswith("cdcm_session=")
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Secure" in cookie
        assert c.get("/api/me").status_code == 200
        value = c.cookies["cdcm_session"]
        c.cookies.set("cdcm_session", value[:-2] + ("AA" if not value.endswith("AA") else "BB"))
        assert c.get("/api/me").status_code == 401, "a tampered cookie is not a session"


def test_logout_ends_the_session(client: TestClient, admin_csrf: str):
    saved = client.cookies["cdcm_session"]
    assert (
        client.post("/logout", data={"csrf_token": admin_csrf}, follow_redirects=False).status_code
        == 303
    )
    replay = TestClient(client.app)
    replay.cookies.set("cdcm_session", saved)
    assert replay.get("/api/me").status_code == 401, "the old cookie no longer works"


def test_no_secret_in_any_page_api_response_log_line_or_database_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    with TestClient(make_app(tmp_path)) as client:
        csrf = login(client)
        headers = {"X-CSRF-Token": csrf}
        client.post("/api/instances", json=instance_body(), headers=headers)
        client.put(
            "/api/instances/orders",
            json=instance_body(password=MYSQL_PASSWORD + "-2"),
            headers=headers,
        )
        client.post("/api/table-mirrors", json=mirror_body(), headers=headers)
        client.post(
            "/api/replays",
            json={"instance": "orders", "db_prefix": "ordercenter", "table_prefix": "orderinfo"},
            headers=headers,
        )
        client.post(
            "/api/users", json={"username": "eve", "password": "Eve-Password-99"}, headers=headers
        )
        run_id = client.get("/api/replays").json()[0]["run_id"]
        bodies = []
        for path in [url for url, _ in NAVIGATION] + [
            "/instances/new",
            "/instances/orders",
            "/tables/new",
            "/tables/ordercenter_orderinfo",
            f"/replays/{run_id}",
            "/api-reference",
            "/openapi.json",
        ]:
            response = client.get(path)
            assert response.status_code == 200, path
            bodies.append(response.text)
        for path in [
            *API_READS[:-1],
            f"/api/replays/{run_id}",
            "/api/table-mirrors/ordercenter_orderinfo",
        ]:
            response = client.get(path)
            assert response.status_code == 200, path
            bodies.append(response.text)
        form = client.post(
            "/instances/orders",
            data={
                "csrf_token": csrf,
                "name": "orders",
                "host": "127.0.0.1",
                "include": "(",
                "password": MYSQL_PASSWORD,
            },
        )
        assert form.status_code == 422
        bodies.append(form.text)
    everything = "\n".join(bodies)
    for secret in (MYSQL_PASSWORD, "Eve-Password-99", "admin-password-1"):
        assert secret not in everything
        assert secret not in caplog.text
    database = (tmp_path / "webui.sqlite").read_bytes()
    for wal in tmp_path.glob("webui.sqlite-wal"):
        database += wal.read_bytes()
    assert MYSQL_PASSWORD.encode() not in database, "stored passwords are encrypted"
    assert b"Eve-Password-99" not in database, "user passwords are hashed"
    key_file = tmp_path / "webui.key"
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_pages_load_nothing_from_elsewhere_and_send_security_headers(
    client: TestClient, admin_csrf: str
):
    assert client.get("/docs").status_code == 404, "Swagger UI would load from a CDN"
    for path in [url for url, _ in NAVIGATION] + ["/api-reference", "/login"]:
        response = client.get(path)
        assert response.status_code == 200, path
        assets = re.findall(r'(?:src|href)="([^"]+)"', response.text)
        assert assets and all(a.startswith("/") for a in assets), (path, assets)
        assert "onsubmit=" not in response.text and "<script>" not in response.text
        assert response.headers["content-security-policy"].startswith("default-src 'self'")
        assert response.headers["x-frame-options"] == "DENY"
    for asset in ("/static/style.css", "/static/app.js"):
        assert client.get(asset).status_code == 200
    reference = client.get("/api-reference").text
    assert "/api/collector-config/{instance}" in reference and "CollectorConfig" in reference


def test_unknown_objects_are_a_404_page_or_problem(client: TestClient, admin_csrf: str):
    page = client.get("/instances/nope")
    assert page.status_code == 404
    assert "<h1>Not found</h1>" in page.text and "no instance named &#39;nope&#39;." in page.text
    api = client.get("/api/table-mirrors/nope")
    assert api.status_code == 404
    assert api.json() == {"detail": ["no table mirror named 'nope'."]}


def test_password_guessing_is_throttled_per_user(client: TestClient):
    page = client.get("/login")
    for _ in range(5):
        page = client.post(
            "/login",
            data={"username": "admin", "password": "guess-guess", "csrf_token": csrf_of(page.text)},
        )
        assert page.status_code == 401
    right = client.post(
        "/login",
        data={
            "username": "admin",
            "password": "admin-password-1",
            "csrf_token": csrf_of(page.text),
        },
    )
    assert right.status_code == 429
    assert "Too many failed logins for this user; try again in" in right.text
    assert client.get("/api/me").status_code == 401


def test_passwords_are_set_by_admins_or_changed_by_their_owner(client: TestClient, admin_csrf: str):
    create_viewer(client, admin_csrf)
    viewer = TestClient(client.app)
    viewer_csrf = login(viewer, "viewer", VIEWER_PASSWORD)
    refused = viewer.put(
        "/api/users/admin/password",
        json={"password": "Taken-over-123"},
        headers={"X-CSRF-Token": viewer_csrf},
    )
    assert refused.status_code == 403

    wrong = viewer.post(
        "/account/password",
        data={
            "csrf_token": viewer_csrf,
            "current_password": "not-it-at-all",
            "new_password": "New-viewer-pw-1",
        },
    )
    assert wrong.status_code == 422 and "current password: it does not match." in wrong.text
    short = viewer.post(
        "/account/password",
        data={
            "csrf_token": viewer_csrf,
            "current_password": VIEWER_PASSWORD,
            "new_password": "short",
        },
    )
    assert short.status_code == 422 and "at least 10 characters" in short.text
    changed = viewer.post(
        "/account/password",
        follow_redirects=False,
        data={
            "csrf_token": viewer_csrf,
            "current_password": VIEWER_PASSWORD,
            "new_password": "New-viewer-pw-1",
        },
    )
    assert changed.status_code == 303
    assert viewer.get("/api/me").status_code == 401, "sessions end with the old password"
    login(viewer, "viewer", "New-viewer-pw-1")

    reset = client.put(
        "/api/users/viewer/password",
        json={"password": "Reset-by-admin-9"},
        headers={"X-CSRF-Token": admin_csrf},
    )
    assert reset.status_code == 200
    assert viewer.get("/api/me").status_code == 401
    login(viewer, "viewer", "Reset-by-admin-9")
    audit = client.get("/api/audit").text
    for secret in ("New-viewer-pw-1", "Reset-by-admin-9", "short"):
        assert secret not in audit
    assert audit.count('"password":"(changed)"') == 2
