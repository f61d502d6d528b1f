"""The Redis adapter: every client of ``redis.url``, and the one table that turns redis-py's
errors into the product's (``simple_binlog.errors``).

``connect`` makes the client (redis-py connects on its first command, so an unreachable
server shows there, inside ``redis_errors``). Every call that can fail goes through
``redis_errors(doing, address)``, which raises what ``map_redis_error`` says: credentials
Redis refuses are a ``ConfigError`` (fix ``redis.url``), a server that cannot be reached a
``ServiceUnavailableError`` naming its host:port, and any other refusal a
``ServiceUnavailableError`` too (retried by ``cdc_platform.retry``, as before this table).
Messages name the address, never the URL: it may carry a password.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import redis
from redis import exceptions

from cdc_platform.config import RedisSettings
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError

CONNECT_TIMEOUT_S = 10

RedisClient = redis.Redis
RedisError = exceptions.RedisError

# Checked first: redis-py's AuthenticationError is a ConnectionError.
_REFUSED_CREDENTIALS = (
    exceptions.AuthenticationError,
    exceptions.AuthenticationWrongNumberOfArgsError,
    exceptions.AuthorizationError,
    exceptions.NoPermissionError,
)
_UNREACHABLE = (exceptions.ConnectionError, exceptions.TimeoutError)


def address(settings: RedisSettings) -> str:
    """``host:port`` of ``redis.url`` (or its socket path), without its credentials."""
    parts = urlsplit(settings.url.get_secret_value())
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def connect(settings: RedisSettings, *, socket_timeout_s: float = 30) -> redis.Redis:
    """A client of ``redis.url`` (values as bytes; nothing is sent until its first command)."""
    return redis.Redis.from_url(
        settings.url.get_secret_value(),
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
    )


def map_redis_error(error: exceptions.RedisError, doing: str, where: str) -> CdcMirrorError:
    """The product error for a redis-py error met while ``doing`` something (a noun
    phrase: "a mirror batch") on the Redis at ``where``."""
    if isinstance(error, _REFUSED_CREDENTIALS):
        return ConfigError(
            f"Redis at {where} refused the credentials of redis.url during {doing} ({error})."
        )
    if isinstance(error, _UNREACHABLE):
        return ServiceUnavailableError(f"Redis at {where} cannot be reached ({error}).")
    return ServiceUnavailableError(f"Redis refused {doing} ({error}).")


@contextmanager
def redis_errors(doing: str, where: str) -> Iterator[None]:
    """The boundary: a redis-py error inside becomes the product error of the table."""
    try:
        yield
    except exceptions.RedisError as exc:
        # from None: the sentence says it all; redis-py's chain only repeats it.
        raise map_redis_error(exc, doing, where) from None


def answers(host: str, port: int) -> bool:
    """Whether a Redis at ``host:port`` answers PING (quickly; for health checks)."""
    client = redis.Redis(host=host, port=port, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except exceptions.RedisError:
        return False
    finally:
        client.close()
