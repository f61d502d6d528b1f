"""The mirror backend reads the live schema of a table mirror of an instance known only to
its configuration snapshot, finding the shards by that instance's own shard rules."""

from __future__ import annotations

import uuid

import pymysql

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from mirror.backend import MirrorBackend
from simple_binlog.routing import ShardRule


def test_live_schema_by_the_snapshots_instance_and_rules(local_stack: Settings) -> None:
    prefix = f"mbc{uuid.uuid4().hex[:6]}"
    local = local_stack.instances[0]
    conn = pymysql.connect(
        host=local.host,
        port=local.port,
        user=local_stack.stack.admin_user,
        password=local_stack.stack.admin_password.get_secret_value(),
        autocommit=True,
    )
    instance = InstanceConfig(
        name="cfg_only",
        host=local.host,
        port=local.port,
        user=local.user,
        password=local.password,
        allow_cleartext_password=local.allow_cleartext_password,
        # Table suffixes kept: users_01 is a logical table of its own on this instance.
        shard_rules=(ShardRule(table_pattern=r"^(?P<table>.+)$"),),
    )
    mirror = TableMirror(instance="cfg_only", db_prefix=prefix, table_prefix="users_01")
    snapshot = ConfigSnapshot(version=2, instances=(instance,), tables=(mirror,))
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {prefix}_00")
            cur.execute(f"CREATE TABLE {prefix}_00.users_00 (id INT PRIMARY KEY)")
            cur.execute(f"CREATE TABLE {prefix}_00.users_01 (id INT PRIMARY KEY, v TEXT)")

        live = MirrorBackend(local_stack, snapshot).live_schema(mirror.name)

        assert live.shards == [f"{prefix}_00.users_01"]
        assert list(live.columns) == ["id", "v"]
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_00")
        conn.close()
