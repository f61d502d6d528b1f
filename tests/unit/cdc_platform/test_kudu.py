"""The Kudu adapter's pure parts: where the jars are, what a missing jar says, and a Java
exception's reason on one line. (The client itself: tests/integration/mirror/test_kudu.py.)"""

from __future__ import annotations

from pathlib import Path

import jpype
import pytest

from cdc_platform.config import Settings
from cdc_platform.kudu import client_jars, java_reason, start_jvm
from simple_binlog.errors import ConfigError


def test_the_jars_are_the_configured_folder_else_the_stacks(tmp_path: Path) -> None:
    settings = Settings.model_validate({"stack": {"home": str(tmp_path)}})
    assert client_jars(settings) == (tmp_path / "jars" / "kudu").resolve()
    chosen = Settings.model_validate({"kudu": {"client_jars": str(tmp_path / "mine")}})
    assert client_jars(chosen) == (tmp_path / "mine").resolve()


def test_a_missing_jar_is_named_before_the_jvm_starts(tmp_path: Path) -> None:
    if jpype.isJVMStarted():  # asked when the test runs: an earlier test may have started it
        pytest.skip("a JVM already runs in this process, so start_jvm looks at no jar")
    (tmp_path / "kudu-client-1.17.1.jar").touch()
    with pytest.raises(ConfigError, match=r"^no cdc-mirror-kudu\*\.jar in "):
        start_jvm(tmp_path, "64m", needs=("cdc-mirror-kudu*.jar",))
    (tmp_path / "kudu-client-1.17.1.jar").unlink()
    with pytest.raises(ConfigError, match=r"^no kudu-client-\*\.jar and no cdc-mirror"):
        start_jvm(tmp_path, "64m", needs=("cdc-mirror-kudu*.jar",))
    assert not jpype.isJVMStarted()


def test_a_java_reason_is_one_line() -> None:
    class JavaError(Exception):
        def getMessage(self) -> str:
            return "Timed out:\n  after 30000 ms"

    assert java_reason(JavaError("ignored")) == "Timed out: after 30000 ms"
    assert java_reason(ValueError("plain  text")) == "plain text"
