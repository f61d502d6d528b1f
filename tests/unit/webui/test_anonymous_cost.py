"""What an anonymous client can make the admin spend: password hashing never stalls the event
loop nor holds a database connection, logins in flight are capped, login throttling by
address (IPv6 by /64) and by user name (with a backoff that fresh addresses get too) counts
attempts before checking them, with bounded memory and bounded locks, and request bodies are
cut at a per-route size before anything parses them (large sizes only with credentials)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.unit.webui.harness import (
    ADMIN_PASSWORD,
    csrf_of,
    instance_body,
    login,
    make_app,
    make_token,
)
from webui import auth
from webui.auth import LOGIN_CSRF_COOKIE, HashingPool, LoginThrottle
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
    method: str = "POST",
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
        "method": method,
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
    assert body_limit_for("POST", "/governance/lookup-tables", True) > MAX_LOOKUP_UPLOAD_BYTES
    assert body_limit_for("POST", "/governance/lookup-tables") <= 256 * 1024
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


# --- logins in parallel -------------------------------------------------------------------


class _HeldChecks:
    """Stands in for ``verify_password``: each check is counted and then held until
    ``release``; ``answered`` counts the login responses, so a test can wait (on a condition,
    not a timer) until every login has either reached the check or been answered."""

    def __init__(self) -> None:
        self.entered = 0
        self.answered = 0
        self.codes: list[int] = []
        self.changed = threading.Condition()
        self._release = threading.Event()
        self._real = auth.verify_password

    def verify(self, password: str, stored: str) -> bool:
        with self.changed:
            self.entered += 1
            self.changed.notify_all()
        assert self._release.wait(timeout=30), "the test never released the check"
        return self._real(password, stored)

    def wait_until(self, predicate: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout=30), (self.entered, self.answered)

    def release(self) -> None:
        self._release.set()

    def post(self, client: TestClient, username: str, password: str) -> threading.Thread:
        """One login in a thread of its own, with its own login-form cookie (the client's
        cookie jar is shared and every answer replaces that cookie)."""
        token = "parallel-login-form"
        keys = client.app.state.ctx.keys  # type: ignore[attr-defined]
        headers = {"Cookie": f"{LOGIN_CSRF_COOKIE}={keys.sign(token)}"}
        form = {"username": username, "password": password, "csrf_token": token}

        def run() -> None:
            code = client.post(
                "/login", data=form, headers=headers, follow_redirects=False
            ).status_code
            with self.changed:
                self.codes.append(code)
                self.answered += 1
                self.changed.notify_all()

        thread = threading.Thread(target=run)
        thread.start()
        return thread


def _use_hashing(client: TestClient, monkeypatch: pytest.MonkeyPatch, hashing: HashingPool) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    monkeypatch.setattr(state, "ctx", dataclasses.replace(state.ctx, hashing=hashing))


def test_concurrent_logins_hold_no_database_connection_and_block_no_other_request(
    client: TestClient, admin_csrf: str, monkeypatch: pytest.MonkeyPatch
):
    viewer_token = make_token(client, admin_csrf, "viewer")
    engine = client.app.state.ctx.sessions.kw["bind"]  # type: ignore[attr-defined]
    checks = _HeldChecks()
    monkeypatch.setattr(auth, "verify_password", checks.verify)
    # 16 logins (different names, so the throttle lets all of them through): 4 in the
    # hashing threads, 12 waiting for one.
    threads = [checks.post(client, f"user{i}", "wrong-password") for i in range(16)]
    checks.wait_until(lambda: checks.entered == 4)
    try:
        assert engine.pool.checkedout() == 0, (
            "logins hold database connections while their password is checked"
        )
        # A request that needs the database is answered while all of them are in flight.
        me = client.get("/api/me", headers={"Authorization": f"Bearer {viewer_token}"})
        assert me.status_code == 200
        assert checks.answered == 0, "the other request was answered only after the logins"
    finally:
        checks.release()
        for thread in threads:
            thread.join(timeout=60)
    assert sorted(checks.codes) == [401] * 16
    assert engine.pool.checkedout() == 0


def test_logins_beyond_the_cap_are_refused_at_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
):
    _use_hashing(client, monkeypatch, HashingPool(concurrency=2, max_waiting=0))
    checks = _HeldChecks()
    monkeypatch.setattr(auth, "verify_password", checks.verify)
    threads = [checks.post(client, f"user{i}", "wrong-password") for i in range(2)]
    checks.wait_until(lambda: checks.entered == 2)
    try:
        page = client.get("/login")
        refused = client.post(
            "/login",
            data={
                "username": "admin",
                "password": ADMIN_PASSWORD,
                "csrf_token": csrf_of(page.text),
            },
            follow_redirects=False,
        )
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert checks.entered == 2 and checks.answered == 0
    finally:
        checks.release()
        for thread in threads:
            thread.join(timeout=60)
    assert sorted(checks.codes) == [401, 401]
    # A refused-as-busy attempt was not counted: the admin logs in at once afterwards.
    assert _attempt(client, "admin", ADMIN_PASSWORD) == 303


def test_parallel_wrong_passwords_cannot_race_past_the_throttle(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
):
    # Room for all 15 in the hashing threads, so only the throttle can hold them back.
    _use_hashing(client, monkeypatch, HashingPool(16))
    checks = _HeldChecks()
    monkeypatch.setattr(auth, "verify_password", checks.verify)
    threads = [checks.post(client, "admin", f"guess-{i}-password") for i in range(15)]
    # Every attempt has either reached the password check or been answered already.
    checks.wait_until(lambda: checks.entered + checks.answered == 15)
    checks.release()
    for thread in threads:
        thread.join(timeout=60)
    assert checks.entered <= 5, f"{checks.entered} guesses were checked; the limit is 5"
    assert sorted(checks.codes) == [401] * checks.entered + [429] * (15 - checks.entered)


# --- addresses and the per-user backoff ---------------------------------------------------


def test_a_thousand_addresses_in_one_ipv6_64_share_one_budget():
    throttle = LoginThrottle(max_failures=5, max_address_failures=20, clock=lambda: 1000.0)
    allowed = 0
    for i in range(1000):
        address = f"2001:db8:aa:bb:{i // 256:x}:{i % 256:x}::{i:x}"
        if throttle.retry_after(address, f"name{i}") == 0:
            allowed += 1
            throttle.failed(address, f"name{i}")
    assert allowed == 20
    assert throttle.retry_after("2001:db8:aa:cc::1", "other") == 0, "another /64 is its own"
    assert throttle.retry_after("::ffff:192.0.2.1", "other") == 0


def test_ipv6_neighbours_share_the_address_lock_over_http(tmp_path: Path):
    app = make_app(tmp_path)
    with (
        TestClient(app, client=("2001:db8:5:6::1", 40000)) as first,
        TestClient(app, client=("2001:db8:5:6:ffff:eeee:dddd:cccc", 40000)) as neighbour,
        TestClient(app, client=("2001:db8:5:7::1", 40000)) as elsewhere,
    ):
        codes = [_attempt(first, f"user{i}", "guess-password") for i in range(20)]
        assert codes == [401] * 20
        assert _attempt(neighbour, "fresh-name", "guess-password") == 429
        assert _attempt(elsewhere, "fresh-name", "guess-password") == 401


def test_fresh_addresses_get_the_per_user_backoff_which_stays_bounded():
    now = [1000.0]
    throttle = LoginThrottle(window_s=300, clock=lambda: now[0])
    allowed = 0
    for i in range(1000):
        address = f"10.{i // 256}.{i % 256}.1"  # a new address every time
        wait = throttle.retry_after(address, "admin")
        assert wait <= 60, "the backoff grew beyond its bound"
        if wait == 0:
            allowed += 1
            throttle.failed(address, "admin")
    assert allowed == 10, f"{allowed} guesses at one user from fresh addresses"
    # Bounded: a fresh address (the real user) waits at most the largest backoff ...
    assert 0 < throttle.retry_after("198.51.100.7", "admin") <= 60
    # ... and once the backoff has passed it gets its try, even while failures are recent.
    now[0] += 60
    assert throttle.retry_after("198.51.100.7", "admin") == 0
    # When the guessing stops, everything ends with the window.
    now[0] += 300
    assert throttle.retry_after("10.0.0.1", "admin") == 0


def test_fresh_addresses_get_the_per_user_backoff_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    app = make_app(tmp_path)
    ctx = app.state.ctx
    monkeypatch.setattr(
        app.state, "ctx", dataclasses.replace(ctx, login_throttle=LoginThrottle(global_failures=3))
    )
    codes = []
    for i in range(4):
        with TestClient(app, client=(f"203.0.113.{i + 1}", 40000)) as fresh:
            codes.append(_attempt(fresh, "admin", f"guess-{i}-password"))
    assert codes == [401, 401, 401, 429]


# --- large bodies only with credentials ---------------------------------------------------

THIRTY_MB = 30 * 1024 * 1024


@pytest.mark.parametrize(
    ("method", "path", "authorization"),
    [
        ("POST", "/api/governance/lookup-tables", None),
        ("PUT", "/api/governance/lookup-tables/big", None),
        ("POST", "/api/governance/lookup-tables", b"Bearer cdcm_not-a-real-token"),
        ("POST", "/governance/lookup-tables", None),
    ],
)
def test_an_anonymous_30_mb_upload_is_refused_before_it_is_read(
    app: object, method: str, path: str, authorization: bytes | None
):
    receive = _Receive([b"{" * 1024])
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(THIRTY_MB).encode()),
    ]
    if authorization is not None:
        headers.append((b"authorization", authorization))
    assert _call(app, path, headers, receive, method=method) == 413
    assert receive.calls == 0, "an anonymous upload was read before the refusal"


def test_an_admin_uploads_15_mb_with_a_session_or_a_token(client: TestClient, admin_csrf: str):
    entries = {f"old-value-{i:08d}": f"new-value-{i:08d}" for i in range(400_000)}
    body = json.dumps({"name": "big", "entries": entries}).encode()
    assert 15 * 2**20 <= len(body) < 20 * 2**20
    headers = {"X-CSRF-Token": admin_csrf, "Content-Type": "application/json"}
    created = client.post("/api/governance/lookup-tables", content=body, headers=headers)
    assert created.status_code == 201, created.text[:500]
    assert created.json() == {"name": "big", "entries": 400_000}
    token = make_token(client, admin_csrf, "admin")
    client.cookies.clear()
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    replaced = client.put("/api/governance/lookup-tables/big", content=body, headers=bearer)
    assert replaced.status_code == 200, replaced.text[:500]
