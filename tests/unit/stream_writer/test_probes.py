"""The stream writer's /health/ready: its streaming query runs."""

from __future__ import annotations

from stream_writer.job import QueryProbe


class FakeQuery:
    def __init__(self, active: bool) -> None:
        self.isActive = active


def test_not_ready_before_the_first_query_or_between_a_failure_and_its_restart() -> None:
    probe = QueryProbe()
    assert not probe.ready().ok
    assert "no streaming query" in probe.ready().reason


def test_ready_while_the_query_runs_and_not_once_it_stopped() -> None:
    probe = QueryProbe()
    query = FakeQuery(active=True)
    probe.query = query
    assert probe.ready().ok
    query.isActive = False
    assert not probe.ready().ok
    assert probe.ready().reason == "the streaming query has stopped"
