"""PySpark is the optional ``spark`` extra: the CLI, collector, replay, mirrors and web admin
import and work without it, and the lake's commands say how to install it (issue 24, item 6).

The check runs in a child interpreter whose import system refuses ``pyspark`` and ``py4j`` (a
meta-path finder placed first), so it holds on this machine, where PySpark is installed for the
lake's tests, exactly as on one installed without the extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from cdc_platform.spark import SPARK_MISSING

ROOT = Path(__file__).resolve().parents[3]

# The modules a collector-, replay-, mirror- or admin-only install starts from.
ENTRY_MODULES = (
    "cdc_mirror.cli",
    "cdc_mirror.demo",
    "collector.app",
    "mock_replay.app",
    "mirror.app",
    "webui.app",
    "validation.run",
    "stack.manager",
)

CHILD = textwrap.dedent(
    """
    import importlib, importlib.abc, io, json, sys, tempfile
    from contextlib import redirect_stderr
    from pathlib import Path

    BLOCKED = {"pyspark", "py4j"}
    refused = []

    class RefuseSpark(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".", 1)[0] in BLOCKED:
                refused.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, RefuseSpark())
    report = {"imported": [], "refused_on_import": None, "exits": {}, "stderr": {}}
    for module in sys.argv[1].split(","):
        importlib.import_module(module)
        report["imported"].append(module)

    from cdc_mirror import cli

    def run(*args):
        err = io.StringIO()
        cli.err_console.file = err
        code = cli.run(list(args))
        report["exits"][" ".join(args)] = int(code)
        report["stderr"][" ".join(args)] = err.getvalue()

    with redirect_stderr(io.StringIO()):
        for args in (["--help"], ["--version"], ["collector", "--help"], ["mirror", "--help"]):
            run(*args)

    # The web admin serves its login page on a temporary SQLite database.
    from fastapi.testclient import TestClient
    from tests.unit.webui.harness import make_app

    with tempfile.TemporaryDirectory() as home, TestClient(make_app(Path(home))) as client:
        report["webui_login_status"] = client.get("/login").status_code
    report["refused_on_import"] = list(refused)

    # The lake's commands: each ends with the one sentence that says how to install Spark.
    for args in (
        ["sql", "SELECT 1"],
        ["merge", "--dt", "2026-01-01", "--all"],
        ["stream-writer", "run", "--available-now"],
    ):
        run(*args)
    report["spark_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps(report))
    """
)


def test_entry_points_work_without_pyspark_and_lake_commands_say_how_to_install_it() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(ENTRY_MODULES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])

    assert report["imported"] == list(ENTRY_MODULES)
    # Nothing on the non-Spark paths even tried to import PySpark or py4j.
    assert report["refused_on_import"] == []
    assert report["webui_login_status"] == 200
    for args in ("--help", "--version", "collector --help", "mirror --help"):
        assert report["exits"][args] == 0, (args, report["stderr"][args])

    for args in (
        "sql SELECT 1",
        "merge --dt 2026-01-01 --all",
        "stream-writer run --available-now",
    ):
        assert report["exits"][args] == 2, (args, report["stderr"][args])
        assert SPARK_MISSING in " ".join(report["stderr"][args].split()), report["stderr"][args]
        assert "Traceback" not in report["stderr"][args]
    assert report["spark_loaded"] == []
