"""Pure logic of the web admin: password hashing, cookie signing, encryption, the key file,
the live-schema rules, metric parsing, the SVG charts and the simulated replay clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from cdc_platform.config import (
    ArchiveDeleteRule,
    Settings,
    StackSettings,
    TableMirror,
    WebUISettings,
)
from simple_binlog.errors import ConfigError
from tests.unit.webui.harness import ORDERS_SCHEMA
from webui.monitoring import Series, parse_samples, render_svg
from webui.replay import ReplayRequest, SimulatedReplayService, percent_done
from webui.schema_source import LiveTableSchema, mirror_problems
from webui.security import Keys, hash_password, load_keys, verify_password


def test_password_hashes_are_salted_and_verify():
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first != second and first.startswith("scrypt$16384$8$1$")
    assert verify_password("correct horse", first)
    assert not verify_password("correct horse!", first)
    assert not verify_password("x", "not-a-hash")
    assert not verify_password("x", "bcrypt$1$2$3$4$5")


def test_signed_values_reject_tampering_and_other_keys():
    keys = Keys.from_master(b"m" * 40)
    signed = keys.sign("session-id")
    assert keys.unsign(signed) == "session-id"
    assert keys.unsign(signed.replace("session", "sessiom")) is None
    assert keys.unsign("no-signature") is None
    assert Keys.from_master(b"n" * 40).unsign(signed) is None


def test_encryption_round_trips_and_a_changed_key_says_what_to_do():
    keys = Keys.from_master(b"k" * 40)
    token = keys.encrypt("s3cret")
    assert "s3cret" not in token and keys.decrypt(token) == "s3cret"
    with pytest.raises(ConfigError, match="enter the password again"):
        Keys.from_master(b"j" * 40).decrypt(token)


def test_key_file_is_created_0600_and_refused_when_readable_by_others(tmp_path: Path):
    settings = Settings(stack=StackSettings(home=tmp_path))
    first = load_keys(settings)
    key_file = tmp_path / "webui.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert load_keys(settings).decrypt(first.encrypt("x")) == "x", "the same key next start"
    os.chmod(key_file, 0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        load_keys(settings)


def test_configured_secret_key_must_be_long_and_is_never_echoed(tmp_path: Path):
    short = Settings(
        stack=StackSettings(home=tmp_path), webui=WebUISettings(secret_key=SecretStr("tooshort"))
    )
    with pytest.raises(ConfigError) as error:
        load_keys(short)
    assert "tooshort" not in str(error.value) and "at least 32" in str(error.value)
    assert not (tmp_path / "webui.key").exists(), "a configured key needs no key file"


def _mirror(**fields: object) -> TableMirror:
    return TableMirror.model_validate(
        {"db_prefix": "ordercenter", "table_prefix": "orderinfo", **fields}
    )


def test_mirror_rules_against_the_live_schema():
    assert mirror_problems(_mirror(check_column="created_at"), ORDERS_SCHEMA) == []
    problems = mirror_problems(
        _mirror(key=["a", "b"], archive_delete=ArchiveDeleteRule(time_column="gone")),
        ORDERS_SCHEMA,
    )
    assert problems[0].startswith("key columns a, b do not exist in ordercenter_00.orderinfo_00")
    assert problems[1].startswith("archive-delete time column gone does not exist")
    assert "no table of instance 'local' matches" in mirror_problems(_mirror(), None)[0]
    keyless = LiveTableSchema("x_y", ("x_0.y_0",), {"a": "int"}, ())
    assert mirror_problems(_mirror(), keyless) == [
        "x_0.y_0 has no primary key; name the key columns explicitly."
    ]
    assert mirror_problems(_mirror(key=["a"]), keyless) == []


EXPOSITION = """\
# HELP cdc_collector_delay_seconds Now minus the event time.
# TYPE cdc_collector_delay_seconds gauge
cdc_collector_delay_seconds{instance="local"} 1.5
# HELP cdc_collector_rows Row changes published, per table.
# TYPE cdc_collector_rows counter
cdc_collector_rows_total{instance="local",schema="s",table="t"} 42.0
cdc_collector_rows_created{instance="local",schema="s",table="t"} 1.7e9
# HELP cdc_mirror_freshness_seconds Commit in MySQL to visible in the target.
# TYPE cdc_mirror_freshness_seconds histogram
cdc_mirror_freshness_seconds_bucket{le="0.1"} 3.0
cdc_mirror_freshness_seconds_bucket{le="+Inf"} 4.0
cdc_mirror_freshness_seconds_count 4.0
cdc_mirror_freshness_seconds_sum 0.9
# HELP python_gc_objects_collected_total Objects collected.
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 7.0
"""


def test_parse_keeps_only_our_metrics_with_sorted_labels_and_no_buckets():
    rows = parse_samples(EXPOSITION, "collector", 100.0)
    assert [(r.name, r.labels, r.value) for r in rows] == [
        ("cdc_collector_delay_seconds", "instance=local", 1.5),
        ("cdc_collector_rows_total", "instance=local,schema=s,table=t", 42.0),
        ("cdc_mirror_freshness_seconds_count", "", 4.0),
        ("cdc_mirror_freshness_seconds_sum", "", 0.9),
    ]
    assert {r.target for r in rows} == {"collector"} and {r.at for r in rows} == {100.0}


def test_svg_chart_scales_points_and_escapes_labels():
    svg = render_svg([Series("a<b>", [(0.0, 0.0), (10.0, 5.0)])], width=200, height=100)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<title>a&lt;b&gt;</title>" in svg
    # x from 60 (left margin) to 190, y from 70 (bottom) to 10 (top).
    assert 'points="60.0,70.0 190.0,10.0"' in svg
    assert "no samples yet" in render_svg([])


def test_simulated_replay_advances_with_its_clock_and_cancels():
    now = [1000.0]
    service = SimulatedReplayService(duration_s=10, rows_total=1000, clock=lambda: now[0])
    request = ReplayRequest(instance="local", db_prefix="d", table_prefix="t", condition="  ")
    assert request.condition is None
    first, second = service.start(request), service.start(request)
    now[0] += 4
    assert service.status(first).rows_done == 400
    assert service.cancel(first).state == "cancelled"
    now[0] += 20
    assert service.status(first).state == "cancelled" and service.status(first).rows_done == 400
    done = service.status(second)
    assert done.state == "succeeded" and done.rows_done == 1000 and done.percent == 100.0
    assert service.cancel(second).state == "succeeded", "a finished run stays finished"
    assert {s.run_id for s in service.runs()} == {first, second}


def test_login_throttle_refuses_a_name_after_repeated_failures_until_the_window_passes():
    from webui.auth import LoginThrottle

    now = [0.0]
    throttle = LoginThrottle(max_failures=3, window_s=60, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1", "alice") == 0
        throttle.failed("10.0.0.1", "alice")
        now[0] += 1
    assert throttle.retry_after("10.0.0.1", "alice") == 57.0
    assert throttle.retry_after("10.0.0.1", "bob") == 0, "other names are not affected"
    assert throttle.retry_after("10.0.0.2", "alice") == 0, "nor addresses that did not fail"
    now[0] += 57
    assert throttle.retry_after("10.0.0.1", "alice") == 0
    throttle.failed("10.0.0.1", "alice")
    throttle.succeeded("10.0.0.1", "alice")
    assert throttle.retry_after("10.0.0.1", "alice") == 0


def test_bad_or_unreachable_admin_database_is_one_sentence_without_the_password():
    from simple_binlog.errors import ServiceUnavailableError
    from webui.db import make_engine, migrate

    with pytest.raises(ConfigError, match=r"^config field 'webui.database_url' is invalid"):
        make_engine("nodialect://user:Pw-secret-1@host/db")
    engine = make_engine("postgresql+psycopg://user:Pw-secret-1@127.0.0.1:1/admin")
    with pytest.raises(ServiceUnavailableError) as error:
        migrate(engine)
    message = str(error.value)
    assert message.startswith("the web admin's database (postgresql+psycopg://user:***@127.0.0.1:1")
    assert "Pw-secret-1" not in message and "\n" not in message


def test_a_replays_percent_is_rows_done_of_the_total_and_100_once_it_succeeded() -> None:
    assert percent_done("running", 250, 1000) == 25.0
    assert percent_done("running", 5, None) is None  # the total is not known yet
    assert percent_done("running", 5, 0) is None
    assert percent_done("running", 1200, 1000) == 100.0  # rows added while it ran
    assert percent_done("succeeded", 0, None) == 100.0
