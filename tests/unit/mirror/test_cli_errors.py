"""``cdc-mirror mirror run`` refuses a wrong target or a config without tables for it with one
sentence and exit code 2 (usage or configuration error), before touching any service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TABLES = json.dumps([{"db_prefix": "shop", "table_prefix": "orders", "targets": ["redis"]}])


def _cli(*args: str, tables: str = TABLES) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "mirror", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", "CDC_MIRROR_TABLES": tables},
    )


@pytest.mark.parametrize(
    ("args", "tables", "sentence"),
    [
        (
            ["--target", "hive"],
            TABLES,
            "error: the mirror has no target 'hive' (choose redis, warehouse or kudu).",
        ),
        (
            ["--target", "warehouse"],
            TABLES,
            "error: no table mirror targets 'warehouse'; add one under 'tables:' in the config.",
        ),
        (
            ["--target", "redis", "--instance", "other"],
            TABLES,
            "error: no MySQL instance named 'other' in the config (known: local)",
        ),
    ],
)
def test_run_refuses_with_one_sentence(args: list[str], tables: str, sentence: str) -> None:
    result = _cli("run", "--metrics-port", "0", *args, tables=tables)
    assert result.returncode == 2
    assert result.stderr.strip() == sentence
    assert "Traceback" not in result.stderr
