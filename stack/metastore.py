"""Create the shared Hive metastore schema in PostgreSQL once (``python -m stack.metastore``).

Run in a child process so the caller holds no JVM. DataNucleus creates the schema on first
use; doing it once here, alone, avoids two jobs racing to create it later.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cdc_platform.config import Settings, load_settings
from cdc_platform.spark import require_spark
from simple_binlog.errors import StackError


def initialise_metastore(settings: Settings, jars_dir: Path, log_file: Path) -> None:
    # The child's ImportError would only reach its log; say here what is missing.
    require_spark()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        result = subprocess.run(
            [sys.executable, "-m", "stack.metastore"],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=600,
        )
    if result.returncode != 0:
        raise StackError(
            f"spark: creating the Hive metastore schema failed (exit {result.returncode}); "
            f"see {log_file}."
        )


def _main() -> int:
    from cdc_platform.spark import build_session  # noqa: PLC0415

    settings: Settings = load_settings()
    spark = build_session(settings, "cdc-mirror-metastore-init", create_schema=True)
    try:
        databases = [row[0] for row in spark.sql("SHOW DATABASES").collect()]
        if "default" not in databases:
            raise StackError("the metastore has no 'default' database after initialisation.")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
