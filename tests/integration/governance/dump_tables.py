"""Spark job of the governance tests (a process of its own): every row of every table of the
given databases of the lake's Iceberg catalog, through the shared metastore, printed as one line ``RESULT {json}``
(table → rows as text), so the test can look for plaintext as any downstream reader would.

Usage: dump_tables.py <database> [<database> ...]
"""

from __future__ import annotations

import json
import sys

from cdc_platform.config import load_settings
from cdc_platform.iceberg import LakeCatalog, lake_session


def main(databases: list[str]) -> int:
    settings = load_settings()
    spark = lake_session(
        settings, "test-governance-dump", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        lake = LakeCatalog.open(spark, settings, check=False)
        result: dict[str, list[str]] = {}
        for database in databases:
            for table in sorted(lake.table_names(database)):
                frame = spark.table(lake.name(database, table))
                rows = [json.dumps(r.asDict(), default=str) for r in frame.collect()]
                result[f"{database}.{table}"] = rows
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
