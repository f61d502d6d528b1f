"""The command line as a newcomer meets it: --version, config validate, text in brackets kept,
no wrapping when not on a terminal, exit codes with one meaning each, merge progress."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import date
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from cdc_mirror import cli
from cdc_platform.config import ENV_PREFIX
from merge import app as merge_app
from merge.job import MergeRequest, NotReadyError
from simple_binlog.errors import (
    EXIT_CODES,
    CdcMirrorError,
    ConfigError,
    ContractError,
    ExitCode,
    FatalError,
    ServiceUnavailableError,
    TransactionAbortedError,
    exit_code_for,
)

ROOT = Path(__file__).resolve().parents[3]
SECRET = "s3cr3t-[salt]"


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc_mirror", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)},
    )


def test_version_is_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"cdc-mirror {version('cdc-mirror')}"


def test_config_validate_reports_every_problem_at_once_without_secrets(tmp_path: Path) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(
        "kafka:\n  partitions: many\n  replication_factor: three\n"
        "redis:\n  urll: redis://x\n  url: 6379\n"
        f"governance:\n  hash_salt: {SECRET}\n"
    )
    done = _cli("config", "validate", str(config))
    assert done.returncode == ExitCode.USAGE == 2
    problems = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    fields = ["kafka.partitions", "kafka.replication_factor", "redis.urll", "redis.url"]
    for field in [*fields, "governance"]:
        assert sum(f"'{field}'" in line for line in problems) == 1, done.stderr
    assert len(problems) == 5
    assert all(line.endswith(".") for line in problems)
    assert "5 problems" in done.stderr
    assert SECRET not in done.stdout + done.stderr and "6379" not in done.stderr
    assert "Traceback" not in done.stderr


def test_config_validate_a_good_file_exits_0(tmp_path: Path) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text("kafka:\n  partitions: 3\n")
    done = _cli("config", "validate", str(config))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{config}: valid"


def test_text_in_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    missing = tmp_path / "[orders]" / "[bold]cdc-mirror.yaml"
    done = _cli("--config", str(missing), "stack", "status")
    assert done.returncode == ExitCode.USAGE
    assert done.stderr.strip() == f"error: config file {missing} does not exist."


def test_output_does_not_wrap_when_not_on_a_terminal() -> None:
    line = "word " * 40 + "[orders]"
    script = (
        "from cdc_mirror.cli import console, err_console\n"
        f"console.print({line!r}, markup=False)\n"
        f"err_console.print({line!r}, markup=False)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == line + "\n"
    assert done.stderr == line + "\n"


def test_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for code, meaning in EXIT_CODES.items():
        assert f"{int(code)} {' '.join(meaning.split())}" in text


def test_exit_codes_follow_the_error_taxonomy() -> None:
    assert len(set(EXIT_CODES)) == len(ExitCode) and set(EXIT_CODES) == set(ExitCode)
    assert exit_code_for(ConfigError("bad")) == ExitCode.USAGE
    assert exit_code_for(ServiceUnavailableError("down")) == ExitCode.UNAVAILABLE
    assert exit_code_for(TransactionAbortedError("aborted")) == ExitCode.UNAVAILABLE
    assert exit_code_for(ContractError("malformed")) == ExitCode.CHECK_FAILED
    assert exit_code_for(FatalError("stop")) == ExitCode.FAILED
    assert exit_code_for(CdcMirrorError("stop")) == ExitCode.FAILED
    # merge's day or hour not ready yet is its own code: a scheduler waits, it does not fail.
    assert exit_code_for(NotReadyError("not passed it yet")) == ExitCode.NOT_READY
    assert exit_code_for(KeyboardInterrupt()) == ExitCode.INTERRUPTED
    assert exit_code_for(RuntimeError("bug")) == ExitCode.UNEXPECTED


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (ServiceUnavailableError("Kafka at [::1]:9092 is unreachable."), ExitCode.UNAVAILABLE),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED),
        (FatalError("table [orders] stopped."), ExitCode.FAILED),
    ],
)
def test_each_kind_of_error_ends_the_command_with_its_code(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: BaseException,
    code: ExitCode,
) -> None:
    def fail(_path: object) -> None:
        raise raised

    monkeypatch.setattr(cli, "load_settings", fail)
    assert cli.run(["mirror", "refresh-counts"]) == code
    if str(raised):
        assert capsys.readouterr().err.strip() == f"error: {raised}"


def test_a_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["merge", "--no-such-option"]) == ExitCode.USAGE
    assert "No such option" in capsys.readouterr().err


# -- merge: a line per table as it goes, and an exit code for a failed check -----------------

TABLES = (
    "tables:\n"
    "  - {db_prefix: ordercenter, table_prefix: orderinfo, targets: [hive]}\n"
    "  - {db_prefix: shop, table_prefix: orders, targets: [hive]}\n"
)


class _FakeMerger:
    """Merges instantly; ``seen`` records what the console held when each merge began."""

    def __init__(
        self,
        output: io.StringIO,
        checks: dict[str, bool | None],
        fail: str = "",
        not_ready: str = "",
        merged_hours: tuple[int, ...] = (),
    ):
        self.output, self.checks, self.fail = output, checks, fail
        self.not_ready, self.merged_hours = not_ready, merged_hours
        self.seen: list[str] = []
        self.requests: list[MergeRequest] = []
        self.spark = SimpleNamespace(stop=lambda: None)
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def hour_merged(self, request: MergeRequest) -> bool:
        return request.hour in self.merged_hours

    def merge(self, request: MergeRequest) -> Any:
        self.seen.append(self.output.getvalue())
        self.requests.append(request)
        if request.table == self.fail:
            raise ConfigError(f"schema of [{request.table}] changed.")
        if request.table == self.not_ready:
            raise NotReadyError(f"the stream writer has not marked {request.dt} ready.")
        ok = self.checks.get(request.table)
        return SimpleNamespace(
            dt=request.dt,
            rows=10,
            changes=12,
            files=3,
            seconds=0.5,
            archive=SimpleNamespace(reason="rule off [test]"),
            check=None if ok is None else SimpleNamespace(ok=ok, mismatches=[] if ok else ["dt"]),
            readiness="ready",
            hour=request.hour,
            to_json=lambda: {"rows": 10},
        )


def _settings(tmp_path: Path) -> Any:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(TABLES)
    return cli.load_settings(config)


def test_merge_all_reports_each_table_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = io.StringIO()
    console = Console(file=output, width=200)
    merger = _FakeMerger(output, {})
    monkeypatch.setattr(merge_app, "build_merger", lambda _settings, _config=None: merger)
    outcomes = merge_app.run_merge_command(
        _settings(tmp_path), "2026-11-21", [], True, False, False, None, console, console
    )
    assert [o.table for o in outcomes] == ["ordercenter_orderinfo", "shop_orders"]
    assert "ordercenter_orderinfo 2026-11-21: 10 rows" in merger.seen[1]
    assert "archive rule: rule off [test]" in output.getvalue()
    assert merger.closed  # its metastore clients (merge.snapshot's view refresh) closed


@pytest.mark.parametrize(
    ("checks", "fail", "code"),
    [
        ({"ordercenter_orderinfo": True, "shop_orders": True}, "", ExitCode.OK),
        ({"ordercenter_orderinfo": True, "shop_orders": False}, "", ExitCode.CHECK_FAILED),
        ({"ordercenter_orderinfo": False}, "shop_orders", ExitCode.FAILED),
    ],
)
def test_merge_exit_code_says_whether_a_check_or_a_table_failed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    checks: dict[str, bool | None],
    fail: str,
    code: ExitCode,
) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(TABLES)
    merger = _FakeMerger(io.StringIO(), checks, fail)
    monkeypatch.setattr(merge_app, "build_merger", lambda _settings, _config=None: merger)
    assert cli.run(["--config", str(config), "merge", "--all", "--dt", "2026-11-21"]) == code
    captured = capsys.readouterr()
    if fail:
        assert f"error: {fail}: schema of [{fail}] changed." in captured.err
    assert len(merger.seen) == 2  # a failing table does not stop the others
    assert date(2026, 11, 21).isoformat() in captured.out


def test_merge_writes_every_outcome_for_a_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--result-file: each table's figures and verdict, or its error, as JSON (the scheduler
    reads rows, files and the check from it); the exit code still says what failed."""

    class Merger(_FakeMerger):
        def merge(self, request: MergeRequest) -> Any:
            result = super().merge(request)
            ok = self.checks.get(request.table)
            result.to_json = lambda: {"rows": 10, "files": 3, "checkOk": ok}
            return result

    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(TABLES)
    merger = Merger(io.StringIO(), {"ordercenter_orderinfo": False}, fail="shop_orders")
    monkeypatch.setattr(merge_app, "build_merger", lambda _settings, _config=None: merger)
    result_file = tmp_path / "scheduler" / "result.json"
    arguments = ["merge", "--all", "--dt", "2026-11-21", "--result-file", str(result_file)]
    assert cli.run(["--config", str(config), *arguments]) == ExitCode.FAILED
    assert json.loads(result_file.read_text()) == {
        "outcomes": [
            {
                "table": "ordercenter_orderinfo",
                "error": None,
                "notReady": False,
                "skipped": None,
                "result": {"rows": 10, "files": 3, "checkOk": False},
            },
            {
                "table": "shop_orders",
                "error": "schema of [shop_orders] changed.",
                "notReady": False,
                "skipped": None,
                "result": None,
            },
        ]
    }


@pytest.mark.parametrize(
    ("checks", "fail", "code"),
    [
        ({}, "", ExitCode.NOT_READY),
        ({"shop_orders": False}, "", ExitCode.CHECK_FAILED),
        ({}, "shop_orders", ExitCode.FAILED),
    ],
)
def test_merge_of_a_day_not_ready_yet_exits_not_ready_unless_worse_happened(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    checks: dict[str, bool | None],
    fail: str,
    code: ExitCode,
) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(TABLES)
    merger = _FakeMerger(io.StringIO(), checks, fail, not_ready="ordercenter_orderinfo")
    monkeypatch.setattr(merge_app, "build_merger", lambda _settings, _config=None: merger)
    result_file = tmp_path / "result.json"
    arguments = ["merge", "--all", "--dt", "2026-11-21", "--result-file", str(result_file)]
    assert cli.run(["--config", str(config), *arguments]) == code
    err = capsys.readouterr().err
    assert "not ready: ordercenter_orderinfo: the stream writer has not marked" in err
    assert "error: ordercenter_orderinfo" not in err
    [waiting, _] = json.loads(result_file.read_text())["outcomes"]
    assert (waiting["notReady"], waiting["result"]) == (True, None)


HOURLY = (
    "tables:\n  - {db_prefix: shop, table_prefix: orders, targets: [hive], snapshots: hourly}\n"
)


def test_merge_hour_already_merged_is_skipped_unless_remerge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An hour whose tag exists (merged by hand, or by an earlier run) is reported and not
    merged again, exit 0; --remerge (the scheduler's answer to a Re-run) merges it again."""
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(HOURLY)
    merger = _FakeMerger(io.StringIO(), {}, merged_hours=(13,))
    monkeypatch.setattr(merge_app, "build_merger", lambda _settings, _config=None: merger)
    result_file = tmp_path / "result.json"
    merge = ["--config", str(config), "merge", "--table", "shop_orders", "--hour"]
    again = [*merge, "2026-11-21T13", "--result-file", str(result_file)]
    assert cli.run(again) == ExitCode.OK
    assert merger.requests == []
    assert "shop_orders 2026-11-21T13 already merged" in capsys.readouterr().out
    [skipped] = json.loads(result_file.read_text())["outcomes"]
    assert skipped["skipped"].startswith("2026-11-21T13 already merged")
    assert skipped["error"] is None
    assert cli.run([*again, "--remerge"]) == ExitCode.OK
    assert cli.run([*merge, "2026-11-21T14"]) == ExitCode.OK  # not merged yet: merged
    assert [(r.hour, r.skip_merged) for r in merger.requests] == [(13, False), (14, True)]
    assert cli.run([*merge[:-1], "--dt", "2026-11-21", "--remerge"]) == ExitCode.USAGE
    assert "--remerge merges an hour again" in capsys.readouterr().err
