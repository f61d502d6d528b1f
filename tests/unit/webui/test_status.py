"""Per-table status: the derivations (pure), from the components' real metric registries, and
the pages (Overview rows, a mirror's status page, the JSON) with endpoints up and down and
500 table mirrors."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from fastapi.testclient import TestClient
from prometheus_client import generate_latest, start_http_server

from collector.metrics import CollectorMetrics
from mirror.metrics import MirrorMetrics
from stream_writer.metrics import WriterMetrics
from tests.unit.webui.harness import (
    ADMIN_PASSWORD,
    check_chart_points,
    instance_body,
    login,
    make_app,
    mirror_body,
)
from webui.models import TableMirrorRow
from webui.status import (
    DayState,
    Freshness,
    GroupOffsets,
    MergeRun,
    Metrics,
    ReadinessRule,
    Scrape,
    StallTracker,
    TopicOffsets,
    overall,
    rate,
    table_status,
    topic_lag,
    yesterday_verdict,
)
from webui.status_sources import StatusService, parse_metrics

UTC_RULE = ReadinessRule(ZoneInfo("UTC"), lateness_budget_s=900, pipeline_delay_s=240)
NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC).timestamp()
TOPIC = "cdc.binlog.orders"


def _metrics(*registries) -> Metrics:
    text = "".join(generate_latest(r).decode() for r in registries)
    return Metrics([Scrape("all", "http://x/metrics", True, parse_metrics(text))])


def _healthy_registries():
    collector = CollectorMetrics()
    collector.role.labels("orders").set(1)
    collector.committed_offset.labels("orders").set(123_456)
    collector.last_event_time.labels("orders").set(NOW - 2)
    collector.delay.labels("orders").set(1.5)
    writer = WriterMetrics("orders")
    writer.lag.labels("orders", TOPIC, "0").set(0)
    writer.watermark.labels("orders", TOPIC, "0").set(NOW - 5)
    redis = MirrorMetrics("redis")
    redis.config_version.set(3)
    redis.last_applied.labels("redis", "shop_orders").set(NOW - 3)
    return collector, writer, redis


def _status(metrics: Metrics, offsets: TopicOffsets | None = None, **extra):
    args = {
        "name": "shop_orders",
        "instance": "orders",
        "topic": TOPIC,
        "targets": ["hive", "redis"],
        "metrics": metrics,
        "offsets": offsets,
        "merge": None,
        "freshness": [],
        "rule": UTC_RULE,
        "tracker": StallTracker(),
        "now": NOW,
    }
    args.update(extra)
    return table_status(**args)


def test_a_healthy_table_flows_from_the_components_own_metrics() -> None:
    collector, writer, redis = _healthy_registries()
    metrics = _metrics(collector.registry, writer.registry, redis.registry)
    from webui.status import freshness_from_metrics

    fresh = freshness_from_metrics(metrics, "redis", "shop_orders", NOW - 2, NOW)
    assert (fresh.age_s, fresh.behind_s, fresh.down) == (3.0, 1.0, False)
    offsets = TopicOffsets(
        TOPIC, {0: 100, 1: 50}, (GroupOffsets("cdc-mirror.redis", "mirror redis", {0: 100, 1: 50}),)
    )
    status = _status(metrics, offsets, freshness=[fresh])
    assert status.reasons == ()
    assert (status.flowing, status.stalled) == ("ok", False)
    assert (status.collector, status.binlog_offset, status.source_delay_s) == (
        "active",
        123_456,
        1.5,
    )
    assert status.end_offset == 150
    assert {(lag.component, lag.lag) for lag in status.lags} == {
        ("mirror redis", 0),
        ("stream writer", 0),
    }
    assert status.watermark_s == NOW - 5
    # The watermark passed yesterday's midnight + 15 min and that midnight is 9 h ago.
    assert status.days[0] == DayState(date(2026, 11, 25), True)


def test_components_that_do_not_answer_are_down_not_errors() -> None:
    metrics = Metrics([Scrape("collector", "http://127.0.0.1:1/metrics", False, error="refused")])
    fresh = Freshness("redis", None, None, down=True, detail="no redis mirror reports metrics")
    status = _status(
        metrics, TopicOffsets(TOPIC, error="Kafka did not answer (timed out)."), freshness=[fresh]
    )
    assert status.flowing == "red"
    assert status.collector == "down"
    assert "no collector of instance orders reports metrics." in status.reasons
    assert "Kafka: Kafka did not answer (timed out)." in status.reasons
    assert "no stream writer reports topic cdc.binlog.orders." in status.reasons
    assert "redis: no redis mirror reports metrics." in status.reasons


def test_a_consumer_that_lags_without_moving_is_stalled() -> None:
    collector, writer, _ = _healthy_registries()
    metrics = _metrics(collector.registry, writer.registry)
    tracker = StallTracker()

    def at(now: float, committed: int):
        offsets = TopicOffsets(
            TOPIC, {0: 500}, (GroupOffsets("g", "mirror redis", {0: committed}),)
        )
        return _status(metrics, offsets, tracker=tracker, now=now, targets=["redis"])

    assert at(NOW, 100).stalled is False
    moved = at(NOW + 100, 200)  # it moved: the clock starts again
    assert moved.stalled is False and moved.flowing == "ok"
    still = at(NOW + 250, 200)
    assert still.stalled is True and still.flowing == "red"
    assert "mirror redis has not moved for 150 s with 300 messages to read." in still.reasons
    assert at(NOW + 260, 500).stalled is False  # caught up


def test_lag_of_a_group() -> None:
    assert topic_lag({0: 10, 1: 5}, {0: 7}) == 3 + 5
    assert topic_lag({0: 10}, {}) is None


def test_yesterday_is_good_red_waiting_or_unknown() -> None:
    day = DayState(date(2026, 11, 25), True)
    merged = MergeRun(date(2026, 11, 25), "succeeded", rows=10, check_ok=True)
    assert yesterday_verdict(day, merged, hive=True) == ("ok", "2026-11-25 merged, checked equal")
    differs = MergeRun(date(2026, 11, 25), "mismatch", check_ok=False)
    assert yesterday_verdict(day, differs, True) == ("red", "2026-11-25 differs from MySQL")
    failed = MergeRun(date(2026, 11, 25), "failed", error="boom")
    assert yesterday_verdict(day, failed, True)[0] == "red"
    waiting = MergeRun(date(2026, 11, 25), "waiting", error="not passed it yet")
    assert yesterday_verdict(day, waiting, True) == ("unknown", "2026-11-25 waiting for readiness")
    older = MergeRun(date(2026, 11, 24), "succeeded", check_ok=True)
    assert yesterday_verdict(day, older, True) == ("warn", "2026-11-25 ready, not merged yet")
    not_ready = DayState(date(2026, 11, 25), False)
    assert yesterday_verdict(not_ready, None, True) == ("unknown", "2026-11-25 not ready yet")
    assert yesterday_verdict(not_ready, None, hive=False)[0] == "ok"


def test_readiness_follows_the_writers_rule() -> None:
    midnight = datetime(2026, 11, 26, tzinfo=UTC).timestamp()
    day = date(2026, 11, 25)
    assert not UTC_RULE.is_ready(day, midnight + 899, midnight + 3600)  # lateness budget
    assert not UTC_RULE.is_ready(day, midnight + 900, midnight + 239)  # pipeline delay
    assert UTC_RULE.is_ready(day, midnight + 900, midnight + 240)
    assert not UTC_RULE.is_ready(day, None, midnight + 3600)


def test_charts_show_rates_and_sums_not_counters() -> None:
    # A counter that restarts (the process did) starts over instead of going negative.
    assert rate([(0, 0), (10, 100), (20, 300), (30, 5), (40, 105)]) == [
        (10, 10.0),
        (20, 20.0),
        (40, 10.0),
    ]


def test_overall_counts() -> None:
    collector, writer, redis = _healthy_registries()
    good = _status(_metrics(collector.registry, writer.registry, redis.registry))
    down = _status(Metrics([]))
    assert overall([good, down]) == {
        "flowing": 1,
        "lagging": 0,
        "stalled or down": 1,
        "yesterday red": 0,
        "yesterday good": 0,
    }


# --- the pages ------------------------------------------------------------------------------


def test_status_pages_read_live_endpoints_and_show_a_dead_one_as_down(tmp_path: Path) -> None:
    collector, writer, redis = _healthy_registries()
    redis.last_applied.labels("redis", "ordercenter_orderinfo").set(NOW - 3)
    servers = [
        start_http_server(0, addr="127.0.0.1", registry=r.registry)
        for r in (collector, writer, redis)
    ]
    try:
        targets = [
            {"name": name, "url": f"http://127.0.0.1:{server.server_port}/metrics"}
            for name, (server, _) in zip(
                ("collector", "stream_writer", "mirror"), servers, strict=True
            )
        ]
        targets.append({"name": "merge", "url": "http://127.0.0.1:1/metrics"})
        app = make_app(tmp_path, scrape_targets=targets)
        with TestClient(app) as client:
            csrf = login(client)
            assert (
                client.post(
                    "/api/instances", json=instance_body(), headers={"X-CSRF-Token": csrf}
                ).status_code
                == 201
            )
            body = mirror_body(targets=["hive", "redis"])
            assert (
                client.post(
                    "/api/table-mirrors", json=body, headers={"X-CSRF-Token": csrf}
                ).status_code
                == 201
            )
            service = app.state.status
            assert isinstance(service, StatusService)
            service.refresh_now()
            page = client.get("/status/ordercenter_orderinfo")
            assert page.status_code == 200
            assert "binlogOffset 123456" in page.text
            overview = client.get("/")
            assert 'data-table="ordercenter_orderinfo"' in overview.text
            assert "merge (http://127.0.0.1:1/metrics) does not answer" in overview.text
            data = client.get("/api/status").json()
            (table,) = data["tables"]
            assert table["name"] == "ordercenter_orderinfo"
            assert table["binlog_offset"] == 123456
            assert [f["target"] for f in table["freshness"]] == ["redis"]
            assert client.get("/api/status/ordercenter_orderinfo").json()["collector"] == "active"
            assert client.get("/api/status/nothing").status_code == 404
    finally:
        for server, thread in servers:
            server.shutdown()
            thread.join(5)


def test_pages_render_with_500_table_mirrors(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    with TestClient(app) as client:
        csrf = login(client)
        assert (
            client.post(
                "/api/instances", json=instance_body(), headers={"X-CSRF-Token": csrf}
            ).status_code
            == 201
        )
        sessions = app.state.ctx.sessions
        with sessions.begin() as db:
            from webui.models import Instance

            instance = db.query(Instance).one()
            now = datetime.now(UTC)
            for i in range(500):
                spec = {
                    "db_prefix": f"db{i:03d}",
                    "table_prefix": "orders",
                    "targets": ["hive", "warehouse", "redis"],
                }
                db.add(
                    TableMirrorRow(
                        name=f"db{i:03d}_orders", instance_id=instance.id, spec=spec, updated_at=now
                    )
                )
        first = client.get("/")
        assert first.status_code == 200
        assert first.text.count('data-table="') == 500  # still gathering: every row shows
        assert first.text.count("gathering…") == 500
        app.state.status.refresh_now()
        overview = client.get("/")
        assert overview.text.count('data-table="') == 500
        assert overview.text.count("gathering…") == 0
        assert client.get("/status/db499_orders").status_code == 200
        assert len(client.get("/api/status").json()["tables"]) == 500
        assert client.get("/tables").status_code == 200
        assert client.get("/replays").status_code == 200
        assert ADMIN_PASSWORD not in overview.text


def test_trends_chart_rates_and_each_topic_once() -> None:
    from webui.status import Trends

    trends = Trends(window_s=100)
    for n, at in enumerate((1000.0, 1010.0, 1020.0)):
        redis = MirrorMetrics("redis")
        redis.applied.inc(100 * n)
        collector = CollectorMetrics()
        collector.delay.labels("orders").set(2.0 + n)
        metrics = _metrics(redis.registry, collector.registry)
        offsets = TopicOffsets(TOPIC, {0: 50}, (GroupOffsets("g", "mirror redis", {0: 50 - n}),))
        status = _status(metrics, offsets, targets=["redis"], now=at)
        # Two tables on one topic: its lag counts once.
        trends.record(at, metrics, [status, status])
        trends.record(at, metrics, [status])  # the same round again: no new point
    assert trends.rows_per_second() == [("applied to redis", [(1010.0, 10.0), (1020.0, 10.0)])]
    assert trends.lags() == [("mirror redis", [(1000.0, 0.0), (1010.0, 1.0), (1020.0, 2.0)])]
    assert trends.delays() == [("orders", [(1000.0, 2.0), (1010.0, 3.0), (1020.0, 4.0)])]
    trends.record(1200.0, Metrics([]), [])  # older than the window: the three points go
    assert trends.delays() == []


def test_a_mirrors_initial_load_shows_with_its_progress(tmp_path: Path) -> None:
    from webui.models import ReplayJob

    app = make_app(tmp_path)
    with TestClient(app) as client:
        csrf = login(client)
        headers = {"X-CSRF-Token": csrf}
        assert (
            client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
        )
        assert (
            client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code
            == 201
        )
        with app.state.ctx.sessions.begin() as db:
            for run_id, state, done, total in (
                ("older-run", "failed", 5, 100),
                ("newest-run", "running", 250, 1000),
            ):
                db.add(ReplayJob(
                    run_id=run_id, state=state, rows_done=done, rows_total=total,
                    request={"instance": "orders", "db_prefix": "ordercenter", "table_prefix": "orderinfo"},
                    created_at=datetime.now(UTC), recorded=True, cancel_requested=False,
                    table_mirror="ordercenter_orderinfo",
                ))  # fmt: skip
        app.state.status.refresh_now()
        row = (
            client.get("/")
            .text.split('data-table="ordercenter_orderinfo"', 1)[1]
            .split("</tr>", 1)[0]
        )
        assert 'href="/replays/newest-run">initial load running 25 %' in row
        page = client.get("/status/ordercenter_orderinfo").text
        assert "newest-run" in page and "250 of 1000 rows" in page
        status = client.get("/api/status/ordercenter_orderinfo").json()
        assert status["initial_load"]["run_id"] == "newest-run"


def test_a_mirrors_charts_are_aggregated_by_the_admin_database(tmp_path: Path) -> None:
    from webui.db import make_engine, migrate, session_factory

    engine = make_engine(f"sqlite:///{tmp_path / 'admin.sqlite'}")
    migrate(engine)
    try:
        check_chart_points(session_factory(engine))
    finally:
        engine.dispose()


def test_a_mirrors_charts_show_rates_ages_and_summed_lags(tmp_path: Path) -> None:
    """The page's charts from the points: a counter as its rate, a last applied time as its age
    (never below 0), a topic's partitions as one line per consumer."""
    from webui.db import make_engine, migrate, session_factory
    from webui.models import MetricSample
    from webui.status_pages import CHART_POINTS, _table_charts

    engine = make_engine(f"sqlite:///{tmp_path / 'admin.sqlite'}")
    migrate(engine)
    collector, writer, redis = _healthy_registries()
    writer.lag.labels("orders", TOPIC, "1").set(0)
    redis.lag.labels("redis", TOPIC, "0").set(0)
    redis.rows.labels("redis", "shop_orders").inc(0)
    metrics = _metrics(collector.registry, writer.registry, redis.registry)
    since = NOW - CHART_POINTS * 30.0
    for n in range(6):
        at = since + 30.0 * n + 1
        samples = [
            ("cdc_mirror_rows_total", "table=shop_orders,target=redis", 60.0 * n),
            ("cdc_mirror_last_applied_timestamp_seconds", "table=shop_orders,target=redis",
             at - 5 if n < 5 else at + 5),  # a clock ahead of the admin's: age 0
            ("cdc_stream_writer_lag_messages", f"partition=0,topic={TOPIC},writer=orders", 2.0),
            ("cdc_stream_writer_lag_messages", f"partition=1,topic={TOPIC},writer=orders", 3.0),
            ("cdc_collector_delay_seconds", "instance=orders", 1.5),
        ]  # fmt: skip
        with session_factory(engine).begin() as db:
            db.add_all(
                MetricSample(at=at, target="all", name=name, labels=labels, value=value)
                for name, labels, value in samples
            )
    status = _status(metrics)
    with session_factory(engine)() as db:
        charts = _table_charts(db, metrics, status, since, NOW)
    engine.dispose()
    assert [(c["title"], c["labels"]) for c in charts] == [
        ("Rows per second of this table", ["redis"]),
        (f"Messages to read on {TOPIC} (lag)", ["stream writer"]),
        ("Age of the last applied change", ["redis"]),
        ("Collector delay of orders", ["collector orders"]),
    ]
    rows_svg, lag_svg, age_svg, _ = (c["svg"] for c in charts)
    # The axes' largest values: 2 rows/s (60 per 30 s), 5 messages (2 + 3), a 5 s age.
    assert ">2</text>" in rows_svg and ">300</text>" not in rows_svg
    assert ">5</text>" in lag_svg
    assert ">5</text>" in age_svg and ">0</text>" in age_svg
