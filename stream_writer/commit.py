"""Batch manifests and the atomic commit of a batch's files. Filesystem only, no Spark.

A batch's files are first written under a staging directory of their own attempt. The
manifest (``<checkpoint>/cdc_batches/<batchId>.json``, written to a temporary name, fsynced,
then renamed) is the commit point: it lists every staged file with its final place. After
it exists, ``complete`` renames the files into place; a rename is atomic and ``complete``
skips files already in place, so it can be repeated any number of times after a crash.
Without a manifest nothing of the attempt is visible to readers, and the next attempt of the
batch starts from scratch in a new staging directory.

The manifests live inside Spark's checkpoint directory on purpose: a new checkpoint numbers
its batches from 0 again, and must never find the manifests of an old one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simple_binlog.errors import CdcMirrorError
from stream_writer.readiness import BatchProgress

log = logging.getLogger(__name__)

MANIFEST_DIR = "cdc_batches"
STATE_FILE = "cdc_state.json"


class CommitError(CdcMirrorError):
    """A committed batch cannot be completed (its staged files are gone)."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: Path, document: Any) -> None:
    """Write ``document`` to ``path`` so a reader sees the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with temporary.open("w") as handle:
        json.dump(document, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
    fsync_dir(path.parent)


def read_json(path: Path) -> Any:
    with path.open() as handle:
        return json.load(handle)


@dataclass(frozen=True, slots=True)
class CommittedFile:
    staged: str  # path relative to the lake directory
    final: str  # path relative to the lake directory
    table: str
    dt: str
    rows: int
    size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "staged": self.staged,
            "final": self.final,
            "table": self.table,
            "dt": self.dt,
            "rows": self.rows,
            "size": self.size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommittedFile:
        return cls(
            data["staged"], data["final"], data["table"], data["dt"], data["rows"], data["size"]
        )


@dataclass(frozen=True, slots=True)
class BatchManifest:
    batch_id: int
    staging_dir: str  # relative to the lake directory
    files: list[CommittedFile]
    progress: list[BatchProgress]
    dead_letters: int
    created_ms: int
    # Rows per (table, dt), for readiness and late counting; includes the dead-letter table.
    rows_by_table_day: dict[tuple[str, str], int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "stagingDir": self.staging_dir,
            "files": [f.to_json() for f in self.files],
            "progress": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "nextOffset": p.next_offset,
                    "lag": p.lag,
                    "maxEventMs": p.max_event_ms,
                }
                for p in self.progress
            ],
            "deadLetters": self.dead_letters,
            "createdMs": self.created_ms,
            "rowsByTableDay": [
                {"table": t, "dt": d, "rows": n}
                for (t, d), n in sorted(self.rows_by_table_day.items())
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchManifest:
        return cls(
            batch_id=int(data["batchId"]),
            staging_dir=data["stagingDir"],
            files=[CommittedFile.from_json(f) for f in data["files"]],
            progress=[
                BatchProgress(
                    p["topic"],
                    int(p["partition"]),
                    int(p["nextOffset"]),
                    int(p["lag"]),
                    p["maxEventMs"],
                )
                for p in data["progress"]
            ],
            dead_letters=int(data["deadLetters"]),
            created_ms=int(data["createdMs"]),
            rows_by_table_day={
                (r["table"], r["dt"]): int(r["rows"]) for r in data["rowsByTableDay"]
            },
        )


class ManifestStore:
    """The manifests of one checkpoint: ``<checkpoint>/cdc_batches/<batchId>.json``."""

    def __init__(self, checkpoint_dir: Path, keep: int = 200) -> None:
        self.directory = checkpoint_dir / MANIFEST_DIR
        self.keep = keep

    def path(self, batch_id: int) -> Path:
        return self.directory / f"{batch_id}.json"

    def load(self, batch_id: int) -> BatchManifest | None:
        path = self.path(batch_id)
        if not path.exists():
            return None
        return BatchManifest.from_json(read_json(path))

    def save(self, manifest: BatchManifest) -> None:
        atomic_write_json(self.path(manifest.batch_id), manifest.to_json())

    def committed_after(self, batch_id: int) -> list[int]:
        """The ids of the manifests after ``batch_id``, in order."""
        if not self.directory.exists():
            return []
        return sorted(
            int(path.stem)
            for path in self.directory.glob("*.json")
            if path.stem.isdigit() and int(path.stem) > batch_id
        )

    def prune(self, latest: int) -> None:
        """Drop manifests of batches far behind ``latest`` (Spark never replays those)."""
        for path in self.directory.glob("*.json"):
            if path.stem.isdigit() and int(path.stem) < latest - self.keep:
                path.unlink(missing_ok=True)


def complete(manifest: BatchManifest, lake_dir: Path) -> list[CommittedFile]:
    """Move the manifest's staged files into place; returns those moved by this call.

    Idempotent: a file already in place is skipped. A file neither staged nor in place means
    someone removed lake files behind the writer's back; that is an error, not a skip.
    """
    moved: list[CommittedFile] = []
    touched_dirs: set[Path] = set()
    for item in manifest.files:
        final = lake_dir / item.final
        staged = lake_dir / item.staged
        if final.exists():
            continue
        if not staged.exists():
            raise CommitError(
                f"batch {manifest.batch_id} is committed but its file {item.final} is neither "
                f"in place nor staged ({item.staged}); restore it or start a new checkpoint."
            )
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, final)
        touched_dirs.add(final.parent)
        moved.append(item)
    for directory in touched_dirs:
        fsync_dir(directory)
    return moved


def discard_attempts(staging_root: Path, batch_id: int) -> None:
    """Remove the staging directories of earlier attempts of batch ``batch_id`` only (a batch
    before it may still be moving its files out of its own)."""
    if not staging_root.exists():
        return
    for attempt in staging_root.iterdir():
        if attempt.name.split("-", 1)[0] == str(batch_id):
            shutil.rmtree(attempt, ignore_errors=True)


def discard_staging(staging_root: Path, up_to_batch: int) -> None:
    """Remove staging directories of batches ≤ ``up_to_batch`` (attempts that never committed,
    and committed ones already moved into place)."""
    if not staging_root.exists():
        return
    for attempt in staging_root.iterdir():
        batch = attempt.name.split("-", 1)[0]
        if batch.isdigit() and int(batch) <= up_to_batch:
            shutil.rmtree(attempt, ignore_errors=True)
