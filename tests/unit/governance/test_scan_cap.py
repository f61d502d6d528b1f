"""The detectors' scan cap is a governance setting (served with the policy set, bounded)
and what it truncates is exported by the collector as a Prometheus counter."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from collector.metrics import CollectorMetrics
from governance import GovernanceSettings
from governance.detectors import DEFAULT_MAX_CHARS, DetectorSet
from governance.policy import compile_governance
from simple_binlog.routing import ShardRouter, ShardRule


def _detectors(**fields: object) -> DetectorSet:
    settings = GovernanceSettings.model_validate({"enabled": True, **fields})
    governance = compile_governance(settings, ShardRouter([ShardRule()]), "local")
    assert governance is not None
    return governance.detectors


def test_the_cap_defaults_to_the_detectors_default_and_reaches_the_detector_set():
    assert GovernanceSettings().scan_max_chars == DEFAULT_MAX_CHARS
    assert _detectors().max_chars == DEFAULT_MAX_CHARS
    detectors = _detectors(scan_max_chars=2_048)
    assert detectors.max_chars == 2_048
    assert detectors.scan("x" * 2_048) == [] and detectors.truncated == 0
    assert detectors.scan("x" * 3_000 + " someone@example.com") == []
    assert detectors.truncated == 1


@pytest.mark.parametrize("bad", [0, 1_023, 16_777_217])
def test_the_cap_is_bounded(bad: int):
    with pytest.raises(ValidationError, match="scan_max_chars"):
        GovernanceSettings(scan_max_chars=bad)


def test_the_cap_is_served_with_the_policy_set():
    published = GovernanceSettings(scan_max_chars=4_096).published_policy_set()
    assert published["scan_max_chars"] == 4_096
    assert GovernanceSettings.from_published(published).scan_max_chars == 4_096


def _truncated(metrics: CollectorMetrics, instance: str) -> float:
    value = metrics.registry.get_sample_value(
        "cdc_collector_scan_truncated_total", {"instance": instance}
    )
    return value or 0.0


def test_the_collector_exports_truncated_values_once_each():
    metrics = CollectorMetrics()
    detectors = _detectors(scan_max_chars=1_024)
    metrics.count_truncated("orders", detectors)
    assert _truncated(metrics, "orders") == 0.0
    detectors.scan("y" * 1_500)
    detectors.scan("y" * 1_500)
    metrics.count_truncated("orders", detectors)
    metrics.count_truncated("orders", detectors)  # nothing new: nothing added
    assert _truncated(metrics, "orders") == 2.0
    other = _detectors(scan_max_chars=1_024)  # a new policy set counts from its own zero
    other.scan("z" * 1_100)
    metrics.count_truncated("orders", other)
    metrics.count_truncated("orders", None)
    assert _truncated(metrics, "orders") == 3.0
