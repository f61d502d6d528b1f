"""The Kudu adapter's pure parts: where the jars are, what a missing jar says, and a Java
exception's reason on one line. (The client itself: tests/integration/mirror/test_kudu.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cdc_platform.config import Settings
from cdc_platform.kudu import client_jars, java_reason


def test_the_jars_are_the_configured_folder_else_the_stacks(tmp_path: Path) -> None:
    settings = Settings.model_validate({"stack": {"home": str(tmp_path)}})
    assert client_jars(settings) == (tmp_path / "jars" / "kudu").resolve()
    chosen = Settings.model_validate({"kudu": {"client_jars": str(tmp_path / "mine")}})
    assert client_jars(chosen) == (tmp_path / "mine").resolve()


# Run in a fresh interpreter: a JVM starts once per process, and one an earlier test of the
# session started (the mirror's, Spark's) would make start_jvm look at no jar.
MISSING_JARS = """
import sys
from pathlib import Path

import jpype

from cdc_platform.kudu import start_jvm
from simple_binlog.errors import ConfigError

jars = Path(sys.argv[1])
(jars / "kudu-client-1.17.1.jar").touch()
for present in (True, False):
    if not present:
        (jars / "kudu-client-1.17.1.jar").unlink()
    try:
        start_jvm(jars, "64m", needs=("cdc-mirror-kudu*.jar",))
    except ConfigError as exc:
        print(exc)
print("started" if jpype.isJVMStarted() else "no JVM")
"""


def test_a_missing_jar_is_named_before_the_jvm_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", MISSING_JARS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    missing_ours, missing_both, state = done.stdout.splitlines()
    assert missing_ours.startswith(f"no cdc-mirror-kudu*.jar in {tmp_path}; ")
    assert missing_both.startswith("no kudu-client-*.jar and no cdc-mirror-kudu*.jar in ")
    assert state == "no JVM"


def test_a_java_reason_is_one_line() -> None:
    class JavaError(Exception):
        def getMessage(self) -> str:
            return "Timed out:\n  after 30000 ms"

    assert java_reason(JavaError("ignored")) == "Timed out: after 30000 ms"
    assert java_reason(ValueError("plain  text")) == "plain text"
