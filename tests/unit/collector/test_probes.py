"""The collector's /health/ready: publishing, or a standby following with a live ZooKeeper
session; not while elected and still fencing, nor without a session."""

from __future__ import annotations

import threading
from typing import Any, cast

from cdc_platform.config import ZooKeeperSettings
from collector.app import _Status
from collector.ha import LeaderElection
from collector.service import Collector


class FakeElection:
    def __init__(self, connected: bool) -> None:
        self.connected = connected


class FakeCollector:
    def __init__(self, started: bool) -> None:
        self.started = threading.Event()
        if started:
            self.started.set()
        self.committed = None
        self.config_version = None
        self.switched_at = None


def status(connected: bool | None, collector: FakeCollector | None = None) -> _Status:
    election = None if connected is None else cast(LeaderElection, FakeElection(connected))
    result = _Status(None, election)
    if collector is not None:
        result.leading, result.epoch = True, 7
        result.collector = cast(Collector, collector)
    return result


def test_an_active_collector_is_ready() -> None:
    probe = status(True, FakeCollector(started=True)).ready()
    assert probe.ok
    assert probe.reason == "active: publishing (epoch 7)"


def test_an_elected_collector_still_fencing_is_not_ready() -> None:
    probe = status(True, FakeCollector(started=False)).ready()
    assert not probe.ok
    assert "fencing" in probe.reason


def test_a_standby_with_a_live_session_is_a_healthy_follower() -> None:
    probe = status(True).ready()
    assert probe.ok
    assert probe.reason.startswith("standby")


def test_a_standby_without_a_session_is_not_ready() -> None:
    probe = status(False).ready()
    assert not probe.ok
    assert "ZooKeeper" in probe.reason


def test_a_collector_without_ha_that_is_not_publishing_is_not_ready() -> None:
    assert not status(None).ready().ok
    assert status(None, FakeCollector(started=True)).ready().ok


def test_health_keeps_its_document_for_the_demo_and_the_compose_stack() -> None:
    document: dict[str, Any] = status(True).to_json()
    assert document["role"] == "standby"
    assert set(document) == {"role", "epoch", "committed", "decoder"}


def test_the_election_reports_no_session_before_it_connects() -> None:
    assert LeaderElection(ZooKeeperSettings(), "local").connected is False
