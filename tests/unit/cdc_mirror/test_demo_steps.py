"""The demo's steps with fakes: a ``FakeLauncher`` for its processes, a ``FakeClock`` for its
waits, a probe for the collectors' health and ``FakeServices`` for the stores and Kafka.

Each step's decisions: what it clears and creates and in which order, the jobs it runs and
how a failed one stops it, how it fails over and catches up, and what its summary says when
the stores agree and when one does not. The whole demo on the real stack is
tests/e2e/test_demo.py.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from rich.console import Console

from cdc_mirror.demo import (
    LAKE_ROWS_METRIC,
    LOGICAL_TABLE,
    MIRROR_ROWS_METRIC,
    DemoNames,
    DemoOptions,
    DemoRun,
    _catch_up,
    _fail_over,
    _gtid_reached,
    _live_line,
    _writer_offsets,
    demo_names,
    demo_overrides,
    metric_total,
)
from cdc_mirror.processes import ComponentError, FakeClock, FakeLauncher, FakeProcess
from cdc_mirror.verify import (
    MemoryStore,
    RawLayerCheck,
    TableAgreement,
    TableSchema,
    check_raw_layer,
    verify_stores,
)
from cdc_platform.config import Settings, TableMirror
from mirror.metrics import MirrorMetrics
from simple_binlog.errors import CdcMirrorError
from stream_writer.metrics import WriterMetrics

DAY = date(2026, 3, 2)


@dataclass
class FakeServices:
    """The demo's stores and Kafka, as the steps see them."""

    launcher: FakeLauncher
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=lambda: {0: 30, 1: 12})
    groups: dict[str, dict[int, int]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    checked: tuple[TableAgreement, RawLayerCheck] | None = None

    def clear(self, names: DemoNames) -> None:
        self.calls.append(("clear", names.group_prefix, names.redis_prefix))

    def create_schema(self, rows_per_table: int) -> int:
        # When: how many jobs had been started by then.
        self.calls.append(("create_schema", rows_per_table, len(self.launcher.launched)))
        return rows_per_table * 16

    def end_offsets(self, topic: str) -> dict[int, int]:
        return dict(self.ends)

    def group_offsets(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        self.calls.append(("group_offsets", group, tuple(partitions)))
        return self.groups.get(group, {})

    def messages_after(self, topic: str, offsets: dict[int, int]) -> bool:
        return any(offsets.get(p, 0) < end for p, end in self.ends.items())

    def metric_sum(self, url: str, metric: str) -> float | None:
        return self.metrics.get(metric)

    def verify(self, run: DemoRun, day: date) -> tuple[TableAgreement, RawLayerCheck]:
        assert self.checked is not None
        return self.checked


@dataclass
class Demo:
    run: DemoRun
    launcher: FakeLauncher
    services: FakeServices
    clock: FakeClock
    output: io.StringIO
    health: dict[str, dict[str, Any] | None]

    @property
    def text(self) -> str:
        return self.output.getvalue()


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    launcher = FakeLauncher()
    services = FakeServices(launcher)
    clock = FakeClock()
    output = io.StringIO()
    health: dict[str, dict[str, Any] | None] = {}
    names = DemoNames(
        home=tmp_path / "demo",
        webui_port=8001,
        collector_ports=(9101, 9102),
        writer_port=9103,
        mirror_ports={"redis": 9104, "warehouse": 9105},
        admin_password="pw",
    )
    run = DemoRun(
        Settings(),
        names,
        {"CDC_MIRROR_X": "1"},
        Console(file=output, width=200, color_system=None),
        services,
        launcher=launcher,
        clock=clock,
        probe=health.get,
    )
    return Demo(run, launcher, services, clock, output, health)


def _collectors(demo: Demo) -> tuple[Any, Any]:
    run = demo.run
    made = [
        run.component(f"collector-{letter}", ["collector", "run"], f"http://c/{letter}/health")
        for letter in "ab"
    ]
    run.collectors.extend(run.supervisor.add(c) for c in made)
    for component in made:
        component.start()
    return made[0], made[1]


def _child(component: Any) -> FakeProcess:
    assert isinstance(component.process, FakeProcess)
    return component.process


# -- 2. a clean slate ------------------------------------------------------------------------


def test_reset_clears_the_stores_and_home_drops_hive_then_creates_the_schema(demo: Demo) -> None:
    demo.launcher.configure("sql", exits_with=0)
    names = demo.run.names
    (names.home / "lake").mkdir(parents=True)
    (names.home / "lake" / "stale.parquet").write_text("from an earlier run")
    assert demo.run.reset(50) == 800
    assert demo.services.calls == [
        ("clear", "cdc-mirror-demo", "cdcdemo"),
        ("create_schema", 50, 1),  # after the Hive job
    ]
    assert not (names.home / "lake").exists() and names.logs.is_dir()
    (hive,) = demo.launcher.launched
    assert hive.command[-4:] == [
        "sql",
        "DROP DATABASE IF EXISTS `demo_ods_binlog_source` CASCADE",
        "DROP DATABASE IF EXISTS `demo_ods_snapshot` CASCADE",
        "DROP DATABASE IF EXISTS `demo_ods_snapshot_dt` CASCADE",
    ]
    assert hive.log_path == names.logs / "reset-hive.log"
    assert hive.env == {"CDC_MIRROR_X": "1"}
    assert "800 history rows; demo state in" in demo.text


def test_a_failed_job_stops_the_step_naming_its_exit_code_and_log(demo: Demo) -> None:
    demo.launcher.configure("sql", exits_with=2)
    logs = demo.run.names.logs
    with pytest.raises(
        ComponentError, match=rf"^reset-hive failed with exit code 2; see {logs}/reset-hive\.log\.$"
    ):
        demo.run.reset(50)
    assert [c[0] for c in demo.services.calls] == ["clear"]  # MySQL left alone


def test_a_job_that_never_ends_times_out(demo: Demo) -> None:
    with pytest.raises(ComponentError, match="timed out after 600 s waiting for replay to finish"):
        demo.run.replay(10)


# -- 4. replay, 7. merge -----------------------------------------------------------------------


def test_replay_runs_the_replay_job_and_reports_rows_and_topic(demo: Demo) -> None:
    demo.launcher.configure("replay", exits_with=0)
    demo.run.replay(800)
    (job,) = demo.launcher.launched
    assert job.command[-8:] == [
        "replay",
        "--instance",
        "demo",
        "--db-prefix",
        "ordercenter",
        "--table-prefix",
        "orderinfo",
        "--no-progress",
    ]
    assert f"800 rows replayed into {demo.run.topic}" in demo.text


def test_merge_makes_yesterday_when_ready_and_today_provisional(demo: Demo) -> None:
    demo.launcher.configure("merge", exits_with=0)
    demo.run.merge(DAY)
    yesterday, today = demo.launcher.launched
    assert yesterday.command[-7:] == [
        "merge",
        "--table",
        LOGICAL_TABLE,
        "--dt",
        "2026-03-01",
        "--wait-ready-s",
        "300",
    ]
    assert today.command[-6:] == ["merge", "--table", LOGICAL_TABLE, "--dt", "2026-03-02",
                                  "--skip-readiness"]  # fmt: skip
    logs = demo.run.names.logs
    assert [c.log_path for c in demo.launcher.launched] == [
        logs / "merge-2026-03-01.log",
        logs / "merge-2026-03-02.log",
    ]
    assert "2026-03-01: merged" in demo.text and "2026-03-02: merged" in demo.text


# -- 5. live workload and failover ---------------------------------------------------------------


def _elect(demo: Demo, a: Any, b: Any) -> None:
    """The election as the probe shows it: a leads while it lives, then b."""

    def roles(url: str) -> dict[str, Any] | None:
        if url == a.health_url:
            return {"role": "active"} if a.running and a.starts == 1 else {"role": "standby"}
        return {"role": "standby" if a.running and a.starts == 1 else "active"}

    demo.run.probe = roles
    a.probe = b.probe = roles


def test_fail_over_kills_the_active_collector_and_restarts_it_as_standby(demo: Demo) -> None:
    a, b = _collectors(demo)
    _elect(demo, a, b)
    first = _child(a)
    _fail_over(demo.run)
    assert first.returncode == -9  # kill -9, not a clean stop
    assert a.running and a.starts == 2 and a.process is not first
    assert b.running and b.starts == 1
    assert "kill -9 collector-a" in demo.text
    assert "collector-b active after 0.0 s; collector-a restarts as the new standby" in demo.text


def test_fail_over_without_an_active_collector_kills_nothing(demo: Demo) -> None:
    a, b = _collectors(demo)  # no health answers: no one is active
    _fail_over(demo.run)
    assert a.starts == b.starts == 1 and demo.launcher.journal == []


@dataclass
class FakeWorkload:
    changes: int = 0
    transactions: int = 0
    error: BaseException | None = None
    fail_after: int | None = None
    events: list[str] = field(default_factory=list)
    last_gtid: str | None = "0-1-42"

    def start(self) -> None:
        self.events.append("start")

    def stop(self) -> None:
        self.events.append("stop")
        if self.error is not None:
            raise CdcMirrorError(f"the demo workload failed: {self.error}")


def test_live_shows_the_flow_fails_over_once_half_way_and_stops_the_workload(demo: Demo) -> None:
    a, b = _collectors(demo)
    _elect(demo, a, b)
    demo.services.metrics = {LAKE_ROWS_METRIC: 120, MIRROR_ROWS_METRIC: 70}
    workload = FakeWorkload(changes=150, transactions=20)
    demo.run.live(workload, DemoOptions(live_seconds=12))  # type: ignore[arg-type]
    assert workload.events == ["start", "stop"]
    lines = [line for line in demo.text.splitlines() if "Kafka end offsets" in line]
    assert len(lines) == 5  # at 0, 3, 6, 9 s and once after the stop
    assert (
        "lake    120" in lines[0] and "warehouse     70" in lines[0] and "collector-a" in lines[0]
    )
    assert lines[-1].endswith("collector-b")
    assert demo.text.count("kill -9") == 1  # at 6 s, half-way
    assert "workload: 20 MySQL transactions, 150 row changes" in demo.text


def test_live_without_failover_kills_nothing(demo: Demo) -> None:
    a, b = _collectors(demo)
    _elect(demo, a, b)
    demo.run.live(FakeWorkload(), DemoOptions(live_seconds=12, failover=False))  # type: ignore[arg-type]
    assert "kill -9" not in demo.text and demo.launcher.journal == []


def test_live_stops_early_and_fails_when_the_workload_fails(demo: Demo) -> None:
    workload = FakeWorkload(error=RuntimeError("MySQL went away"))
    with pytest.raises(CdcMirrorError, match="the demo workload failed: MySQL went away"):
        demo.run.live(workload, DemoOptions(live_seconds=60))  # type: ignore[arg-type]
    assert demo.clock.now == 0  # no status line was waited for


def test_the_status_counters_are_read_with_prometheus_client_s_parser() -> None:
    # By the declared counter name, which the parser gives the family (its samples carry
    # "_total"); the "_created" samples beside them are not rows.
    writer = WriterMetrics("demo")
    writer.rows.labels("demo", LOGICAL_TABLE).inc(120)
    writer.rows.labels("demo", 'odd} 9 " [x]').inc(5)  # a label the text must not confuse
    exposed = generate_latest(writer.registry).decode()
    assert metric_total(exposed, LAKE_ROWS_METRIC) == 125
    assert metric_total(exposed, "cdc_stream_writer_rows_total") == 0  # a sample, not a family
    mirror = MirrorMetrics("redis")
    mirror.rows.labels("redis", LOGICAL_TABLE).inc(70)
    assert metric_total(generate_latest(mirror.registry).decode(), MIRROR_ROWS_METRIC) == 70


@dataclass
class ExposingServices(FakeServices):
    """Metrics as the real components expose them, read as the live demo reads them."""

    expositions: dict[str, str] = field(default_factory=dict)

    def metric_sum(self, url: str, metric: str) -> float | None:
        return metric_total(self.expositions[url], metric)


def test_every_status_counter_is_non_zero_when_data_flows(demo: Demo) -> None:
    names = demo.run.names
    writer = WriterMetrics("demo")
    writer.rows.labels("demo", LOGICAL_TABLE).inc(120)
    services = ExposingServices(demo.launcher)
    services.expositions[f"http://127.0.0.1:{names.writer_port}/metrics"] = generate_latest(
        writer.registry
    ).decode()
    for target, port in names.mirror_ports.items():
        mirror = MirrorMetrics(target)
        mirror.rows.labels(target, LOGICAL_TABLE).inc(70 if target == "redis" else 80)
        services.expositions[f"http://127.0.0.1:{port}/metrics"] = generate_latest(
            mirror.registry
        ).decode()
    demo.run.services = services
    line = _live_line(demo.run, FakeWorkload(changes=150))  # type: ignore[arg-type]
    assert "MySQL    150" in line and "Kafka end offsets     42" in line
    assert "lake    120" in line and "warehouse     80" in line and "Redis     70" in line


# -- 6. catching up --------------------------------------------------------------------------


def _caught_up_groups(demo: Demo) -> None:
    demo.services.groups = {
        "cdc-mirror-demo.redis": {0: 30, 1: 12},
        "cdc-mirror-demo.warehouse": {0: 30, 1: 12},
    }


def _writer_checkpoint(demo: Demo, offsets: dict[int, int]) -> None:
    names = demo.run.names
    state = names.lake / "_stream_writer" / names.writer / "checkpoint" / "cdc_progress.json"
    state.parent.mkdir(parents=True)
    partitions = [
        {"topic": demo.run.topic, "partition": p, "nextOffset": o} for p, o in offsets.items()
    ]
    partitions.append({"topic": "another.topic", "partition": 0, "nextOffset": 0})
    state.write_text(json.dumps({"partitions": partitions}))


def test_catch_up_waits_for_the_gtid_then_every_mirror_then_the_writer(demo: Demo) -> None:
    a, b = _collectors(demo)

    def health(url: str) -> dict[str, Any] | None:
        # The collector publishes the last transaction one second into the wait.
        gtid = "0-1-42" if demo.clock.now >= 1.0 else "0-1-41"
        if url == a.health_url:
            return {"role": "active", "committed": {"gtid": gtid}}
        return {"role": "standby"}

    a.probe = b.probe = health
    _caught_up_groups(demo)
    _writer_checkpoint(demo, {0: 30, 1: 12})
    _catch_up(demo.run, "0-1-42")
    groups = [c[1] for c in demo.services.calls if c[0] == "group_offsets"]
    assert groups == ["cdc-mirror-demo.redis", "cdc-mirror-demo.warehouse"]
    text = demo.text
    assert "everything up to GTID 0-1-42 is in Kafka (1.0 s)" in text
    assert "ends at offsets 42" in text
    assert "mirror → redis: caught up" in text and "mirror → warehouse: caught up" in text
    assert "stream writer: everything is in the lake" in text


def test_catch_up_names_the_mirror_that_does_not_catch_up(demo: Demo) -> None:
    a, _ = _collectors(demo)
    a.probe = lambda url: {"role": "active", "committed": {"gtid": "0-1-42"}}
    _caught_up_groups(demo)
    demo.services.groups["cdc-mirror-demo.warehouse"] = {0: 29, 1: 12}
    with pytest.raises(
        ComponentError,
        match=r"timed out after 300 s waiting for the warehouse mirror to apply everything",
    ):
        _catch_up(demo.run, "0-1-42")
    assert "mirror → redis: caught up" in demo.text


def test_catch_up_waits_for_the_writer_checkpoint(demo: Demo) -> None:
    a, _ = _collectors(demo)
    a.probe = lambda url: {"role": "active", "committed": {"gtid": "0-1-42"}}
    _caught_up_groups(demo)  # no checkpoint written: the writer has written nothing
    with pytest.raises(ComponentError, match="the stream writer to write everything to the lake"):
        _catch_up(demo.run, "0-1-42")


def test_catch_up_needs_the_workload_s_last_gtid(demo: Demo) -> None:
    with pytest.raises(CdcMirrorError, match="did not report its last GTID"):
        demo.run.catch_up(FakeWorkload(last_gtid=None))  # type: ignore[arg-type]


def test_writer_offsets_are_read_for_the_demo_topic_only(demo: Demo) -> None:
    assert _writer_offsets(demo.run.names, demo.run.topic) == {}  # no checkpoint yet
    _writer_checkpoint(demo, {0: 7})
    assert _writer_offsets(demo.run.names, demo.run.topic) == {0: 7}


@pytest.mark.parametrize(
    ("position", "target", "reached"),
    [
        (None, "0-1-5", False),
        ("0-1-5", "0-1-5", True),
        ("0-1-4", "0-1-5", False),
        ("0-2-9,1-1-3", "0-1-5,1-1-3", True),  # per domain, whichever server
        ("0-1-9", "0-1-5,1-1-3", False),  # a domain not reached at all
    ],
)
def test_gtid_reached_per_domain(position: str | None, target: str, reached: bool) -> None:
    assert _gtid_reached(position, target) is reached


# -- 8. the summary --------------------------------------------------------------------------

SCHEMA = TableSchema(LOGICAL_TABLE, (("ordercenter_00", "orderinfo_00"),),
                     {"id": "bigint unsigned", "amount": "decimal(12,2)"}, ("id",))  # fmt: skip
ROWS = [("ordercenter_00.orderinfo_00", {"id": n, "amount": Decimal("1.00")}) for n in (1, 2, 3)]
KAFKA = [("t", 0, n, n) for n in range(3)]


def _checked(redis_rows: list[Any], lake: list[Any] | None = None) -> tuple[Any, Any]:
    stores = [MemoryStore(name, ROWS) for name in ("hive", "warehouse")]
    agreement = verify_stores(
        SCHEMA, MemoryStore("mysql", ROWS), [*stores, MemoryStore("redis", redis_rows)]
    )
    raw = check_raw_layer(LOGICAL_TABLE, KAFKA, KAFKA if lake is None else lake)
    return agreement, raw


def test_summary_when_every_store_agrees(demo: Demo) -> None:
    demo.services.checked = _checked(ROWS)
    assert demo.run.summary(DAY) is True
    text = demo.text
    for store, verdict in (("mysql", "reference"), ("hive", "equal"), ("redis", "equal")):
        assert any(store in line and verdict in line for line in text.splitlines()), text
    assert "raw layer: 3 lake rows for 3 Kafka messages: exactly once" in text
    assert "MySQL, the Hive snapshot of 2026-03-02, the warehouse and Redis agree." in text


def test_summary_names_the_store_that_differs_and_fails(demo: Demo) -> None:
    demo.services.checked = _checked(ROWS[:2])
    assert demo.run.summary(DAY) is False
    text = demo.text
    assert f"redis's copy of {LOGICAL_TABLE} differs from mysql: 1 missing; e.g. keys 3." in text
    assert "the warehouse and Redis DO NOT agree." in text


def test_summary_prints_bracketed_table_text_and_keys_as_they_are(demo: Demo) -> None:
    shard = "ordercenter_00.[bold]orderinfo[/bold]"
    rows = [(shard, {"id": n, "amount": Decimal("1.00")}) for n in (1, 2, 3)]
    schema = TableSchema("[red]t[/]", ((shard, ""),), dict(SCHEMA.columns), ("id",))
    agreement = verify_stores(schema, MemoryStore("mysql", rows), [MemoryStore("[kudu]", rows[:2])])
    raw = check_raw_layer("[red]t[/]", [("[t]", 0, 0, 0)], [])
    demo.services.checked = agreement, raw
    assert demo.run.summary(DAY) is False
    text = demo.text
    assert "1 missing; e.g. keys 3" in text and "[kudu]" in text
    assert "[kudu]'s copy of [red]t[/] differs from mysql: 1 missing; e.g. keys 3." in text
    assert "[red]t[/] raw layer: 0 lake rows for 1 Kafka messages" in text
    assert "e.g. [t]/0@0" in text


def test_where_to_look_prints_bracketed_names_as_they_are(demo: Demo) -> None:
    names = demo.run.names
    demo.run.names = DemoNames(
        home=names.home / "[b]x[/b]",
        webui_port=8001,
        collector_ports=names.collector_ports,
        writer_port=names.writer_port,
        mirror_ports=names.mirror_ports,
        admin_password="[pw]",
        warehouse_schema="cdc[demo]",
        redis_prefix="[cdc]",
    )
    demo.run.where_to_look(DAY)
    text = demo.text
    assert "(user admin, password [pw])" in text
    assert "FROM cdc[demo].ordercenter_orderinfo" in text
    assert "--pattern '[cdc]:ordercenter_orderinfo:*'" in text
    assert "[b]x[/b]/logs" in text


def test_summary_names_kudu_in_the_verdict_when_it_is_checked(demo: Demo) -> None:
    stores = [MemoryStore(name, ROWS) for name in ("hive", "warehouse", "redis", "kudu")]
    agreement = verify_stores(SCHEMA, MemoryStore("mysql", ROWS), stores)
    demo.services.checked = agreement, check_raw_layer(LOGICAL_TABLE, KAFKA, KAFKA)
    assert demo.run.summary(DAY) is True
    assert any("kudu" in line and "equal" in line for line in demo.text.splitlines())
    assert "MySQL, the Hive snapshot of 2026-03-02, the warehouse, Redis and Kudu agree." in (
        demo.text
    )


def test_summary_fails_when_the_raw_layer_is_not_exactly_once(demo: Demo) -> None:
    demo.services.checked = _checked(ROWS, lake=[*KAFKA, KAFKA[0]])
    assert demo.run.summary(DAY) is False
    assert "1 duplicated" in demo.text and "DO NOT agree" in demo.text


# -- the demo's settings -----------------------------------------------------------------------


def test_demo_overrides_keep_everything_under_the_demo_s_names(demo: Demo) -> None:
    names = demo.run.names
    overrides = demo_overrides(Settings(), names)
    assert [i["name"] for i in overrides["instances"]] == ["demo"]
    assert overrides["mirror"]["group_prefix"] == names.group_prefix
    assert overrides["redis"]["key_prefix"] == "cdcdemo"
    assert overrides["spark"]["lake_dir"] == str(names.home / "lake")
    assert overrides["stream_writer"]["database"] == "demo_ods_binlog_source"
    assert overrides["merge"]["database"] == "demo_ods_snapshot"
    assert overrides["webui"]["database_url"] == f"sqlite:///{names.home / 'webui.sqlite'}"
    scraped = {t["name"]: t["url"] for t in overrides["webui"]["scrape_targets"]}
    assert scraped["stream_writer"] == "http://127.0.0.1:9103/metrics"
    assert set(scraped) == {"collector", "stream_writer", "mirror-redis", "mirror-warehouse"}


# -- Kudu, when a table mirror of the user's configuration targets it --------------------------


def test_kudu_joins_the_demo_only_when_a_table_mirror_targets_it(demo: Demo) -> None:
    plain = demo_names(Settings())
    assert set(plain.mirror_ports) == {"redis", "warehouse"}
    assert "kudu" not in demo_overrides(Settings(), plain)["tables"][0]["targets"]
    with_kudu = Settings(
        tables=[TableMirror(db_prefix="shop", table_prefix="orders", targets=["kudu"])]
    )
    names = demo_names(with_kudu)
    assert set(names.mirror_ports) == {"redis", "warehouse", "kudu"}
    overrides = demo_overrides(with_kudu, names)
    assert overrides["tables"][0]["targets"] == ["hive", "warehouse", "redis", "kudu"]
    assert overrides["kudu"]["table_prefix"] == "cdc_demo."
    scraped = {t["name"] for t in overrides["webui"]["scrape_targets"]}
    assert "mirror-kudu" in scraped


def test_the_status_line_shows_kudu_s_counter_when_it_is_configured(demo: Demo) -> None:
    names = demo.run.names
    names.mirror_ports["kudu"] = 9106
    services = ExposingServices(demo.launcher)
    services.expositions[f"http://127.0.0.1:{names.writer_port}/metrics"] = generate_latest(
        WriterMetrics("demo").registry
    ).decode()
    for target, port in names.mirror_ports.items():
        mirror = MirrorMetrics(target)
        mirror.rows.labels(target, LOGICAL_TABLE).inc(
            {"redis": 70, "warehouse": 80}.get(target, 90)
        )
        services.expositions[f"http://127.0.0.1:{port}/metrics"] = generate_latest(
            mirror.registry
        ).decode()
    demo.run.services = services
    line = _live_line(demo.run, FakeWorkload(changes=150))  # type: ignore[arg-type]
    assert "warehouse     80" in line and "Redis     70" in line and "Kudu     90" in line
    del names.mirror_ports["kudu"]
    assert "Kudu" not in _live_line(demo.run, FakeWorkload(changes=150))  # type: ignore[arg-type]
