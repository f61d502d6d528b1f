"""bench.collector_bench's named configurations of the latency run: rotated rounds, pooled per
configuration, the first one's p99 the others' baseline, and each row's delay split at the
publisher's transaction commits."""

from __future__ import annotations

import pytest

from bench import collector_bench
from bench.collector_bench import LATENCY_CONFIGS, LatencyConfig, TimedRows, latency_configs


def _run(delay_ms: float, tail_ms: float) -> TimedRows:
    """100 rows committed at 0 s, read after ``delay_ms`` (the last one after ``tail_ms``)."""
    keys = range(100)
    return TimedRows(
        dict.fromkeys(keys, 0.0),
        dict.fromkeys(keys, 0.010),
        {k: (tail_ms if k == 99 else delay_ms) / 1000 for k in keys},
        1000.0,
    )


def test_configurations_rotate_and_the_first_is_the_baseline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    delays = {"before": (100.0, 900.0), "current": (50.0, 300.0), "priority": (20.0, 40.0)}

    def fake_run(
        _settings: object, config: LatencyConfig, _seconds: float, _rate: int
    ) -> TimedRows:
        name = next(n for n, c in LATENCY_CONFIGS.items() if c is config)
        order.append(name)
        return _run(*delays[name])

    monkeypatch.setattr(collector_bench, "config_latency", fake_run)
    before, current, priority = latency_configs(
        object(),  # type: ignore[arg-type]
        ["before", "current", "priority"],
        rounds=2,
        seconds=1,
        rate=1000,
    )

    # Each round starts one configuration later.
    assert order == ["before", "current", "priority", "current", "priority", "before"]
    assert [f.key for f in (before, current, priority)] == [
        "collector.commit_latency.before",
        "collector.commit_latency.current",
        "collector.commit_latency.priority",
    ]
    assert before.baseline is None and before.value == 900.0
    assert (current.value, current.baseline) == (300.0, 900.0)
    assert current.ratio == pytest.approx(3.0)  # lower is better: before / current
    assert current.extra["rows"] == 200 and current.extra["before p99"] == 900.0
    assert "configuration 'before'" in (current.baseline_label or "")


def test_a_rows_delay_is_split_at_the_commit_that_published_it() -> None:
    # Row 1: in MySQL at 0.000, produced at 0.100 (the commit before ran 0.050-0.090),
    # its own commit 0.150-0.180, read at 0.200. Row 2 came after the last commit began.
    run = TimedRows(
        committed_at={1: 0.000, 2: 0.000},
        produced_at={1: 0.100, 2: 0.300},
        received_at={1: 0.200, 2: 0.400},
        achieved=1000.0,
        commits=[(0.050, 0.090), (0.150, 0.180)],
    )
    steps = run.commit_steps_ms()
    assert steps["held"] == [pytest.approx(40.0)]  # waited while the commit before ran
    assert steps["to commit"] == [pytest.approx(50.0)]
    assert steps["commit"] == [pytest.approx(30.0)]
    assert steps["visible"] == [pytest.approx(20.0)]
    assert run.delays_ms() == [pytest.approx(200.0), pytest.approx(400.0)]
