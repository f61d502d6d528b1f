"""A bad config stops every command at start with one sentence naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc_mirror", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.mark.parametrize(
    ("yaml_text", "field", "words"),
    [
        ("kafka:\n  partitions: many\n", "kafka.partitions", "valid integer"),
        ("instances:\n  - port: 3306\n", "instances[0].name", "required but missing"),
        (
            "instances:\n  - {name: a, host: h, password: x, port: 0}\n",
            "instances[0].port",
            "greater than",
        ),
        ("redis:\n  urll: redis://x\n", "redis.urll", "not a known setting"),
    ],
)
def test_bad_config_file_fails_with_one_sentence(
    tmp_path: Path, yaml_text: str, field: str, words: str
) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text(yaml_text)
    result = _cli("--config", str(config), "stack", "status")
    assert result.returncode == 2
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert f"'{field}'" in message and words in message
    assert "Traceback" not in result.stderr


def test_bad_environment_override_names_the_field() -> None:
    result = _cli("stack", "status", env={"CDC_MIRROR_KAFKA__REPLICATION_FACTOR": "three"})
    assert result.returncode == 2
    assert "'kafka.replication_factor'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_secret_never_appears_in_the_error(tmp_path: Path) -> None:
    config = tmp_path / "cdc-mirror.yaml"
    config.write_text("instances:\n  - {name: prod, host: db.example, password: cdc-local}\n")
    result = _cli("--config", str(config), "stack", "status")
    assert result.returncode == 2
    assert "default password" in result.stderr
    assert "cdc-local" not in result.stderr


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    result = _cli("--config", str(tmp_path / "nope.yaml"), "stack", "status")
    assert result.returncode == 2
    assert "nope.yaml does not exist" in result.stderr
