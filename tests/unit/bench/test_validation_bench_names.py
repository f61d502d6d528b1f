"""The validation bench's names (``--name``/``--redis-db``): where one run's data lives, so
a 10M run under its own name never touches the runs under the default one (pure parts: the
settings it scopes and the command line; no service is used)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from bench.validation_bench import (
    DEFAULT_NAME,
    RUN_LOCK,
    Names,
    names_of,
    parse_args,
    scoped,
    with_redis_db,
)
from cdc_platform.config import Settings
from simple_binlog.routing import ShardRule


def _settings() -> Settings:
    base = Settings()
    return base.model_copy(
        update={
            "redis": base.redis.model_copy(
                update={"url": SecretStr("redis://:pw@127.0.0.1:26379/0")}
            )
        }
    )


def test_the_default_name_keeps_the_data_and_lock_every_earlier_run_used() -> None:
    names = Names()
    settings = scoped(_settings(), names)
    assert (names.database, names.table, names.lock) == (
        "vbench_00",
        "vbench_00.orders_00",
        RUN_LOCK,
    )
    assert settings.redis.key_prefix == DEFAULT_NAME
    assert settings.mirror.warehouse_schema == DEFAULT_NAME
    assert settings.redis.url.get_secret_value() == "redis://:pw@127.0.0.1:26379/0"


def test_a_name_of_its_own_moves_every_place_and_the_lock() -> None:
    names = Names("vbench10m", redis_db=5)
    settings = scoped(_settings(), names)
    assert names.database == "vbench10m_00"
    assert names.lock != Names().lock
    assert settings.tables[0].name == "vbench10m_orders"
    assert settings.mirror.warehouse_schema == "vbench10m"
    assert settings.redis.key_prefix == "vbench10m"
    assert settings.kudu.table_prefix == "vbench10m."
    assert settings.redis.url.get_secret_value() == "redis://:pw@127.0.0.1:26379/5"
    assert names_of(settings).name == "vbench10m"


def test_the_shard_rules_read_the_source_database_back_as_the_table_s_prefix() -> None:
    names = Names("vbench10m")
    logical = ShardRule().match(names.database, "orders_00")
    assert logical is not None
    assert logical.name == scoped(_settings(), names).tables[0].name


@pytest.mark.parametrize(
    ("url", "db", "expected"),
    [
        ("redis://127.0.0.1:26379/0", 3, "redis://127.0.0.1:26379/3"),
        ("redis://:s3cret@cache.internal", 7, "redis://:s3cret@cache.internal/7"),
        ("rediss://u:p@h:6380/2?ssl_cert_reqs=none", 9, "rediss://u:p@h:6380/9?ssl_cert_reqs=none"),
    ],
)
def test_the_redis_database_replaces_only_the_url_s_path(url: str, db: int, expected: str) -> None:
    assert with_redis_db(url, db) == expected


@pytest.mark.parametrize("name", ["", "Vbench", "vbench_10", "v-bench", "1bench", "x" * 31])
def test_a_name_that_would_not_be_a_database_prefix_schema_and_key_prefix_is_refused(
    name: str,
) -> None:
    with pytest.raises(ValueError, match="--name"):
        Names(name)


def test_a_redis_database_outside_redis_s_sixteen_is_refused() -> None:
    with pytest.raises(ValueError, match="--redis-db"):
        Names("vbench", redis_db=16)


def test_the_command_line_gives_the_names_and_refuses_drop_with_keep(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, names = parse_args(["--rows", "1000", "--keep", "--name", "vs13", "--redis-db", "4"])
    assert (args.rows, args.keep, names) == (1000, True, Names("vs13", 4))
    with pytest.raises(SystemExit):
        parse_args(["--drop", "--keep"])
    with pytest.raises(SystemExit):
        parse_args(["--name", "bad_name_1"])
    assert "--name 'bad_name_1'" in capsys.readouterr().err
