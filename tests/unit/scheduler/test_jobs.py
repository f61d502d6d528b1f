"""CommandJobs: the command lines it starts, and what it makes of a child's end — exit 0
done, 4 a check mismatch, anything else failed with the child's last error sentence — with a
stand-in interpreter (a script) instead of ``python -m cdc_mirror``; a stop ends the child."""

from __future__ import annotations

import json
import stat
import threading
from datetime import date
from pathlib import Path

from cdc_platform.config import SchedulerSettings, Settings, StackSettings, TableMirror
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.control import RunRecord
from scheduler.jobs import CommandJobs
from scheduler.plan import Due

DAY = date(2026, 11, 25)
# Plays `python -m cdc_mirror merge|validate … --result-file F`: writes F, prints, exits with
# $CODE.
STAND_IN = """#!/bin/sh
prev=""; for arg; do [ "$prev" = "--result-file" ] && out="$arg"; prev="$arg"; done
case "$*" in *merge*)
  printf '{"outcomes": [{"table": "db_orders", "error": null, "result": {"rows": 12, "files": 2, "checkOk": %s}}]}' "$CHECK" > "$out";;
*validate*)
  printf '%s' "$VALIDATION" > "$out";;
esac
echo "merging …"
[ -n "$SLEEP" ] && sleep "$SLEEP"
[ "$CODE" = 5 ] && echo "error: db_orders: the stream writer has not marked $DAY ready." >&2
[ "$CODE" = 6 ] && echo "not ready: db_orders: the stream writer has not passed hour 07." >&2
exit "$CODE"
"""


def jobs(
    tmp_path: Path, mirrored: dict[str, object] | None = None, **scheduler: object
) -> CommandJobs:
    script = tmp_path / "python"
    script.write_text(STAND_IN)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    mirror = TableMirror.model_validate(
        {"instance": "local", "db_prefix": "db", "table_prefix": "orders",
         "targets": ["hive", "redis"], **(mirrored or {})}
    )  # fmt: skip
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        scheduler=SchedulerSettings.model_validate(scheduler),
    )
    config = ConfigSnapshot(version=1, tables=(mirror,))
    return CommandJobs(
        settings, lambda: config, tmp_path / "cdc.yaml", python=str(script), poll_s=0.05
    )


def test_the_command_lines(tmp_path: Path) -> None:
    runner = jobs(tmp_path, maintenance_command=["maintain", "--table", "{table}", "{dt}"])
    result = tmp_path / "r.json"
    merge = runner.command(Due("merge", "db_orders", DAY), result)
    assert merge is not None and merge[1:] == [
        "-m", "cdc_mirror", "--config", str(tmp_path / "cdc.yaml"),
        "merge", "--table", "db_orders", "--dt", "2026-11-25", "--result-file", str(result),
    ]  # fmt: skip
    validate = runner.command(Due("validation", "db_orders", DAY), result)
    assert validate is not None and validate[-5:] == [
        "db_orders", "--target=redis", "--result-file", str(result), "--no-record"
    ]  # fmt: skip
    assert runner.command(Due("maintenance", "db_orders", DAY), result) == [
        "maintain", "--table", "db_orders", "2026-11-25"
    ]  # fmt: skip
    assert jobs(tmp_path).command(Due("maintenance", "db_orders", DAY), result) is None


def test_the_validation_policy_in_the_command_line(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    due = Due("validation", "db_orders", DAY)
    every = {"targets": ["hive", "redis", "warehouse", "kudu"]}
    default = jobs(tmp_path, every).command(due, result)
    assert default is not None and default[6:9] == [
        "db_orders", "--target=warehouse", "--target=redis"
    ]  # fmt: skip
    chosen = {**every, "validation_targets": ["lake", "kudu"], "validation": "repair",
              "validation_repair_max_keys": 50}  # fmt: skip
    repair = jobs(tmp_path, chosen).command(due, result)
    assert repair is not None and repair[6:] == [
        "db_orders", "--target=kudu", "--target=lake", "--repair", "--repair-max-keys=50",
        "--result-file", str(result), "--no-record",
    ]  # fmt: skip
    assert jobs(tmp_path, {**every, "validation": "off"}).command(due, result) is None


def test_exit_codes_and_results(tmp_path: Path, monkeypatch) -> None:
    runner = jobs(tmp_path)
    due = Due("merge", "db_orders", DAY)
    monkeypatch.setenv("DAY", str(DAY))
    monkeypatch.setenv("CODE", "0")
    monkeypatch.setenv("CHECK", "true")
    ok = runner.run(due, threading.Event())
    assert (ok.state, ok.rows, ok.files, ok.check_ok) == ("succeeded", 12, 2, True)
    monkeypatch.setenv("CODE", "4")
    monkeypatch.setenv("CHECK", "false")
    red = runner.run(due, threading.Event())
    assert (red.state, red.check_ok, red.rows) == ("mismatch", False, 12)
    assert red.error == "the check against MySQL found a difference."
    monkeypatch.setenv("CODE", "5")
    failed = runner.run(due, threading.Event())
    assert failed.state == "failed"
    assert failed.error == "db_orders: the stream writer has not marked 2026-11-25 ready."
    log = runner.log_dir / "merge-db_orders-2026-11-25.log"
    assert "merging" in log.read_text()
    assert json.loads((runner.log_dir / "merge-db_orders-2026-11-25.result.json").read_text())


def test_a_stop_ends_the_child(tmp_path: Path, monkeypatch) -> None:
    runner = jobs(tmp_path)
    monkeypatch.setenv("CODE", "0")
    monkeypatch.setenv("SLEEP", "60")
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    result = runner.run(Due("merge", "db_orders", DAY), stop)
    timer.cancel()
    assert result.state == "failed"
    assert result.error == "stopped before it ended (the scheduler stopped)."


# ``cdc-mirror validate --result-file``'s JSON (``TableValidation.to_json``): Redis differs in
# three keys after a repair that left one, the warehouse could not be reached.
VALIDATION = {
    "table": "db_orders",
    "equal": False,
    "converged": False,
    "unreachable": {"warehouse": "PostgreSQL at pg:5432 cannot be reached."},
    "targets": [
        {
            "target": "redis",
            "equal": False,
            "rows": 1000,
            "chunks": 3,
            "differences": {"missing": ["7"], "different": ["8", "9"]},
            "unsettled": [],
            "inFlight": 1,
            "sourceQueries": 9,
            "sourceRowsRead": 2000,
            "pausedS": 0.0,
            "resumed": False,
            "seconds": 1.5,
        }
    ],
    "repair": {"keys": 3, "published": 3, "stillDiffering": {"redis": ["9"]}},
}


def test_a_validation_records_each_targets_outcome(tmp_path: Path, monkeypatch) -> None:
    runner = jobs(tmp_path)
    monkeypatch.setenv("VALIDATION", json.dumps(VALIDATION))
    monkeypatch.setenv("CODE", "4")
    result = runner.run(Due("validation", "db_orders", DAY), threading.Event())
    assert (result.state, result.rows, result.check_ok) == ("mismatch", 1000, False)
    assert result.validation is not None
    redis, warehouse = result.validation
    assert (redis.target, redis.verdict, redis.rows, redis.chunks) == ("redis", "differs", 1000, 3)
    assert (redis.missing, redis.extra, redis.different, redis.mismatched) == (1, 0, 2, 3)
    assert redis.sample_keys == ["7", "8", "9"]
    assert (redis.repaired, redis.still_differing, redis.seconds) == (3, 1, 1.5)
    assert (warehouse.target, warehouse.verdict) == ("warehouse", "unreachable")
    assert warehouse.error == "PostgreSQL at pg:5432 cannot be reached."
    # Unreadable results: the run keeps its verdict from the exit code, without figures.
    monkeypatch.setenv("VALIDATION", "not json")
    monkeypatch.setenv("CODE", "0")
    plain = runner.run(Due("validation", "db_orders", DAY), threading.Event())
    assert (plain.state, plain.validation) == ("succeeded", None)


def test_a_repair_over_the_cap_says_why_it_did_not_run(tmp_path: Path, monkeypatch) -> None:
    runner = jobs(tmp_path, {"validation": "repair", "validation_repair_max_keys": 2})
    skipped = "not repaired: 3 keys differ, more than the 2 a repair may re-publish …"
    document = {
        **VALIDATION,
        "unreachable": {},
        "repair": None,
        "repairSkipped": skipped,
    }
    monkeypatch.setenv("VALIDATION", json.dumps(document))
    monkeypatch.setenv("CODE", "4")
    result = runner.run(Due("validation", "db_orders", DAY), threading.Event())
    assert result.state == "mismatch"
    assert result.error == f"the validation found a difference; {skipped}"
    assert result.validation is not None
    [redis] = result.validation
    assert (redis.repaired, redis.still_differing, redis.repair_skipped) == (None, None, skipped)


def test_an_hours_merge_runs_merge_hour_and_logs_apart_from_its_day(
    tmp_path: Path, monkeypatch
) -> None:
    runner = jobs(tmp_path)
    result = tmp_path / "r.json"
    hour = Due("merge", "db_orders", DAY, hour=7)
    command = runner.command(hour, result)
    assert command is not None and command[5:] == [
        "merge", "--table", "db_orders", "--hour", "2026-11-25T07", "--result-file", str(result),
    ]  # fmt: skip
    monkeypatch.setenv("CODE", "4")
    monkeypatch.setenv("CHECK", "false")
    outcome = runner.run(hour, threading.Event())
    assert (outcome.state, outcome.rows, outcome.check_ok) == ("mismatch", 12, False)
    assert (runner.log_dir / "merge-db_orders-2026-11-25T07.log").is_file()
    assert not (runner.log_dir / "merge-db_orders-2026-11-25.log").exists()


def test_a_merge_not_ready_yet_waits_and_a_rerun_or_retry_of_an_hour_merges_it_again(
    tmp_path: Path, monkeypatch
) -> None:
    runner = jobs(tmp_path)
    hour = Due("merge", "db_orders", DAY, hour=7)
    monkeypatch.setenv("CODE", "6")  # ExitCode.NOT_READY
    monkeypatch.setenv("CHECK", "null")
    outcome = runner.run(hour, threading.Event())
    assert (outcome.state, outcome.error) == (
        "waiting",
        "db_orders: the stream writer has not passed hour 07.",
    )
    result = tmp_path / "r.json"
    # The first attempt skips an hour whose tag exists (merged by hand); a re-run an operator
    # requested, or a retry after a failed attempt, merges it again.
    assert "--remerge" not in (runner.command(hour, result) or [])
    rerun = Due(
        "merge", "db_orders", DAY, 2, RunRecord(dt=DAY, table="db_orders", state="requested"), 7
    )
    assert "--remerge" in (runner.command(rerun, result) or [])
    assert "--remerge" in (runner.command(Due("merge", "db_orders", DAY, 2, hour=7), result) or [])
    assert "--remerge" not in (runner.command(Due("merge", "db_orders", DAY, 2), result) or [])
