"""A collector configured to take its policies from the web admin, started while the admin
cannot be reached and with no cached policy set: it stops with one sentence and publishes
nothing (it never runs without the policies it was configured with)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cdc_platform.config import Settings
from tests.integration.mirror.harness import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_unreachable_admin_without_a_cache_stops_the_collector(
    local_stack: Settings, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": f"gverr{os.getpid()}.",
        "CDC_MIRROR_GOVERNANCE__ENABLED": "true",
        "CDC_MIRROR_GOVERNANCE__SOURCE": "webui",
        "CDC_MIRROR_GOVERNANCE__WEBUI__URL": f"http://127.0.0.1:{free_port()}",
        "CDC_MIRROR_GOVERNANCE__WEBUI__TOKEN": "cdc_collector_secret_token",
        "CDC_MIRROR_GOVERNANCE__WEBUI__CACHE_DIR": str(tmp_path),
    }
    env.pop("CDC_MIRROR_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "collector", "run", "--no-ha", "--metrics-port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3  # the web admin is unavailable
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "cannot be reached" in errors[0]
    assert "nothing is published until the web admin answers" in errors[0]
    assert "Traceback" not in done.stderr
    assert "cdc_collector_secret_token" not in done.stderr + done.stdout
