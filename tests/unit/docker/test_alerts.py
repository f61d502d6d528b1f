"""deploy/prometheus/alerts.yml and deploy/grafana/cdc-mirror.json: every expression parses
with a real PromQL parser (promql-parser, Prometheus' grammar; promtool is not here), names
only metrics and labels the components export, the dashboard plots counters only as rates,
and every rule's runbook link points at a heading of docs/operations.md."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cdc_platform.control import ValidationResult
from cdc_platform.observability import Probe, readiness_registry
from collector.metrics import CollectorMetrics
from merge.metrics import MergeMetrics
from mirror.metrics import MirrorMetrics
from scheduler.metrics import SchedulerMetrics
from stream_writer.metrics import WriterMetrics

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "cdc-mirror.json"
GUIDE = ROOT / "docs" / "operations.md"
# Labels Prometheus adds (job, instance), renames (the collector's own `instance` label is
# exported_instance, see the alert file's header) or histogram_quantile needs (le).
PROMETHEUS_LABELS = {"job", "instance", "exported_instance", "le"}
SAMPLES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}
# Sample names that count up: a dashboard shows them through one of RATES only.
COUNTING = ("_total", "_bucket", "_sum", "_count")
RATES = {"rate", "irate", "increase"}
# What the issue asks the rules to cover (item 7), by alert name.
REQUIRED_ALERTS = {
    "CdcComponentDown",
    "CdcCollectorNoneActive",  # collector down / not leading anywhere
    "CdcCollectorDelay",  # source lag
    "CdcStreamWriterLag",  # consumer lag
    "CdcMirrorLag",
    "CdcStreamWriterStalled",
    "CdcMirrorStalled",
    "CdcReadinessLate",
    "CdcComponentNotReady",
    "CdcMergeCheckMismatch",
    "CdcMergeNotRun",
    "CdcCollectorDeadLetters",
    "CdcStreamWriterDeadLetters",
    "CdcMirrorDeadLetters",
    "CdcMirrorFreshness",  # Redis / warehouse freshness
    "CdcSchedulerNoneActive",  # item 5: one active scheduler
    "CdcSchedulerRedDay",  # item 5: a check mismatch marks the day red and alerts
    "CdcSchedulerGaveUp",
    "CdcValidationMismatch",  # issue 25, item 4: validation results exported with an alert
}


def registries() -> list[CollectorRegistry]:
    merge = MergeMetrics(CollectorRegistry())
    merge.succeeded("t", date(2026, 11, 21), 1, 1, 1, 1.0, True, 0, now=1.0)
    scheduler = SchedulerMetrics(CollectorRegistry())
    for gauge in (scheduler.days_behind, scheduler.red_days, scheduler.gave_up):
        gauge.labels("t").set(0)
    scheduler.validated("t", [ValidationResult(target="redis", verdict="equal")], 1.0)
    return [
        CollectorMetrics(CollectorRegistry()).registry,
        WriterMetrics("w", CollectorRegistry()).registry,
        MirrorMetrics("redis", CollectorRegistry()).registry,
        merge.registry,
        scheduler.registry,
        readiness_registry("collector", lambda: Probe(True, "ok")),
    ]


def label_names(registry: CollectorRegistry) -> dict[str, set[str]]:
    """Family name → label names: from the samples, and for labelled metrics that have no
    child yet from the metric's own list (the registry has no public list: its index)."""
    labels: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels.setdefault(family.name, set()).update(sample.labels)
    for collector in list(registry._collector_to_names):
        for family in collector.describe():
            labels.setdefault(family.name, set()).update(getattr(collector, "_labelnames", ()))
    return labels


def exposed() -> dict[str, set[str]]:
    """Every sample name the components expose → its label names, read from the exposition
    (the text a scrape reads), so counters appear with _total as Prometheus stores them."""
    names: dict[str, set[str]] = {}
    for registry in registries():
        labels = label_names(registry)
        text = generate_latest(registry).decode()
        for family in text_string_to_metric_families(text):
            for suffix in SAMPLES[family.type]:
                extra = {"le"} if suffix == "_bucket" else set()
                names[family.name + suffix] = labels.get(family.name, set()) | extra
    return names


def selectors(expr: Any) -> Iterator[Any]:
    found: list[Any] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(expr, visit)
    return iter(found)


def check_labels(expr: Any, metrics: dict[str, set[str]]) -> list[str]:
    """Labels an expression groups by, matches on or selects that its metrics do not have."""
    unknown: list[str] = []

    def known(node: Any) -> set[str]:
        result = set(PROMETHEUS_LABELS)
        for selector in selectors(node):
            result |= metrics.get(selector.name, set())
        return result

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            unknown.extend(set(node.modifier.labels) - known(node.expr))
        if isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            matching = node.modifier.matching
            if matching is not None:
                labels = set(matching.labels)
                unknown.extend(labels - known(node.lhs))
                unknown.extend(labels - known(node.rhs))
        if isinstance(node, promql_parser.VectorSelector):
            names = {matcher.name for matcher in node.matchers.matchers}
            unknown.extend(names - known(node))
        return True

    promql_parser.walk(expr, visit)
    return unknown


def counters_outside_rates(expr: Any) -> list[str]:
    """Counting samples (counters, histogram parts) used as they are, not through a rate."""
    stack: list[Any] = []
    raw: list[str] = []

    def enter(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name.endswith(COUNTING):
            in_rate = any(
                isinstance(up, promql_parser.Call) and up.func.name in RATES for up in stack
            )
            if not in_rate:
                raw.append(node.name)
        stack.append(node)
        return True

    def leave(_node: Any) -> bool:
        stack.pop()
        return True

    promql_parser.walk(expr, enter, leave)
    return raw


@pytest.fixture(scope="module")
def metrics() -> dict[str, set[str]]:
    names = exposed()
    # The helper sees the real registries, counters as Prometheus names them.
    assert {"cdc_collector_rows_total", "cdc_merge_check_ok", "cdc_component_ready"} <= set(names)
    assert names["cdc_merge_check_ok"] == {"table", "dt"}
    return names


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[tuple[str, str]]:
    document = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in document["panels"]
        for target in panel.get("targets", [])
    ]


def grafana_to_promql(expr: str) -> str:
    """Grafana's range variables stand for a duration: any one makes the query parse."""
    return re.sub(r"\$__(rate_interval|interval|range)", "5m", expr)


def test_every_alert_expression_parses(rules: list[dict[str, Any]]) -> None:
    for rule in rules:
        promql_parser.parse(rule["expr"])  # ValueError with the position when it does not
    with pytest.raises(ValueError, match="parenthesis"):
        promql_parser.parse("sum by (x (rate(y[5m]))")  # the parser does refuse bad PromQL


def test_every_metric_an_alert_names_is_exposed_by_the_code(
    rules: list[dict[str, Any]], metrics: dict[str, set[str]]
) -> None:
    used = {s.name for rule in rules for s in selectors(promql_parser.parse(rule["expr"]))}
    assert {"cdc_merge_check_ok", "cdc_component_ready"} <= used
    assert used - {"up"} - set(metrics) == set()


def test_every_label_an_alert_groups_matches_or_selects_by_exists(
    rules: list[dict[str, Any]], metrics: dict[str, set[str]]
) -> None:
    for rule in rules:
        assert check_labels(promql_parser.parse(rule["expr"]), metrics) == [], rule["alert"]


def test_the_label_check_catches_a_label_no_metric_has(metrics: dict[str, set[str]]) -> None:
    expr = promql_parser.parse("sum by (tabel) (cdc_merge_rows{tabel='x'})")
    assert check_labels(expr, metrics) == ["tabel", "tabel"]


def test_the_rules_cover_what_the_issue_asks(rules: list[dict[str, Any]]) -> None:
    assert REQUIRED_ALERTS - {rule["alert"] for rule in rules} == set()


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


def test_every_dashboard_query_parses_and_names_exported_metrics_and_labels(
    metrics: dict[str, set[str]],
) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 15
    used: set[str] = set()
    for title, expr in queries:
        parsed = promql_parser.parse(grafana_to_promql(expr))
        used |= {s.name for s in selectors(parsed)}
        assert check_labels(parsed, metrics) == [], title
    assert used - set(metrics) == set()


def test_the_dashboard_shows_rates_and_lags_not_cumulative_counters() -> None:
    for title, expr in dashboard_queries():
        assert counters_outside_rates(promql_parser.parse(grafana_to_promql(expr))) == [], title
    # The check itself: a raw counter is caught, a rate of it is not.
    assert counters_outside_rates(promql_parser.parse("sum(cdc_mirror_rows_total)")) == [
        "cdc_mirror_rows_total"
    ]
    assert counters_outside_rates(promql_parser.parse("rate(cdc_mirror_rows_total[5m])")) == []


def test_the_dashboard_is_a_grafana_dashboard_with_unique_panels() -> None:
    document = json.loads(DASHBOARD.read_text())
    assert document["uid"] == "cdc-mirror"
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    for panel in document["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
