"""``cdc-mirror merge`` refuses a bad command line with one sentence, before Spark starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["--dt", "2026-11-21"], "name the tables to merge with --table, or use --all"),
        (["--dt", "21.11.2026", "--all"], "--dt must be a day like 2026-11-21"),
        (["--dt", "2026-11-21", "--table", "nope"], "no table mirror named 'nope'"),
        (["--dt", "2026-11-21", "--all"], "no configured table is mirrored to Hive"),
    ],
)
def test_bad_merge_command_is_one_sentence(args: list[str], sentence: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "merge", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("CDC_MIRROR_")},
            "COLUMNS": "200",
        },
    )
    assert result.returncode == 2, result.stderr
    assert sentence in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
