"""bench.kudu_bench's named configurations of the MySQL → Kudu run: rotated rounds, pooled
per configuration, each key's delay split into steps, 'current' the figure against 'before'."""

from __future__ import annotations

import argparse

import pytest

from bench import kudu_bench
from bench.kudu_bench import FRESHNESS_CONFIGS, FreshnessConfig, _Freshness, _stages
from mirror.kudu import BatchTimings


def _run(name: str, delay_ms: float, tail_ms: float) -> _Freshness:
    """100 keys committed at 0 s: produced after 10 ms, applied after ``delay_ms`` (the last
    one after ``tail_ms``), each apply taking 5 ms."""
    keys = range(100)
    applied = {k: (tail_ms if k == 99 else delay_ms) / 1000 for k in keys}
    return _Freshness(
        name,
        dict.fromkeys(keys, 0.0),
        dict.fromkeys(keys, 0.010),
        {k: at - 0.005 for k, at in applied.items()},
        applied,
        [BatchTimings(rows=100, python=0.001, java_read=0.003, java_write=0.002)],
        1000.0,
    )


def test_configurations_alternate_and_current_compares_with_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    delays = {"before": (100.0, 900.0), "current": (50.0, 300.0), "memory": (20.0, 40.0)}

    def fake_run(
        _settings: object, _args: object, name: str, config: FreshnessConfig
    ) -> _Freshness:
        assert config is FRESHNESS_CONFIGS[name]
        order.append(name)
        return _run(name, *delays[name])

    monkeypatch.setattr(kudu_bench, "_freshness_run", fake_run)
    args = argparse.Namespace(
        freshness_configs=["before", "current", "memory"],
        freshness_rounds=2,
        rate=1000,
        freshness_seconds=1,
    )
    current, memory = kudu_bench.bench_freshness(object(), args)  # type: ignore[arg-type]

    # Each round starts one configuration later.
    assert order == ["before", "current", "memory", "current", "memory", "before"]
    assert (current.key, memory.key) == ("kudu.freshness_mysql", "kudu.freshness_mysql.memory")
    assert (current.value, current.baseline) == (300.0, 900.0)
    assert current.ratio == pytest.approx(3.0)  # lower is better: before / current
    assert current.extra["applied"] == 200 and current.extra["before p99"] == 900.0
    assert "configuration 'before'" in (current.baseline_label or "")


def test_a_key_s_delay_is_split_into_the_collector_the_queue_and_the_apply() -> None:
    found = _stages(_run("current", 50.0, 300.0))
    assert found["p50"] == pytest.approx(50.0)
    assert found["collector p50"] == pytest.approx(10.0)
    assert found["queue p50"] == pytest.approx(35.0)  # 45 ms (apply started) - 10 ms
    assert found["apply p99"] == pytest.approx(5.0)
    assert found["batch java_read p50"] == pytest.approx(3.0)


def test_the_current_configuration_is_what_mirror_run_does() -> None:
    assert FRESHNESS_CONFIGS["current"] == FreshnessConfig(
        FRESHNESS_CONFIGS["current"].description, "kudu", gc_tuned=True
    )
    assert not FRESHNESS_CONFIGS["before"].gc_tuned
    assert FRESHNESS_CONFIGS["memory"].target == "memory"
