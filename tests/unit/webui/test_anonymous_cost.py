"""What an anonymous client can make the admin spend: password hashing never stalls the event
loop, login throttling by address and by user name with bounded memory and bounded locks,
and request bodies cut at a per-route size before anything parses them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.unit.webui.harness import ADMIN_PASSWORD, csrf_of, instance_body, login, make_app
from webui import auth
from webui.auth import LoginThrottle
from webui.governance_pages import MAX_LOOKUP_UPLOAD_BYTES

FORTY_MB = 40 * 1024 * 1024


def _attempt(client: TestClient, username: str, password: str) -> int:
    page = client.get("/login")
    return client.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": csrf_of(page.text)},
        follow_redirects=False,
    ).status_code


def test_a_login_hashing_does_not_block_other_requests(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
):
    entered, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}
    real_verify = auth.verify_password

    def slow_verify(password: str, stored: str) -> bool:
        entered.set()
        # Held until the other request has been answered: on the event loop this would
        # hold that request too, and the wait would end by its timeout instead.
        outcome["released"] = release.wait(timeout=10)
        return real_verify(password, stored)

    monkeypatch.setattr(auth, "verify_password", slow_verify)
    page = client.get("/login")
    form = {"username": "admin", "password": "wrong-password", "csrf_token": csrf_of(page.text)}

    def log_in() -> None:
        outcome["login"] = client.post("/login", data=form, follow_redirects=False).status_code

    worker = threading.Thread(target=log_in)
    worker.start()
    assert entered.wait(timeout=10), "the login never reached the password check"
    outcome["other"] = client.get("/login").status_code
    release.set()
    worker.join(timeout=30)
    assert outcome == {"released": True, "other": 200, "login": 401}


def test_one_address_spraying_user_names_is_throttled(client: TestClient):
    codes = [_attempt(client, f"user{i}", "guess-password") for i in range(25)]
    assert codes[0] == 401
    assert 429 in codes, "an address guessing across many user names is never slowed"
    first = codes.index(429)
    assert set(codes[first:]) == {429}
    # Even the right password is refused to that address while it is locked.
    assert _attempt(client, "admin", ADMIN_PASSWORD) == 429


def test_a_locked_user_still_logs_in_from_an_address_that_has_not_failed(tmp_path: Path):
    app = make_app(tmp_path)
    with (
        TestClient(app, client=("203.0.113.66", 40000)) as attacker,
        TestClient(app, client=("198.51.100.7", 40000)) as owner,
    ):
        codes = [_attempt(attacker, "admin", f"guess-{i}-password") for i in range(8)]
        assert codes[-1] == 429, "the user name is locked for the guessing address"
        assert _attempt(attacker, "admin", ADMIN_PASSWORD) == 429
        assert _attempt(owner, "admin", ADMIN_PASSWORD) == 303, (
            "an attacker's failures keep the real user out"
        )


def test_locks_end_after_the_window():
    now = [1000.0]
    throttle = LoginThrottle(
        max_failures=3, max_address_failures=10, window_s=60, clock=lambda: now[0]
    )
    for _ in range(3):
        throttle.failed("10.0.0.1", "admin")
    assert throttle.retry_after("10.0.0.1", "admin") == pytest.approx(60)
    now[0] += 30
    # Refused attempts do not count as failures, so they cannot stretch the lock.
    assert throttle.retry_after("10.0.0.1", "admin") == pytest.approx(30)
    now[0] += 30.5
    assert throttle.retry_after("10.0.0.1", "admin") == 0


def test_throttle_memory_is_bounded_and_evicts_the_oldest():
    throttle = LoginThrottle(max_failures=3, max_address_failures=3, max_keys=100)
    for i in range(5000):
        throttle.failed(f"10.{i // 256 % 256}.{i % 256}.1", f"spray{i}")
    assert throttle.tracked_keys() <= 100
    for _ in range(3):
        throttle.failed("192.0.2.1", "newest")
    assert throttle.retry_after("192.0.2.1", "newest") > 0, "the newest keys are kept"
    assert throttle.retry_after("10.0.0.1", "spray0") == 0, "the oldest keys were evicted"


class _Receive:
    """An ASGI ``receive`` that counts how often the app asked for the body."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.calls = 0
        self._chunks = chunks

    async def __call__(self) -> dict[str, object]:
        self.calls += 1
        if self._chunks:
            chunk = self._chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(self._chunks)}
        return {"type": "http.disconnect"}


def _call(
    app: object,
    path: str,
    headers: list[tuple[bytes, bytes]],
    receive: _Receive,
    sent: list[dict[str, object]] | None = None,
) -> int:
    """One request straight through the app's ASGI interface (no client that would read
    the whole body first); returns the status."""
    import anyio

    sent = [] if sent is None else sent

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("203.0.113.9", 5000),
        "server": ("testserver", 80),
        "state": {},
    }
    anyio.run(app, scope, receive, send)  # type: ignore[arg-type]
    start = next(m for m in sent if m["type"] == "http.response.start")
    return int(start["status"])  # type: ignore[call-overload]


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[object]:
    app = make_app(tmp_path)
    with TestClient(app):
        yield app


@pytest.mark.parametrize("path", ["/login", "/api/instances", "/api/tokens"])
def test_a_declared_40_mb_body_is_refused_before_it_is_read(app: object, path: str):
    receive = _Receive([b"{" * 1024])
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(FORTY_MB).encode()),
    ]
    assert _call(app, path, headers, receive) == 413
    assert receive.calls == 0, "the body was read although its declared size is refused"


def test_a_chunked_body_without_length_is_cut_once_it_passes_the_limit(app: object):
    receive = _Receive([b" " * (1024 * 1024) for _ in range(40)])
    sent: list[dict[str, object]] = []
    status = _call(app, "/api/instances", [(b"content-type", b"application/json")], receive, sent)
    assert status == 413
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")  # type: ignore[misc]
    assert body == (
        b'{"detail":["the request body is larger than the 262144 bytes this URL accepts."]}'
    )
    assert receive.calls == 1, f"{receive.calls} MiB were read before the refusal"


def test_the_login_form_takes_only_a_small_body(client: TestClient):
    page = client.get("/login")
    response = client.post(
        "/login",
        data={
            "username": "admin",
            "password": "x" * FORTY_MB,
            "csrf_token": csrf_of(page.text),
        },
    )
    assert response.status_code == 413
    assert "x" * 100 not in response.text


def test_routes_that_need_large_bodies_get_them(client: TestClient, admin_csrf: str):
    from webui.app import body_limit_for

    assert body_limit_for("POST", "/login") <= 16 * 1024
    assert body_limit_for("PUT", "/api/instances/orders") <= 256 * 1024
    assert body_limit_for("POST", "/governance/lookup-tables") > MAX_LOOKUP_UPLOAD_BYTES
    # A normal request still passes through the limit untouched.
    headers = {"X-CSRF-Token": admin_csrf}
    created = client.post("/api/instances", json=instance_body(), headers=headers)
    assert created.status_code == 201, created.text
    rows = "\n".join(f"old{i},new{i}" for i in range(40_000))  # ~0.6 MiB of CSV
    upload = client.post(
        "/governance/lookup-tables",
        data={"csrf_token": admin_csrf, "name": "big"},
        files={"file": ("big.csv", rows.encode(), "text/csv")},
        follow_redirects=False,
    )
    assert upload.status_code == 303, upload.text[:500]
    assert login(TestClient(client.app))  # the login form still works with a normal body
