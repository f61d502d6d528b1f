"""What a stream writer reads and how it routes under a configuration snapshot, and as the
snapshot changes (``stream_writer.routing``)."""

from __future__ import annotations

from cdc_platform.config import KafkaSettings
from cdc_platform.config_store import ConfigSnapshot, ConfigWatch, FakeConfigStore, InstanceConfig
from simple_binlog.routing import ShardRule
from stream_writer.routing import DEFAULT_RULES, LiveRouting, writer_routing

KAFKA = KafkaSettings(topic_prefix="cdc.binlog.")
KEEP_SUFFIX = ShardRule(table_pattern=r"^(?P<table>.+)$")


def _instance(name: str, *rules: ShardRule, topic: str | None = None) -> InstanceConfig:
    return InstanceConfig(
        name=name,
        host="127.0.0.1",
        port=3306,
        user="cdc",
        shard_rules=rules or DEFAULT_RULES,
        topic=topic,
    )


def _snapshot(*instances: InstanceConfig) -> ConfigSnapshot:
    return ConfigSnapshot(version=1, instances=instances)


def test_every_instance_is_read_with_its_own_rules() -> None:
    routing = writer_routing(
        _snapshot(_instance("a"), _instance("b", KEEP_SUFFIX, topic="custom.b")), KAFKA
    )
    assert routing.topics == ("cdc.binlog.a", "custom.b")
    assert routing.instances == ("a", "b")
    assert routing.rules_for("cdc.binlog.a") == DEFAULT_RULES
    assert routing.rules_for("custom.b") == (KEEP_SUFFIX,)
    # The instances disagree: a topic of none of them gets the default rule.
    assert routing.rules_for("elsewhere") == DEFAULT_RULES


def test_named_instances_only_and_explicit_topics_use_the_shared_rules() -> None:
    snapshot = _snapshot(_instance("a", KEEP_SUFFIX), _instance("b", KEEP_SUFFIX))
    assert writer_routing(snapshot, KAFKA, instances=["b"]).topics == ("cdc.binlog.b",)
    explicit = writer_routing(snapshot, KAFKA, topics=["t1"])
    assert (explicit.topics, explicit.instances) == (("t1",), ())
    assert explicit.rules_for("t1") == (KEEP_SUFFIX,)


def test_a_running_writer_keeps_the_topics_it_reads() -> None:
    routing = writer_routing(_snapshot(_instance("b")), KAFKA, reading=["cdc.binlog.a"])
    assert routing.topics == ("cdc.binlog.a", "cdc.binlog.b")


def test_live_routing_follows_the_store_and_keeps_its_routing_on_a_bad_change() -> None:
    store = FakeConfigStore(_snapshot(_instance("a")))
    watch = ConfigWatch(store, interval_s=1)
    watch.start(poll=False)
    live = LiveRouting(watch, KAFKA, instances=["a"])
    assert live.next() is None  # nothing changed

    store.publish(instances=[_instance("a", KEEP_SUFFIX), _instance("b")])
    assert watch.poll_once()
    fresh = live.next()
    assert fresh is not None and fresh.version == 2
    assert fresh.topics == ("cdc.binlog.a",)  # only the named instance
    assert fresh.rules_for("cdc.binlog.a") == (KEEP_SUFFIX,)

    store.publish(instances=[_instance("b")])  # the named instance is gone
    assert watch.poll_once()
    assert live.next() is None
    assert live.routing is fresh
    watch.close()


def test_all_instances_live_a_new_instance_adds_its_topic() -> None:
    store = FakeConfigStore(_snapshot(_instance("a")))
    watch = ConfigWatch(store, interval_s=1)
    watch.start(poll=False)
    live = LiveRouting(watch, KAFKA)
    before = live.routing
    store.publish(instances=[_instance("a"), _instance("b")])
    assert watch.poll_once()
    fresh = live.next()
    assert fresh is not None
    assert fresh.topics == ("cdc.binlog.a", "cdc.binlog.b")  # a's topic stays read
    assert fresh.same_rules(before)  # a new topic, routed as before: nothing to re-route
    assert not fresh.same_rules(writer_routing(_snapshot(_instance("b", KEEP_SUFFIX)), KAFKA))
    watch.close()
