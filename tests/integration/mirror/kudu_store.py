"""Reading what the Kudu mirror holds, and dropping a test's tables (test helpers)."""

from __future__ import annotations

from typing import Any

from cdc_platform.config import Settings
from mirror.kudu import KuduApplier, _Table


def kudu_applier(settings: Settings) -> KuduApplier:
    jars = (settings.stack.home / "jars" / "kudu").resolve()
    return KuduApplier(settings.kudu, settings.mirror, settings.tables, jars)


def kudu_rows(settings: Settings, table: str) -> dict[str, dict[str, Any]]:
    """str(first key value) → every column (bookkeeping too), in canonical Python values."""
    applier = kudu_applier(settings)
    try:
        java = applier._java
        handle = applier._client.openTable(settings.kudu.table_prefix + table)
        opened = _Table(java, handle)
        names = list(opened.index)
        scanner = applier._client.newScannerBuilder(handle).build()
        found: dict[str, dict[str, Any]] = {}
        while scanner.hasMoreRows():
            rows = scanner.nextRows()
            while rows.hasNext():
                row = rows.next()
                values = {
                    n: java.python_value(opened.types[n], row, i) for i, n in enumerate(names)
                }
                found[str(values[opened.key_columns[0]])] = values
        scanner.close()
        return found
    finally:
        applier.close()


def drop_tables(settings: Settings) -> None:
    applier = kudu_applier(settings)
    try:
        applier.drop_tables()
    finally:
        applier.close()
