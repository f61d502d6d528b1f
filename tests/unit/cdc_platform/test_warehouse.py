"""The PostgreSQL adapter's error table: a refused password is a configuration error, a lost
connection and any refusal are retried, and no message quotes a row's values."""

from __future__ import annotations

import psycopg
import pytest

from cdc_platform.retry import is_retriable
from cdc_platform.warehouse import map_postgres_error, warehouse_errors
from simple_binlog.errors import ConfigError, ServiceUnavailableError


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.InvalidPassword('password authentication failed for user "cdc"'),
        psycopg.OperationalError(
            'connection failed: FATAL:  password authentication failed for user "cdc"'
        ),
    ],
)
def test_a_refused_password_is_a_configuration_error(error: psycopg.Error) -> None:
    mapped = map_postgres_error(error, "a batch")
    assert type(mapped) is ConfigError
    assert not is_retriable(mapped)


def test_a_lost_connection_is_retried() -> None:
    error = psycopg.OperationalError("consuming input failed: server closed the connection")
    mapped = map_postgres_error(error, "a batch")
    assert type(mapped) is ServiceUnavailableError
    assert is_retriable(mapped)
    assert str(mapped) == (
        "the warehouse connection failed (consuming input failed: server closed the connection)."
    )


def test_a_refusal_names_the_work_and_is_retried() -> None:
    # Made by hand it has no diagnostics: the reason is its class, never its text.
    error = psycopg.errors.UniqueViolation('duplicate key value (id)=(42) "secret"')
    mapped = map_postgres_error(error, "the read of orders")
    assert type(mapped) is ServiceUnavailableError
    assert str(mapped) == "the warehouse refused the read of orders (UniqueViolation)."
    assert "secret" not in str(mapped)


def test_the_boundary_raises_the_mapped_error_and_lets_others_pass() -> None:
    with (
        pytest.raises(ServiceUnavailableError, match=r"^the warehouse refused a batch"),
        warehouse_errors("a batch"),
    ):
        raise psycopg.errors.UndefinedTable("relation does not exist")
    with pytest.raises(KeyError), warehouse_errors("a batch"):
        raise KeyError("not PostgreSQL's")
