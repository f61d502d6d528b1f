"""The Redis and PostgreSQL adapters against the real services: a client that works, and each
way of not reaching the service said in one sentence of the product's taxonomy."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from cdc_platform import redis_store, warehouse
from cdc_platform.config import Settings
from simple_binlog.errors import ConfigError, ServiceUnavailableError


def test_redis_answers_and_says_why_it_cannot(local_stack: Settings) -> None:
    where = redis_store.address(local_stack.redis)
    client = redis_store.connect(local_stack.redis)
    try:
        with redis_store.redis_errors("a ping", where):
            assert client.ping() is True
    finally:
        client.close()

    closed = local_stack.redis.model_copy(update={"url": SecretStr("redis://127.0.0.1:1/0")})
    with (
        pytest.raises(ServiceUnavailableError, match=r"^Redis at 127\.0\.0\.1:1 cannot be"),
        redis_store.redis_errors("a ping", redis_store.address(closed)),
    ):
        redis_store.connect(closed).ping()

    # A user the local Redis does not have (its default user takes any password).
    host, port = where.split(":")
    wrong = local_stack.redis.model_copy(
        update={"url": SecretStr(f"redis://adapters-nobody:not-the-password@{host}:{port}/0")}
    )
    with (
        pytest.raises(ConfigError, match=r"refused the credentials of redis\.url") as info,
        redis_store.redis_errors("a ping", redis_store.address(wrong)),
    ):
        redis_store.connect(wrong).ping()
    assert "not-the-password" not in str(info.value)


def test_postgres_answers_and_says_why_it_cannot(local_stack: Settings) -> None:
    postgres = local_stack.postgres
    assert warehouse.answers(postgres, postgres.warehouse_db)
    with (
        warehouse.connect(postgres, autocommit=True) as conn,
        pytest.raises(ServiceUnavailableError, match=r"^the warehouse refused a read \("),
        warehouse.warehouse_errors("a read"),
    ):
        conn.execute("SELECT * FROM adapters_no_such_table")

    closed = postgres.model_copy(update={"port": 1})
    with pytest.raises(ServiceUnavailableError, match=r"at 127\.0\.0\.1:1 cannot be reached"):
        warehouse.connect(closed)
    assert not warehouse.answers(closed, postgres.warehouse_db)

    wrong = postgres.model_copy(update={"password": SecretStr("not-the-password")})
    with pytest.raises(ConfigError, match=r"^PostgreSQL refused user") as info:
        warehouse.connect(wrong)
    assert "not-the-password" not in str(info.value)
