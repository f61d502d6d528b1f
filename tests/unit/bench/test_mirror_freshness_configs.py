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
