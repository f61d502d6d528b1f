"""A hostile tester's config errors: an invalid setting that holds a secret (hash salt,
collector token, the admin's secret key, a TLS key, passwords) never shows its value — not
in the ConfigError sentence, not in pydantic's own error text, not in logs or the CLI."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc_platform.config import ENV_PREFIX, MySQLInstance, Settings, load_settings
from simple_binlog.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SECRET = "740528163952"  # YAML reads it as a number, so the string setting is invalid

# (config text holding SECRET where a secret belongs, the field the sentence names)
SECRET_FIELDS = [
    (f"governance:\n  hash_salt: {SECRET}\n", "governance.hash_salt"),
    (
        f"governance:\n  enabled: true\n  source: webui\n  webui:\n    token: {SECRET}\n",
        "governance.webui.token",
    ),
    (f"webui:\n  secret_key: {SECRET}\n", "webui.secret_key"),
    (f"webui:\n  initial_admin_password: {SECRET}\n", "webui.initial_admin_password"),
    (f"webui:\n  database_url: {SECRET}\n", "webui.database_url"),
    (f"postgres:\n  password: {SECRET}\n", "postgres.password"),
    (
        f"kafka:\n  client_properties:\n    ssl.key.pem: {SECRET}\n",
        "kafka.client_properties.ssl.key.pem",
    ),
    (
        f"instances:\n  - name: prod\n    host: db.example.com\n    password: {SECRET}\n",
        "instances[0].password",
    ),
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("text", "field"), SECRET_FIELDS)
def test_an_invalid_secret_setting_is_named_but_its_value_never_shown(
    tmp_path, caplog, text, field
):
    path = tmp_path / "cdc-mirror.yaml"
    path.write_text(text, encoding="utf-8")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert f"config field '{field}' is invalid" in message
    assert SECRET not in message
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "section",
    [
        {"governance": {"hash_salt": int(SECRET)}},
        {"governance": {"hash_salt": f"short{SECRET}"[:12]}},  # too short: a model check
        {"webui": {"secret_key": [SECRET]}},
        {"kafka": {"client_properties": {"sasl.jaas.config": int(SECRET)}}},
    ],
)
def test_pydantic_error_text_of_the_settings_hides_inputs(section):
    """Code that validates settings itself and logs str(error) leaks nothing either."""
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate(section)
    assert SECRET not in str(caught.value)
    assert SECRET[:7] not in repr(caught.value)


def test_an_instance_validated_alone_hides_its_password():
    """The collector builds an instance from the web admin's reply (remote config)."""
    with pytest.raises(ValidationError) as caught:
        MySQLInstance.model_validate({"name": "prod", "host": "db", "password": int(SECRET)})
    assert SECRET not in str(caught.value)


def test_the_cli_reports_the_field_without_the_secret(tmp_path):
    path = tmp_path / "cdc-mirror.yaml"
    path.write_text(f"governance:\n  hash_salt: {SECRET}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "--config", str(path), "stack", "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)},
    )
    assert done.returncode == 2
    assert "governance.hash_salt" in done.stderr
    assert SECRET not in done.stdout + done.stderr
