"""docker/merge-daily.sh, the compose stack's daily merge loop, with a stand-in ``cdc-mirror`` on
PATH that records its arguments and exits with a status the test chooses (the loop's ``--once``
form: one day, its retries, then exit)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "docker" / "merge-daily.sh"


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    """A ``cdc-mirror`` that appends its arguments to calls.txt and exits with the next status
    listed in statuses.txt (0 when none is left)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "cdc-mirror"
    cli.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/calls.txt\n'
        f"status=$(head -n 1 {tmp_path}/statuses.txt 2>/dev/null || true)\n"
        f"sed -i 1d {tmp_path}/statuses.txt 2>/dev/null || true\n"
        'exit "${status:-0}"\n'
    )
    cli.chmod(0o755)
    return tmp_path


def run(fake: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PATH": f"{fake / 'bin'}:{os.environ['PATH']}", **env}
    return subprocess.run(
        ["sh", str(SCRIPT), *args], capture_output=True, text=True, env=environment, timeout=30,
        check=False,
    )  # fmt: skip


def calls(fake: Path) -> list[str]:
    path = fake / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_once_merges_every_hive_table_of_the_day_waiting_for_readiness(fake_cli: Path) -> None:
    done = run(fake_cli, "--once", "2026-11-21", MERGE_WAIT_READY_S="900")
    assert done.returncode == 0, done.stderr
    assert calls(fake_cli) == ["merge --all --dt 2026-11-21 --wait-ready-s 900"]
    assert "merge-daily: merged 2026-11-21" in done.stdout


def test_once_defaults_to_yesterday_in_utc(fake_cli: Path) -> None:
    yesterday = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).date().isoformat()
    assert run(fake_cli, "--once").returncode == 0
    assert calls(fake_cli) == [f"merge --all --dt {yesterday} --wait-ready-s 3600"]


def test_a_failed_merge_is_retried_then_left_for_the_operator(fake_cli: Path) -> None:
    (fake_cli / "statuses.txt").write_text("4\n4\n4\n")
    done = run(fake_cli, "--once", "2026-11-21", MERGE_RETRIES="3", MERGE_RETRY_S="0")
    assert done.returncode == 4
    assert len(calls(fake_cli)) == 3
    assert "attempt 2 of 3" in done.stdout
    assert "failed (exit 4) 3 times; left for the operator: cdc-mirror merge --all --dt 2026-11-21" in done.stdout


def test_a_retry_that_succeeds_ends_the_day(fake_cli: Path) -> None:
    (fake_cli / "statuses.txt").write_text("4\n0\n")
    done = run(fake_cli, "--once", "2026-11-21", MERGE_RETRIES="3", MERGE_RETRY_S="0")
    assert done.returncode == 0
    assert len(calls(fake_cli)) == 2


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MERGE_AT": "2:00"}, "MERGE_AT must be HH:MM in UTC (e.g. 02:00), not '2:00'"),
        ({"MERGE_AT": "24:00"}, "not '24:00'"),
        ({"MERGE_RETRIES": "three"}, "must be whole numbers, not 'three'"),
    ],
)
def test_bad_settings_stop_it_with_one_sentence_before_any_merge(
    fake_cli: Path, env: dict[str, str], message: str
) -> None:
    done = run(fake_cli, "--once", "2026-11-21", **env)
    assert done.returncode == 2
    assert message in done.stdout
    assert calls(fake_cli) == []
