"""deploy/prometheus/alerts.yml names only metrics and labels the code exposes, and every
runbook link points at a heading of docs/operations.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from collector.metrics import CollectorMetrics
from mirror.metrics import MirrorMetrics
from stream_writer.metrics import WriterMetrics

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
GUIDE = ROOT / "docs" / "operations.md"
METRIC = re.compile(r"\bcdc_[a-z0-9_]+\b")
# Labels Prometheus adds (job, instance), renames (the collector's own `instance` label is
# exported_instance, see the file's header) or histogram_quantile needs (le).
PROMETHEUS_LABELS = {"job", "instance", "exported_instance", "le"}


def exposed() -> dict[str, set[str]]:
    """Every sample name the components' metrics expose → its label names."""
    names: dict[str, set[str]] = {}
    for registry in (
        CollectorMetrics(CollectorRegistry()).registry,
        WriterMetrics("w", CollectorRegistry()).registry,
        MirrorMetrics("redis", CollectorRegistry()).registry,
    ):
        # The unlabelled view of each family: its type tells which sample names it exposes.
        # The registry has no public list of its metrics: its own index is read.
        for collector in list(registry._collector_to_names):
            for family in collector.describe():
                labels = set(getattr(collector, "_labelnames", ()))
                suffixes = {
                    "counter": ("_total", "_created"),
                    "gauge": ("",),
                    "histogram": ("_bucket", "_sum", "_count", "_created"),
                }[family.type]
                for suffix in suffixes:
                    names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_metric_an_alert_names_is_exposed_by_the_code(rules: list[dict[str, Any]]) -> None:
    metrics = exposed()
    assert "cdc_collector_rows_total" in metrics  # the helper sees the real registries
    used = {name for rule in rules for name in METRIC.findall(rule["expr"])}
    assert used, "no cdc metric in the alert rules"
    assert used - set(metrics) == set()


def test_every_label_an_alert_groups_or_selects_by_exists(rules: list[dict[str, Any]]) -> None:
    metrics = exposed()
    for rule in rules:
        expr = rule["expr"]
        names = METRIC.findall(expr)
        known = set(PROMETHEUS_LABELS)
        for name in names:
            known |= metrics[name]
        grouped = {
            label.strip()
            for clause in re.findall(r"\bby \(([^)]*)\)", expr)
            for label in clause.split(",")
        }
        selected = set(re.findall(r"[{,]\s*(\w+)\s*=~?", expr))
        assert grouped | selected <= known, (rule["alert"], (grouped | selected) - known)


def test_every_rule_has_a_severity_a_summary_and_a_runbook_in_the_guide(
    rules: list[dict[str, Any]],
) -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in GUIDE.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/operations.md", rule["alert"]
        assert anchor in headings, (rule["alert"], anchor)
    assert len({rule["alert"] for rule in rules}) == len(rules)
