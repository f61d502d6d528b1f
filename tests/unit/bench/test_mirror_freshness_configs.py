"""bench.mirror_bench's named configurations of the MySQL → Redis run: alternated rounds,
pooled per configuration, each later configuration a figure against the first's p99."""

from __future__ import annotations

import argparse

import pytest

from bench import mirror_bench
from bench.mirror_bench import FRESHNESS_CONFIGS, FreshnessConfig, FreshnessRun


def test_configurations_alternate_and_compare_with_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    delays = {"before": [100.0] * 99 + [900.0], "current": [50.0] * 99 + [300.0]}

    def fake_run(_settings: object, _args: object, config: FreshnessConfig) -> FreshnessRun:
        name = next(n for n, c in FRESHNESS_CONFIGS.items() if c is config)
        order.append(name)
        return FreshnessRun(list(delays[name]), 100, 4_000.0)

    monkeypatch.setattr(mirror_bench, "bench_mysql_freshness", fake_run)
    args = argparse.Namespace(freshness_configs=["before", "current"], freshness_rounds=2)
    [figure] = mirror_bench.bench_mysql_freshness_configs(object(), args)  # type: ignore[arg-type]

    assert order == ["before", "current", "before", "current"]
    assert figure.key == "mirror.freshness_mysql"
    assert (figure.value, figure.baseline) == (300.0, 900.0)
    assert figure.ratio == pytest.approx(3.0)  # lower is better: before / current
    assert figure.extra["applied"] == 200 and figure.extra["before p99"] == 900.0
    assert "configuration 'before'" in (figure.baseline_label or "")


def test_the_current_configuration_is_what_the_entry_points_run() -> None:
    current = FRESHNESS_CONFIGS["current"]
    assert current.mirror_gc_tuned and not current.collector and not current.mirror
    assert not FRESHNESS_CONFIGS["before"].mirror_gc_tuned


def test_the_stage_split_names_the_stage_of_the_slowest_rows() -> None:
    # 99 rows read at once, one held 400 ms before the mirror read it.
    sent = {n: 0.0 for n in range(100)}
    stages = mirror_bench.RowStages()
    for n in range(100):
        closed = 0.4 if n == 7 else 0.01
        stages.closed[n], stages.started[n], stages.applied[n] = (
            closed,
            closed + 0.002,
            closed + 0.005,
        )
    split = mirror_bench._stage_split(mirror_bench._stage_rows(sent, stages))  # type: ignore[arg-type]

    assert split["to read p50"] == pytest.approx(10.0)
    assert split["slowest 1% to read"] == pytest.approx(400.0)
    assert split["slowest 1% decode"] == pytest.approx(2.0)
    assert split["slowest 1% apply"] == pytest.approx(3.0)


def test_the_fetch_wait_configuration_changes_only_the_mirror_consumer() -> None:
    config = FRESHNESS_CONFIGS["fetch-wait-10"]
    assert config.consumer == {"fetch.wait.max.ms": "10"}
    assert config.mirror_gc_tuned and not config.collector and not config.mirror
