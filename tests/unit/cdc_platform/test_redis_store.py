"""The one table from redis-py's errors to the product's: refused credentials are a
configuration error, an unreachable server names its address, anything else Redis refuses is
retried; and the address never carries the URL's password."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from redis import exceptions

from cdc_platform.config import RedisSettings
from cdc_platform.redis_store import address, map_redis_error, redis_errors
from cdc_platform.retry import is_retriable
from simple_binlog.errors import ConfigError, ServiceUnavailableError


@pytest.mark.parametrize(
    "error",
    [
        exceptions.AuthenticationError("WRONGPASS invalid username-password pair"),
        exceptions.AuthenticationWrongNumberOfArgsError("wrong number of arguments for 'auth'"),
        exceptions.NoPermissionError("NOPERM this user has no permissions to run 'evalsha'"),
    ],
)
def test_refused_credentials_are_a_configuration_error(error: exceptions.RedisError) -> None:
    mapped = map_redis_error(error, "a mirror batch", "redis.example:6380")
    assert type(mapped) is ConfigError
    assert not is_retriable(mapped)
    assert str(mapped).startswith("Redis at redis.example:6380 refused the credentials")


@pytest.mark.parametrize(
    "error",
    [
        exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
        exceptions.TimeoutError("Timeout reading from socket"),
        exceptions.BusyLoadingError("LOADING Redis is loading the dataset in memory"),
    ],
)
def test_an_unreachable_server_is_retried_and_named_by_its_address(
    error: exceptions.RedisError,
) -> None:
    mapped = map_redis_error(error, "the read of orders", "127.0.0.1:1")
    assert type(mapped) is ServiceUnavailableError
    assert is_retriable(mapped)
    assert str(mapped) == f"Redis at 127.0.0.1:1 cannot be reached ({error})."


def test_any_other_refusal_names_the_work_and_is_retried() -> None:
    error = exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")
    mapped = map_redis_error(error, "a mirror batch", "127.0.0.1:6379")
    assert type(mapped) is ServiceUnavailableError
    assert str(mapped) == f"Redis refused a mirror batch ({error})."


def test_the_boundary_raises_the_mapped_error_and_lets_others_pass() -> None:
    with (
        pytest.raises(ServiceUnavailableError, match=r"^Redis at h:1 cannot be reached"),
        redis_errors("a mirror batch", "h:1"),
    ):
        raise exceptions.ConnectionError("Connection reset by peer")
    with pytest.raises(KeyError), redis_errors("a mirror batch", "h:1"):
        raise KeyError("not Redis's")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:26379/0", "127.0.0.1:26379"),
        ("redis://:s3cret@cache.internal/2", "cache.internal:6379"),
        ("rediss://user:s3cret@cache.internal:6380/0", "cache.internal:6380"),
        ("unix:///run/redis.sock?db=0", "/run/redis.sock"),
    ],
)
def test_the_address_has_no_credentials(url: str, expected: str) -> None:
    assert address(RedisSettings(url=SecretStr(url))) == expected
