"""Secrets of the web admin: password hashes, API tokens, signed session cookies, CSRF tokens
and the encryption of stored MySQL passwords. Pure functions plus one key loader; no I/O
beyond reading or creating the key file.

One master secret (``webui.secret_key`` or the key file) is stretched into separate keys per
purpose, so a leaked session-signing key does not decrypt stored passwords and vice versa.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from cdc_platform.config import Settings
from simple_binlog.errors import ConfigError

log = logging.getLogger(__name__)

# scrypt cost: n=2**14, r=8 takes ~50 ms and 16 MiB per login here; enough to make offline
# guessing slow, cheap enough for a login form.
_SCRYPT_N = 2**14
_SCRYPT_R = 8
_SCRYPT_P = 1
_HASH_SCHEME = "scrypt"
MIN_SECRET_KEY_LENGTH = 32
TOKEN_PREFIX = "cdcm_"  # noqa: S105 - a public prefix that makes tokens greppable


def hash_password(password: str) -> str:
    """``scrypt$n$r$p$salt$hash`` (base64 parts); a fresh salt per call."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32
    )
    return "$".join(
        [_HASH_SCHEME, str(_SCRYPT_N), str(_SCRYPT_R), str(_SCRYPT_P), _b64(salt), _b64(digest)]
    )


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != _HASH_SCHEME:
            return False
        candidate = hashlib.scrypt(
            password.encode(),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(_unb64(digest)),
        )
    except ValueError:
        return False
    return hmac.compare_digest(candidate, _unb64(digest))


def new_api_token() -> str:
    """A random token shown once; only its hash is stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    # Tokens carry 256 random bits, so a plain SHA-256 is as good as a slow hash here and
    # lets a request look its token up by hash.
    return hashlib.sha256(token.encode()).hexdigest()


def new_session_id() -> str:
    return secrets.token_urlsafe(32)


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class Keys:
    """Keys derived from the master secret, one per purpose."""

    signing: bytes
    fernet: Fernet

    @classmethod
    def from_master(cls, master: bytes) -> Keys:
        signing = hmac.new(master, b"cdc-mirror webui session signing", "sha256").digest()
        encryption = hmac.new(master, b"cdc-mirror webui secret encryption", "sha256").digest()
        return cls(signing=signing, fernet=Fernet(base64.urlsafe_b64encode(encryption)))

    def sign(self, value: str) -> str:
        mac = hmac.new(self.signing, value.encode(), "sha256").digest()
        return f"{value}.{_b64(mac)}"

    def unsign(self, signed: str) -> str | None:
        value, _, mac = signed.rpartition(".")
        if not value:
            return None
        expected = _b64(hmac.new(self.signing, value.encode(), "sha256").digest())
        return value if hmac.compare_digest(expected, mac) else None

    def encrypt(self, plaintext: str) -> str:
        return self.fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, ciphertext: str) -> str:
        try:
            return self.fernet.decrypt(ciphertext.encode()).decode()
        except InvalidToken:
            raise ConfigError(
                "a stored password cannot be decrypted: the web admin's secret key changed "
                "since it was saved; enter the password again."
            ) from None


def load_keys(settings: Settings, *, secrets_stored: bool = False) -> Keys:
    """The configured secret key, else the key file (created with mode 0600 when missing).

    ``secrets_stored``: the database holds values encrypted with the key. A missing key file
    is then refused instead of replaced, since a new key would leave every stored secret
    unreadable without a word.
    """
    configured = settings.webui.secret_key
    if configured is not None:
        secret = configured.get_secret_value()
        if len(secret) < MIN_SECRET_KEY_LENGTH:
            raise ConfigError(
                f"config field 'webui.secret_key' is invalid: it must be at least "
                f"{MIN_SECRET_KEY_LENGTH} characters."
            )
        return Keys.from_master(secret.encode())
    path = settings.webui.secret_key_file or settings.stack.home / "webui.key"
    return Keys.from_master(_read_or_create_key_file(path, may_create=not secrets_stored))


def _read_or_create_key_file(path: Path, *, may_create: bool) -> bytes:
    if not path.exists() and not may_create:
        raise ConfigError(
            f"the web admin's key file {path} is missing but its database holds passwords "
            "encrypted with it; restore that file from a backup (or set webui.secret_key to "
            "the same secret) before starting."
        )
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL: two processes starting at once never overwrite each other's key.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(48) + "\n")
            log.info("created the web admin's secret key file %s (mode 0600)", path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ConfigError(
            f"the web admin's key file {path} is readable by other users (mode {mode:o}); "
            f"run 'chmod 600 {path}'."
        )
    secret = path.read_text().strip().encode()
    if len(secret) < MIN_SECRET_KEY_LENGTH:
        raise ConfigError(f"the web admin's key file {path} holds fewer than 32 characters.")
    return secret


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
