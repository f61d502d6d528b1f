"""Spark job of the governance tests (a process of its own): every row of every table of the
given Hive databases, through the shared metastore, printed as one line ``RESULT {json}``
(table → rows as text), so the test can look for plaintext as any downstream reader would.

Usage: dump_tables.py <database> [<database> ...]
"""

from __future__ import annotations

import json
import sys

from cdc_platform.config import load_settings
from cdc_platform.spark import build_session


def main(databases: list[str]) -> int:
    settings = load_settings()
    spark = build_session(
        settings, "test-governance-dump", {"spark.ui.showConsoleProgress": "false"}
    )
    try:
        result: dict[str, list[str]] = {}
        for database in databases:
            for row in spark.sql(f"SHOW TABLES IN {database}").collect():
                qualified = f"{database}.{row['tableName']}"
                frame = spark.table(qualified)
                result[qualified] = [json.dumps(r.asDict(), default=str) for r in frame.collect()]
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
