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
  only read the collector config of the one instance it was made for (and the configuration
  snapshot with that instance's password), ``component``, which may only read the
  configuration snapshot, without any password, or ``source_reader``, which may only read the
  configuration snapshot of the one instance it was made for, with that instance's password
  (for a command that reads MySQL itself: ``cdc-mirror validate`` and its repair; every read
  audited under the token's name).
- Tokens work until they expire, are revoked, or their owner's account is disabled.
- Password hashing (scrypt: ~50 ms and 16 MiB each) runs in worker threads, a few at a time,
  never on the event loop; the user lookup runs in the same worker thread and its database
  connection is returned before the hash is checked. Logins in flight are capped
  (``HashingPool.max_waiting``): beyond the cap a login is refused at once (503).
- Login throttling (``LoginThrottle``) counts failures per client address (IPv6 by /64) and
  per user name; an attempt is counted before its password is checked.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, ParamSpec, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from webui.models import ApiToken, LoginSession, User
from webui.security import Keys, hash_token, new_csrf_token, new_session_id, verify_password

SESSION_COOKIE = "cdcm_session"
LOGIN_CSRF_COOKIE = "cdcm_login_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"

# Verifying against this keeps a login for an unknown user as slow as for a known one, so
# response times do not reveal which user names exist.
_DUMMY_HASH = "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"


_P = ParamSpec("_P")
_T = TypeVar("_T")


@dataclass(frozen=True)
class Principal:
    name: str
    role: Literal["admin", "viewer", "collector", "component", "source_reader"]
    kind: Literal["user", "token"]
    csrf_token: str | None = None  # sessions only
    # The user answerable for what this principal does: the user of a session, the user who
    # made a token (a token made with a token belongs to that token's owner).
    owner: str | None = None
    # collector and source_reader tokens: the one instance whose config (and password) they read
    instance: str | None = None

    @property
    def can_edit(self) -> bool:
        return self.role == "admin"

    @property
    def can_read(self) -> bool:
        return self.role in ("admin", "viewer")


def _hash_session_id(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class LoginBusy(Exception):
    """More logins are in flight than ``HashingPool`` admits; answer at once, do not queue."""


class HashingPool:
    """Runs password hashing in worker threads, at most ``concurrency`` at once: the event
    loop stays free for other requests, and a flood of logins costs bounded memory. At most
    ``max_waiting`` more wait for a thread; beyond that ``run`` raises ``LoginBusy`` at once,
    so a flood of logins neither queues without bound nor holds requests open."""

    def __init__(self, concurrency: int = 4, max_waiting: int = 16) -> None:
        self._concurrency = concurrency
        self._max_in_flight = concurrency + max_waiting
        self._in_flight = 0  # only touched on the event loop
        self._limiter: anyio.CapacityLimiter | None = None  # made inside the event loop

    async def run(self, function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if self._in_flight >= self._max_in_flight:
            raise LoginBusy
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._concurrency)
        self._in_flight += 1
        try:
            return await anyio.to_thread.run_sync(
                lambda: function(*args, **kwargs), limiter=self._limiter
            )
        finally:
            self._in_flight -= 1


@dataclass(frozen=True)
class Authenticated:
    user_id: int
    username: str


def _check_password(
    sessions: sessionmaker[Session], username: str, password: str
) -> Authenticated | None:
    """In a worker thread: the user's stored hash, read with a connection that is returned
    before the (slow) hash check, then the check."""
    with sessions() as db:
        user = db.scalar(select(User).where(User.username == username))
        found = (
            None if user is None else (user.id, user.username, user.password_hash, user.disabled)
        )
    stored = found[2] if found is not None else _DUMMY_HASH
    # Looked up at call time (not bound at import), so tests can watch the check.
    matches = verify_password(password, stored)
    if found is None or not matches or found[3]:
        return None
    return Authenticated(found[0], found[1])


async def authenticate_password(
    sessions: sessionmaker[Session], hashing: HashingPool, username: str, password: str
) -> Authenticated | None:
    """The user, when the password is right and the account enabled. Nothing of it runs on
    the event loop, and no database connection is held while the hash is checked. Raises
    ``LoginBusy`` when too many logins are in flight."""
    return await hashing.run(_check_password, sessions, username, password)


def open_session_for(
    sessions: sessionmaker[Session], keys: Keys, user: Authenticated, lifetime_s: int
) -> str:
    """``open_session`` in its own transaction (for a worker thread); the signed cookie."""
    with sessions.begin() as db:
        row = db.get(User, user.user_id)
        if row is None or row.disabled:
            raise LookupError(user.username)
        return open_session(db, keys, row, lifetime_s)


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
    return Principal(row.user.username, role, "user", row.csrf_token, owner=row.user.username)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def principal_from_bearer(db: Session, authorization: str | None) -> Principal | None:
    """The token's principal; None when it is unknown, revoked, expired, or its owner's
    account is disabled (tokens made by the command line have no account)."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    found = db.execute(
        select(ApiToken, User.disabled)
        .outerjoin(User, User.username == ApiToken.created_by)
        .where(ApiToken.token_hash == hash_token(token.strip()))
    ).first()
    if found is None:
        return None
    row, owner_disabled = found
    now = datetime.now(UTC)
    if row.revoked or owner_disabled or _aware(row.expires_at) <= now:
        return None
    last = row.last_used_at
    if last is not None and last.tzinfo is None:
        last = last.replace(tzinfo=UTC)
    # At most one write a minute per token: collectors poll every few seconds, and a write
    # per poll would serialise them on the admin database.
    if last is None or now - last > timedelta(seconds=60):
        row.last_used_at = now
    role: Literal["admin", "viewer", "collector", "component", "source_reader"] = (
        "admin"
        if row.role == "admin"
        else "collector"
        if row.role == "collector"
        else "component"
        if row.role == "component"
        else "source_reader"
        if row.role == "source_reader"
        else "viewer"
    )
    return Principal(
        f"token:{row.name}", role, "token", owner=row.created_by, instance=row.instance
    )


class LoginThrottle:
    """Failed logins per client address and per user name, in memory, per process.

    - Addresses are keyed by network: an IPv4 address by itself (/32), an IPv6 address by its
      /64 (one host usually holds a whole /64, so its addresses share one budget).
    - An address with ``max_address_failures`` failures within ``window_s`` is refused,
      whatever the name and password, until the oldest of them leaves the window (stops one
      address from guessing across many names).
    - A name with ``max_failures`` failures within the window is refused to addresses that
      have themselves failed within the window.
    - A name with ``global_failures`` failures within the window, from anywhere, is in
      backoff: every attempt for it, from any address (also one that never failed), waits
      until ``2 ** (failures - global_failures)`` seconds, at most ``max_backoff_s``, have
      passed since its last failure. This is what stops guessing from many fresh addresses:
      it gets one guess per backoff period at most. The trade-off: while an attacker keeps
      guessing, the real user may also be asked to wait, but never longer than
      ``max_backoff_s`` after the last failure, and the backoff ends with the window once the
      failures stop; the real user is never locked out for good.
    - An attempt is counted as a failure when it starts (``reserve``), before its password is
      checked, so parallel attempts cannot all pass the check; a successful login gives the
      address its attempt back and clears the name's failures, an attempt that was never
      evaluated (``release``) gives both back.
    - Refused attempts are not counted, so every lock ends at most ``window_s`` after it
      began.
    - At most ``max_keys`` names and addresses are tracked; the least recently failing are
      forgotten first, so a spray of names costs bounded memory.

    The address is the peer of the connection (``request.client``); behind a reverse proxy
    all clients share the proxy's address, so the address limit then covers them all.
    """

    def __init__(
        self,
        max_failures: int = 5,
        max_address_failures: int = 20,
        window_s: float = 300.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        global_failures: int = 10,
        max_backoff_s: float = 60.0,
    ) -> None:
        self._max = {"user": max_failures, "address": max_address_failures}
        self._global = global_failures
        self._max_backoff = max_backoff_s
        # A name keeps enough failures for both of its rules (bounded: the backoff's growth
        # stops at max_backoff_s after a few doublings anyway).
        self._keep = {
            "user": max(max_failures, global_failures + 8),
            "address": max_address_failures,
        }
        self._window = window_s
        self._max_keys = max_keys
        self._clock = clock
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, address: str, username: str) -> float:
        """Seconds until ``address`` may try ``username`` again (0: now)."""
        with self._lock:
            return self._wait(address_key(address), _name_key(username))

    def reserve(self, address: str, username: str) -> float:
        """Count an attempt before its password is checked: 0 when it may go ahead (and is
        now counted as a failure until ``succeeded`` or ``release``), else the seconds to
        wait (nothing counted)."""
        with self._lock:
            wait = self._wait(address_key(address), _name_key(username))
            if wait <= 0:
                self._record(address, username)
            return wait

    def refused_for(self, address: str) -> bool:
        """Whether the address itself (not only the name) is what is locked."""
        with self._lock:
            return self._lock_left(("address", address_key(address))) > 0

    def failed(self, address: str, username: str) -> None:
        with self._lock:
            self._record(address, username)

    def succeeded(self, address: str, username: str) -> None:
        """After a reserved attempt succeeded: the address gets that attempt back (its other
        failures stay: a login of its own must not clear them), the name's failures go."""
        with self._lock:
            self._give_back(("address", address_key(address)))
            self._failures.pop(("user", _name_key(username)), None)

    def release(self, address: str, username: str) -> None:
        """A reserved attempt that was never evaluated (e.g. refused as busy)."""
        with self._lock:
            self._give_back(("address", address_key(address)))
            self._give_back(("user", _name_key(username)))

    def tracked_keys(self) -> int:
        with self._lock:
            return len(self._failures)

    def _wait(self, address: str, name: str) -> float:
        by_address = self._lock_left(("address", address))
        backoff = self._backoff_left(name)
        if not self._recent(("address", address)):
            # A clean address is not held by the name's failures, only by its backoff.
            return max(by_address, backoff)
        return max(by_address, backoff, self._lock_left(("user", name)))

    def _record(self, address: str, username: str) -> None:
        for key in (("address", address_key(address)), ("user", _name_key(username))):
            times = self._recent(key)
            if key not in self._failures:
                self._failures[key] = times
            self._failures.move_to_end(key)
            times.append(self._clock())
        while len(self._failures) > self._max_keys:
            self._failures.popitem(last=False)

    def _give_back(self, key: tuple[str, str]) -> None:
        times = self._failures.get(key)
        if times:
            times.pop()
            if not times:
                del self._failures[key]

    def _lock_left(self, key: tuple[str, str]) -> float:
        times = self._recent(key)
        limit = self._max[key[0]]
        if len(times) < limit:
            return 0.0
        return max(0.0, times[-limit] + self._window - self._clock())

    def _backoff_left(self, name: str) -> float:
        times = self._recent(("user", name))
        if len(times) < self._global:
            return 0.0
        delay = min(self._max_backoff, 2.0 ** (len(times) - self._global))
        return max(0.0, times[-1] + delay - self._clock())

    def _recent(self, key: tuple[str, str]) -> deque[float]:
        """The key's failures within the window (oldest first); a key without any is dropped."""
        times = self._failures.get(key)
        if times is None:
            return deque(maxlen=self._keep[key[0]])
        cutoff = self._clock() - self._window
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._failures[key]
        return times


def address_key(address: str) -> str:
    """The throttle's key for a client address: IPv4 by itself, IPv6 by its /64 (an
    IPv4-mapped IPv6 address as the IPv4 address); anything else as given, kept short."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:80]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _name_key(username: str) -> str:
    # Real names are at most 64 characters; a longer one is kept short in memory.
    return username[:80]


def csrf_ok(principal: Principal, submitted: str | None) -> bool:
    if principal.kind == "token":
        return True
    if not submitted or principal.csrf_token is None:
        return False
    return hmac.compare_digest(submitted, principal.csrf_token)
