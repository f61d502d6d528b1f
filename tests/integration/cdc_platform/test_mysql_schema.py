"""The table-shape reader against the real MariaDB, a table per key case, and every reader
switched to it (mirror backend and merge, web admin, replay, the row check) agreeing on each table's key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from cdc_mirror import verify
from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import snapshot_from_settings
from cdc_platform.mysql_schema import LiveTables, MissingTableError, read_table_shape
from mirror.backend import MirrorBackend
from mock_replay.source import MySQLSource
from simple_binlog.routing import ShardRule
from tests.integration.mariadb_admin import admin_connection as _admin
from webui.schema_source import InstanceAccess, MariaDBSchemaSource

# table → (definition, the key by the one rule)
CASES = {
    "pk": ("a INT NOT NULL, b INT NOT NULL, v VARCHAR(10), PRIMARY KEY (b, a)", ("b", "a")),
    "uniq": ("a INT NOT NULL, b BIGINT UNSIGNED NOT NULL, v INT, UNIQUE KEY uk (b, a)", ("b", "a")),
    "nullable": ("a INT NOT NULL, b INT NULL, v INT, UNIQUE KEY uk (a, b)", ()),
    "several": (
        "a INT NOT NULL, b INT NOT NULL, c INT NULL, "
        "UNIQUE KEY z_b (b), UNIQUE KEY m_c (c), UNIQUE KEY a_a (a)",
        ("a",),
    ),
    "none": ("a INT, b INT, KEY ix (a)", ()),
}


@pytest.fixture(scope="module")
def cases(local_stack: Settings) -> Iterator[tuple[Settings, str]]:
    """A database ``<prefix>_00`` with a table ``<case>_00`` per case; settings mirroring
    each as the logical table ``<prefix>_<case>``."""
    prefix = f"ks{uuid.uuid4().hex[:6]}"
    conn = _admin(local_stack)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {prefix}_00")
            for table, (definition, _) in CASES.items():
                cur.execute(f"CREATE TABLE {prefix}_00.{table}_00 ({definition})")
        mirrors = [TableMirror(db_prefix=prefix, table_prefix=table) for table in CASES]
        yield local_stack.model_copy(update={"tables": mirrors}), prefix
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_00")
        conn.close()


@pytest.mark.parametrize("table", CASES)
def test_the_reader_gives_columns_in_order_with_column_type_and_the_key(
    cases: tuple[Settings, str], table: str
) -> None:
    settings, prefix = cases
    conn = _admin(settings)
    try:
        with conn.cursor() as cur:
            shape = read_table_shape(cur, f"{prefix}_00", f"{table}_00")
    finally:
        conn.close()
    assert shape.name == f"{prefix}_00.{table}_00"
    assert shape.key == CASES[table][1]
    columns = {"pk": "abv", "uniq": "abv", "nullable": "abv", "several": "abc", "none": "ab"}
    assert list(shape.columns) == list(columns[table])  # in table order
    assert shape.columns["a"] == "int(11)"


def test_the_reader_gives_column_type_verbatim_and_refuses_a_missing_table(
    cases: tuple[Settings, str],
) -> None:
    settings, prefix = cases
    conn = _admin(settings)
    try:
        with conn.cursor() as cur:
            shape = read_table_shape(cur, f"{prefix}_00", "uniq_00")
            with pytest.raises(MissingTableError, match=r"nothing_00 does not exist"):
                read_table_shape(cur, f"{prefix}_00", "nothing_00")
    finally:
        conn.close()
    assert shape.columns == {"a": "int(11)", "b": "bigint(20) unsigned", "v": "int(11)"}


@pytest.mark.parametrize("table", CASES)
def test_every_switched_reader_agrees_on_the_key(cases: tuple[Settings, str], table: str) -> None:
    settings, prefix = cases
    logical = f"{prefix}_{table}"
    expected = CASES[table][1]
    instance = settings.instances[0]

    platform = LiveTables(snapshot_from_settings(settings)).live_schema(logical)
    backend = MirrorBackend(settings).live_schema(logical)
    access = InstanceAccess(
        instance.name,
        instance.host,
        instance.port,
        instance.user,
        instance.password.get_secret_value(),
        (ShardRule(),),
    )
    webui = MariaDBSchemaSource().live_schema(access, prefix, table)
    source = MySQLSource(instance)
    try:
        replay = source.shape(f"{prefix}_00", f"{table}_00")
    finally:
        source.close()

    mirror = next(m for m in settings.tables if m.name == logical)
    if expected:
        checked = verify.mysql_schema(settings, mirror)
        assert checked.shards == ((f"{prefix}_00", f"{table}_00"),)
        assert checked.key == expected
        assert checked.columns == platform.columns
    else:  # the row check refuses a table without a key by name
        with pytest.raises(verify.VerifyError, match=r"has no key: set tables\[\]\.key"):
            verify.mysql_schema(settings, mirror)

    assert webui is not None
    assert platform.shards == backend.shards == [f"{prefix}_00.{table}_00"]
    assert tuple(platform.key) == tuple(backend.key) == expected
    assert webui.primary_key == replay.key == expected
    assert platform.columns == backend.columns == webui.columns == replay.column_types
