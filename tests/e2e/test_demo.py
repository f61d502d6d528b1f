"""The README's main command, short: ``cdc-mirror demo`` must end with every store agreeing.

It runs the real demo in a process of its own (every component as a process, the failover,
the merges and the row-for-row check), with a smaller workload than a user gets. The demo
clears and recreates everything named ``demo`` on the stack, so do not run this while a demo
of your own is running on the same stack.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from cdc_platform.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_the_pipeline_and_every_store_agrees_with_mysql(
    local_stack: Settings, tmp_path: Path
) -> None:
    log = tmp_path / "demo.log"
    with log.open("wb") as output:
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "cdc_mirror",
                "demo",
                "--rows",
                "50",
                "--seconds",
                "20",
                "--rate",
                "20",
                "--no-keep-running",
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=1500,
            check=False,
        )
    text = log.read_text(errors="replace")
    assert finished.returncode == 0, f"the demo failed; its output is in {log}:\n{text[-3000:]}"
    # The summary: one line per store, MySQL the reference and every mirror equal.
    verdicts = dict(re.findall(r"│ (mysql|hive|warehouse|redis)\s+│.*│ (\w+)\s+│", text))
    assert verdicts == {
        "mysql": "reference",
        "hive": "equal",
        "warehouse": "equal",
        "redis": "equal",
    }, text[-3000:]
    assert "exactly once" in text
    assert re.search(r"collector-[ab] active after [\d.]+ s", text), "no failover happened"
    assert "the warehouse and Redis agree." in text
