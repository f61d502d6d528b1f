"""Who is asking: a session cookie (people) or a bearer token (automation), and what they
may do.

- Session cookie ``cdcm_session``: the signed random session id; HttpOnly, SameSite=Lax,
  Secure when ``webui.secure_cookies``. The database keeps only the id's hash, the user and
  the session's CSRF token, so logout and disabling a user end the session at once.
- CSRF: every state-changing request that rides on the cookie must carry the session's token
  (form field ``csrf_token`` or header ``X-CSRF-Token``). Bearer-token requests carry no
  ambient credentials and need none. The login form, before any session, uses a signed
  double-submit cookie.
- Roles: ``admin`` edits, ``viewer`` reads; tokens may also have ``collector``, which may
  only read collector configs.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from webui.models import ApiToken, LoginSession, User
from webui.security import Keys, hash_token, new_csrf_token, new_session_id, verify_password

SESSION_COOKIE = "cdcm_session"
LOGIN_CSRF_COOKIE = "cdcm_login_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"

# Verifying against this keeps a login for an unknown user as slow as for a known one, so
# response times do not reveal which user names exist.
_DUMMY_HASH = "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"


@dataclass(frozen=True)
class Principal:
    name: str
    role: Literal["admin", "viewer", "collector"]
    kind: Literal["user", "token"]
    csrf_token: str | None = None  # sessions only

    @property
    def can_edit(self) -> bool:
        return self.role == "admin"

    @property
    def can_read(self) -> bool:
        return self.role in ("admin", "viewer")


def _hash_session_id(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def authenticate_password(db: Session, username: str, password: str) -> User | None:
    user = db.scalar(select(User).where(User.username == username))
    if user is None:
        verify_password(password, _DUMMY_HASH)
        return None
    if not verify_password(password, user.password_hash) or user.disabled:
        return None
    return user


def open_session(db: Session, keys: Keys, user: User, lifetime_s: int) -> str:
    """Store a new session; returns the signed cookie value."""
    session_id = new_session_id()
    now = datetime.now(UTC)
    db.execute(delete(LoginSession).where(LoginSession.expires_at < now))
    db.add(
        LoginSession(
            id_hash=_hash_session_id(session_id),
            user_id=user.id,
            csrf_token=new_csrf_token(),
            expires_at=now + timedelta(seconds=lifetime_s),
        )
    )
    return keys.sign(session_id)


def close_session(db: Session, keys: Keys, cookie: str | None) -> None:
    session_id = keys.unsign(cookie) if cookie else None
    if session_id:
        db.execute(delete(LoginSession).where(LoginSession.id_hash == _hash_session_id(session_id)))


def principal_from_cookie(db: Session, keys: Keys, cookie: str | None) -> Principal | None:
    session_id = keys.unsign(cookie) if cookie else None
    if not session_id:
        return None
    row = db.get(LoginSession, _hash_session_id(session_id))
    if row is None:
        return None
    expires = row.expires_at if row.expires_at.tzinfo else row.expires_at.replace(tzinfo=UTC)
    if expires < datetime.now(UTC) or row.user.disabled:
        return None
    role: Literal["admin", "viewer"] = "admin" if row.user.role == "admin" else "viewer"
    return Principal(row.user.username, role, "user", row.csrf_token)


def principal_from_bearer(db: Session, authorization: str | None) -> Principal | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    row = db.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token.strip())))
    if row is None or row.revoked:
        return None
    now = datetime.now(UTC)
    last = row.last_used_at
    if last is not None and last.tzinfo is None:
        last = last.replace(tzinfo=UTC)
    # At most one write a minute per token: collectors poll every few seconds, and a write
    # per poll would serialise them on the admin database.
    if last is None or now - last > timedelta(seconds=60):
        row.last_used_at = now
    role: Literal["admin", "viewer", "collector"] = (
        "admin" if row.role == "admin" else "collector" if row.role == "collector" else "viewer"
    )
    return Principal(f"token:{row.name}", role, "token")


class LoginThrottle:
    """Failed logins per user name: after ``max_failures`` within ``window_s`` the name is
    refused for the rest of the window, whatever the password (slows password guessing).
    In memory, per process; a successful login clears the name's failures."""

    def __init__(
        self,
        max_failures: int = 5,
        window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_failures
        self._window = window_s
        self._clock = clock
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, username: str) -> float:
        """Seconds until ``username`` may try again (0: now)."""
        with self._lock:
            recent = self._recent(username)
            if len(recent) < self._max:
                return 0.0
            return max(0.0, recent[0] + self._window - self._clock())

    def failed(self, username: str) -> None:
        with self._lock:
            self._recent(username).append(self._clock())
            if len(self._failures) > 10_000:  # bounded memory under a spray of names
                self._failures = {k: v for k, v in self._failures.items() if v}

    def succeeded(self, username: str) -> None:
        with self._lock:
            self._failures.pop(username, None)

    def _recent(self, username: str) -> list[float]:
        cutoff = self._clock() - self._window
        recent = [t for t in self._failures.get(username, []) if t > cutoff]
        self._failures[username] = recent
        return recent


def csrf_ok(principal: Principal, submitted: str | None) -> bool:
    if principal.kind == "token":
        return True
    if not submitted or principal.csrf_token is None:
        return False
    return hmac.compare_digest(submitted, principal.csrf_token)
