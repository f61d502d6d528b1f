"""The configuration store's pure part (wire form, validation, diff), the file store on a
temporary file, the fake store and the watch that puts a snapshot in force."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from cdc_platform.config import TableMirror
from cdc_platform.config_store import (
    AdminConfigStore,
    ConfigSnapshot,
    ConfigWatch,
    FakeConfigStore,
    FileConfigStore,
    InstanceConfig,
    diff_snapshots,
    parse_snapshot,
    snapshot_body,
    validate_snapshot,
    with_etag,
)
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from simple_binlog.routing import ShardRule

LOCAL = InstanceConfig(name="local", host="127.0.0.1", port=3306, user="cdc")
ORDERS = TableMirror(db_prefix="shop", table_prefix="orders", targets=["redis"])
ITEMS = TableMirror(db_prefix="shop", table_prefix="items", targets=["warehouse"])


def snapshot(*tables: TableMirror, version: int = 1, **instance: object) -> ConfigSnapshot:
    return with_etag(
        ConfigSnapshot(
            version=version, instances=(LOCAL.model_copy(update=instance),), tables=tables
        )
    )


# --- pure ---------------------------------------------------------------------------------


def test_the_wire_form_round_trips_and_the_etag_names_the_content() -> None:
    secret = snapshot(ORDERS, password=SecretStr("s3cret"))
    body = snapshot_body(secret)
    assert body["instances"][0]["password"] == "s3cret"
    back = parse_snapshot({**body, "etag": secret.etag})
    assert back == secret
    assert snapshot(ORDERS).etag == snapshot(ORDERS).etag
    assert snapshot(ORDERS).etag != snapshot(ORDERS, ITEMS).etag


def test_a_bad_snapshot_is_refused_with_one_sentence_without_the_password() -> None:
    body = snapshot_body(snapshot(ORDERS, password=SecretStr("s3cret")))
    body["instances"][0]["port"] = 0
    with pytest.raises(ConfigError, match=r"instances\[0\]\.port.*\(got 0\)") as refused:
        parse_snapshot(body)
    assert "s3cret" not in str(refused.value)
    body["instances"][0].update(port=3306, password=["s3cret"])
    with pytest.raises(ConfigError, match=r"instances\[0\]\.password") as hidden:
        parse_snapshot(body)
    assert "s3cret" not in str(hidden.value)
    unknown = snapshot_body(snapshot(ORDERS.model_copy(update={"instance": "gone"})))
    with pytest.raises(ConfigError, match="unknown instance 'gone'"):
        parse_snapshot(unknown)
    with pytest.raises(ConfigError, match="not a JSON object"):
        parse_snapshot([])


def test_validation_names_every_problem() -> None:
    twice = ConfigSnapshot(
        version=1,
        instances=(LOCAL, LOCAL.model_copy(update={"shard_rules": ()})),
        tables=(ORDERS, ORDERS, ORDERS.model_copy(update={"instance": "other"})),
    )
    assert validate_snapshot(twice) == [
        "instance 'local' is configured twice.",
        "instance 'local' has no shard rule.",
        "table mirror 'shop_orders' is configured twice.",
        "table mirror 'shop_orders' names the unknown instance 'other'.",
        "table mirror 'shop_orders' is configured twice.",
    ]
    assert validate_snapshot(snapshot(ORDERS, ITEMS)) == []


def test_the_diff_names_added_removed_and_changed_tables_and_instances() -> None:
    old = snapshot(ORDERS, ITEMS)
    new = with_etag(
        ConfigSnapshot(
            version=2,
            instances=(
                LOCAL.model_copy(
                    update={"shard_rules": (ShardRule(table_pattern=r"(?P<table>.+)"),)}
                ),
                LOCAL.model_copy(update={"name": "eu"}),
            ),
            tables=(
                ORDERS.model_copy(update={"key": ["code"], "redis_ttl_s": 60}),
                TableMirror(db_prefix="shop", table_prefix="users"),
            ),
        )
    )
    diff = diff_snapshots(old, new)
    assert (diff.added, diff.removed) == (("shop_users",), ("shop_items",))
    assert [(c.name, c.fields) for c in diff.changed] == [("shop_orders", ("key", "redis_ttl_s"))]
    assert (diff.instances_added, diff.instances_changed) == (("eu",), ("local",))
    assert diff.shard_rules_changed == ("local",)
    assert "table shop_users added" in diff.describe()
    assert diff_snapshots(old, old).empty
    assert diff_snapshots(old, old).describe() == "nothing"


def test_the_diff_for_one_target_counts_a_gained_or_lost_target_as_added_or_removed() -> None:
    old = snapshot(ORDERS, ITEMS)
    new = snapshot(
        ORDERS.model_copy(update={"targets": ["hive"]}),
        ITEMS.model_copy(update={"targets": ["warehouse", "redis"]}),
    )
    redis = diff_snapshots(old, new, "redis")
    assert (redis.added, redis.removed, redis.changed) == (("shop_items",), ("shop_orders",), ())
    warehouse = diff_snapshots(old, new, "warehouse")
    assert [(c.name, c.fields) for c in warehouse.changed] == [("shop_items", ("targets",))]


def test_snapshot_lookups() -> None:
    current = snapshot(ORDERS, ITEMS)
    assert current.tables_for("redis") == (ORDERS,)
    assert current.routers()["local"].route("shop_01", "orders_07").name == "shop_orders"
    with pytest.raises(
        ConfigError, match=r"no MySQL instance named 'x' in the config \(known: local\)"
    ):
        current.instance("x")


# --- the file store -----------------------------------------------------------------------

CONFIG = """\
instances:
  - name: local
    host: 127.0.0.1
tables:
{tables}
"""


def _write(path: Path, tables: list[str], bump_ns: int = 0) -> None:
    body = "\n".join(f"  - {{db_prefix: shop, table_prefix: {t}}}" for t in tables) or "  []"
    if not tables:
        body = ""
    path.write_text(
        CONFIG.format(tables=body)
        if tables
        else CONFIG.replace("tables:\n{tables}\n", "tables: []\n")
    )
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump_ns))


def test_the_file_store_re_reads_the_file_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "cdc.yaml"
    _write(path, ["orders"])
    store = FileConfigStore(path)
    first = store.load()
    assert [t.name for t in first.tables] == ["shop_orders"]
    assert first.instances[0].shard_rules == (ShardRule(),)
    assert store.poll() is None  # unchanged
    _write(path, ["orders"], bump_ns=10**9)
    assert store.poll() is None  # touched, same content
    _write(path, ["orders", "items"], bump_ns=2 * 10**9)
    second = store.poll()
    assert second is not None
    assert second.version == 2
    assert [t.name for t in second.tables] == ["shop_orders", "shop_items"]


def test_a_broken_file_is_one_sentence_and_the_watch_keeps_the_config_in_force(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cdc.yaml"
    _write(path, ["orders"])
    watch = ConfigWatch(FileConfigStore(path), interval_s=60)
    watch.start(poll=False)
    path.write_text("instances: [\n")
    assert watch.poll_once() is False
    assert watch.take() is None
    assert [t.name for t in watch.current.tables] == ["shop_orders"]
    _write(path, ["items"], bump_ns=10**9)
    assert watch.poll_once() is True
    change = watch.take()
    assert change is not None
    assert [t.name for t in change.new.tables] == ["shop_items"]
    missing = FileConfigStore(tmp_path / "nothing.yaml")
    with pytest.raises(ConfigError, match="cannot be read"):
        missing.load()


# --- the fake store and the watch ---------------------------------------------------------


def test_the_watch_hands_over_each_new_snapshot_once_at_the_callers_point() -> None:
    store = FakeConfigStore(snapshot(ORDERS))
    watch = ConfigWatch(store, interval_s=60)
    first = watch.start(poll=False)
    assert watch.poll_once() is False  # nothing new
    store.publish(tables=[ORDERS, ITEMS])
    assert watch.current == first  # polled, not yet taken: still in force
    assert watch.poll_once() is True
    assert watch.current == first
    change = watch.take()
    assert change is not None
    assert (change.old, change.new.version) == (first, 2)
    assert watch.current == change.new
    assert watch.take() is None


def test_the_watch_refuses_an_invalid_snapshot_and_survives_store_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeConfigStore(snapshot(ORDERS))
    watch = ConfigWatch(store, interval_s=60)
    watch.start(poll=False)
    store.publish(tables=[ORDERS.model_copy(update={"instance": "gone"})])
    assert watch.poll_once() is False
    store.failure = ServiceUnavailableError("the web admin is away.")
    assert watch.poll_once() is False
    assert watch.take() is None
    assert "unknown instance 'gone'" in caplog.text
    assert "the web admin is away. The configuration in force stays." in caplog.text
    store.publish(tables=[ITEMS])
    assert watch.poll_once() is True
    change = watch.take()
    assert change is not None and change.new.tables == (ITEMS,)


def test_the_watch_refuses_an_invalid_first_snapshot() -> None:
    bad = ConfigSnapshot(version=1, tables=(ORDERS,))
    with pytest.raises(ConfigError, match="unknown instance 'local'"):
        ConfigWatch(FakeConfigStore(bad), interval_s=60).start(poll=False)


def test_the_admin_store_translates_what_the_admin_answers() -> None:
    answers = iter([httpx.Response(401), httpx.Response(503), httpx.Response(200, content=b"[")])

    def admin(_request: httpx.Request) -> httpx.Response:
        return next(answers)

    store = AdminConfigStore("http://admin", SecretStr("t"), transport=httpx.MockTransport(admin))
    with pytest.raises(
        ConfigError,
        match=r"refused config_store.token \(401\); use an unexpired web admin token of role 'component'",
    ):
        store.load()
    with pytest.raises(ServiceUnavailableError, match="answered 503"):
        store.poll()
    with pytest.raises(ServiceUnavailableError, match="not JSON"):
        store.poll()
    store.close()


def test_a_pinned_server_key_travels_with_the_snapshot_to_the_connection(tmp_path: Path) -> None:
    # Components connect from the snapshot: without the pinned key an RSA full authentication
    # would be refused (or, opted in, answered with whatever key the server sends).
    from cdc_platform.config import MySQLInstance, Settings
    from cdc_platform.config_store import snapshot_from_settings

    key_file = tmp_path / "server.pem"
    key_file.write_text("-----BEGIN PUBLIC KEY-----\n...\n-----END PUBLIC KEY-----\n")
    instance = MySQLInstance(name="orders", host="127.0.0.1", server_public_key=str(key_file))
    snapshot = snapshot_from_settings(Settings(instances=[instance]))
    assert snapshot.instance("orders").login().server_public_key == str(key_file)
    wire = parse_snapshot({**snapshot_body(snapshot), "etag": snapshot.etag})
    assert wire.instance("orders").server_public_key == str(key_file)
