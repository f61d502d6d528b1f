"""Merge and check records: small JSON files under ``<lake>/_merge/<table>/`` for audits and
the web admin. ``<dt>.json`` is the last merge of a day (archive decision, schema changes,
counts, where the partition lives); ``<dt>.check.json`` the check against MySQL after it.
Written atomically (temporary file + rename), so a reader never sees half a record.

They are local files under ``spark.lake_dir`` whatever the lake's storage, so no merge decides
by them: what the next merge needs (the raw snapshot read, the archive decision) is stored
with each tag in the lake (``merge.snapshot.SnapshotStore.merge_facts``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def merge_dir(lake_dir: Path, table: str) -> Path:
    return lake_dir / "_merge" / table


def merge_record_path(lake_dir: Path, table: str, dt: str) -> Path:
    return merge_dir(lake_dir, table) / f"{dt}.json"


def check_record_path(lake_dir: Path, table: str, dt: str) -> Path:
    return merge_dir(lake_dir, table) / f"{dt}.check.json"


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=2, sort_keys=True, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    document: dict[str, Any] = json.loads(path.read_text())
    return document
