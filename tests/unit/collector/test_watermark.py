"""Watermark heartbeats, the pure parts: the time a probe allows, binlog positions, when a
probe may be published."""

from __future__ import annotations

from collector.watermark import HeartbeatSchedule, Probe, binlog_reached, watermark_ms


def test_the_source_clock_alone_is_taken_one_whole_second_back() -> None:
    assert watermark_ms(1000.7, None, None) == 999_000
    assert watermark_ms(1000.0, None, None) == 999_000


def test_an_open_transaction_or_a_running_statement_holds_the_time_back() -> None:
    # A transaction open since 900.5 may still commit events stamped 900.
    assert watermark_ms(1000.2, 900.5, None) == 899_000
    # A statement running for 30 s (TIME truncates) may have started in second 969.
    assert watermark_ms(1000.2, None, 30) == 969_000
    assert watermark_ms(1000.2, 990.0, 30) == 969_000
    assert watermark_ms(1000.2, 950.0, 30) == 949_000
    # Neither ever moves it later than the clock.
    assert watermark_ms(1000.2, 2000.0, 0) == 999_000


def test_binlog_positions_compare_within_and_across_files() -> None:
    assert binlog_reached("bin.000004", 500, "bin.000004", 500)
    assert not binlog_reached("bin.000004", 499, "bin.000004", 500)
    assert binlog_reached("bin.000005", 4, "bin.000004", 900)
    assert not binlog_reached("bin.000003", 9_000, "bin.000004", 4)
    assert binlog_reached("bin.1000000", 4, "bin.999999", 900)  # one more digit
    assert not binlog_reached("", 0, "bin.000001", 4)  # where the stream stands is unknown


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_probe_is_published_once_the_binlog_is_committed_past_it() -> None:
    clock = _Clock()
    schedule = HeartbeatSchedule(10.0, clock)
    assert not schedule.wants_probe()  # an interval after the start
    clock.now += 10
    assert schedule.wants_probe()
    probe = Probe(watermark_ms=5_000, source_time_ms=6_000, file="bin.000002", pos=300)
    schedule.probed(probe)
    assert not schedule.wants_probe()  # one pending at a time
    assert schedule.publishable("bin.000002", 299) is None  # rows before it still open
    assert schedule.publishable("bin.000002", 300) == probe
    assert schedule.publishable("bin.000002", 900) is None  # handed out once
    assert not schedule.wants_probe()
    clock.now += 9.9
    assert not schedule.wants_probe()
    clock.now += 0.1
    assert schedule.wants_probe()


def test_a_failed_probe_waits_an_interval_and_a_reset_forgets_the_pending_one() -> None:
    clock = _Clock()
    schedule = HeartbeatSchedule(5.0, clock)
    clock.now += 5
    schedule.failed()
    assert not schedule.wants_probe()
    clock.now += 5
    schedule.probed(Probe(1, 2, "bin.000001", 4))
    schedule.reset()
    assert schedule.publishable("bin.000009", 4) is None
    assert schedule.wants_probe()


def test_a_new_period_applies_from_the_last_heartbeat() -> None:
    clock = _Clock()
    schedule = HeartbeatSchedule(10.0, clock)
    clock.now += 3
    schedule.interval_s = 2.0  # the web admin's instance setting, put in force
    assert schedule.interval_s == 2.0 and schedule.wants_probe()
    schedule.failed()
    clock.now += 1.9
    assert not schedule.wants_probe()
    clock.now += 0.1
    assert schedule.wants_probe()
