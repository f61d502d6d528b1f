"""A lake location that cannot be used stops ``cdc-mirror merge`` and ``cdc-mirror maintain``
before they read anything: with an S3 endpoint where nothing answers, each command exits with
code 3 (unavailable, run again later) and one sentence naming the location and the cause,
after a few seconds of the check's own timeouts, not a storage client's minutes of retries.
(A table written by an incompatible version: ``test_merge.py``.)"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from cdc_platform.config import Settings
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from simple_binlog.errors import ExitCode
from tests.support.closed_port import NOTHING_ANSWERS, closed_port

ROOT = Path(__file__).resolve().parents[3]
SPARK_TIMEOUT_S = 300.0


@pytest.mark.parametrize("command", [["merge", "--all", "--dt", "2024-03-01"], ["maintain"]])
def test_an_unreachable_s3_endpoint_stops_the_command_before_it_reads(
    local_stack: Settings, tmp_path: Path, command: list[str]
) -> None:
    tag = uuid.uuid4().hex[:8]
    location = f"s3://{LOCAL_S3_BUCKET}/cdc-tests/bad_{tag}"
    config = tmp_path / "config.yaml"
    document = {
        "lake": {"location": location},
        "stack": {"home": str(local_stack.stack.home.resolve())},
        "stream_writer": {"database": f"bad_raw_{tag}"},
        "merge": {"database": f"bad_snap_{tag}", "check": False, "metrics_port": 0},
        "tables": [
            {"db_prefix": f"bad{tag}", "table_prefix": "orders", "key": ["id"], "targets": ["hive"]}
        ],
    }
    config.write_text(yaml.safe_dump(document))
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "cdc-mirror"), "--config", str(config), *command],
        cwd=ROOT,
        env={
            **os.environ,
            "CDC_MIRROR_LAKE__S3__ENDPOINT": f"http://127.0.0.1:{closed_port()}",
            "PYSPARK_PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=SPARK_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == ExitCode.UNAVAILABLE, output[-3000:]
    assert f"error: the lake at {location} cannot be used: {NOTHING_ANSWERS}" in output
