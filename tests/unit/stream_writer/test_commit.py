"""Manifests and the idempotent completion of a batch (on a real temporary filesystem)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_writer.commit import (
    BatchManifest,
    CommitError,
    CommittedFile,
    ManifestStore,
    atomic_write_json,
    complete,
    discard_attempts,
    discard_staging,
    read_json,
)
from stream_writer.readiness import BatchProgress


def _manifest(lake: Path, batch_id: int, names: list[str]) -> BatchManifest:
    staging = lake / "_stream_writer" / "w" / "_staging" / f"{batch_id}-abc"
    files = []
    for name in names:
        staged = staging / "rows" / f"fileId={name}" / "part-0.parquet"
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(name.encode())
        files.append(
            CommittedFile(
                staged=str(staged.relative_to(lake)),
                final=f"db.db/orders/dt=2024-03-01/{name}.parquet",
                table="orders",
                dt="2024-03-01",
                rows=1,
                size=len(name),
            )
        )
    return BatchManifest(
        batch_id=batch_id,
        staging_dir=str(staging.relative_to(lake)),
        files=files,
        progress=[BatchProgress("t", 0, 10, 0, 99)],
        dead_letters=0,
        created_ms=1,
        rows_by_table_day={("orders", "2024-03-01"): len(names)},
    )


def test_complete_is_idempotent_after_a_crash_midway(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, 3, ["a", "b", "c"])
    # A crash after the first rename: one file in place, two still staged.
    first = manifest.files[0]
    (tmp_path / first.final).parent.mkdir(parents=True)
    (tmp_path / first.staged).rename(tmp_path / first.final)

    moved = complete(manifest, tmp_path)
    assert [m.final for m in moved] == [f.final for f in manifest.files[1:]]
    assert complete(manifest, tmp_path) == []
    final_dir = tmp_path / "db.db/orders/dt=2024-03-01"
    assert sorted(p.name for p in final_dir.iterdir()) == ["a.parquet", "b.parquet", "c.parquet"]
    assert (final_dir / "b.parquet").read_bytes() == b"b"


def test_complete_refuses_a_file_that_vanished(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, 4, ["a"])
    (tmp_path / manifest.files[0].staged).unlink()
    with pytest.raises(CommitError, match="neither in place nor staged"):
        complete(manifest, tmp_path)


def test_manifest_store_round_trip_and_prune(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path / "checkpoint", keep=2)
    for batch_id in range(6):
        store.save(_manifest(tmp_path, batch_id, ["x"]))
    loaded = store.load(5)
    assert loaded == _manifest(tmp_path, 5, ["x"])
    assert store.load(99) is None
    store.prune(5)
    assert sorted(int(p.stem) for p in store.directory.glob("*.json")) == [3, 4, 5]


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "state" / "s.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert read_json(target) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["s.json"]


def test_discard_staging_keeps_later_batches(tmp_path: Path) -> None:
    for name in ("3-aa", "4-bb", "5-cc", "notes"):
        (tmp_path / name).mkdir()
    discard_staging(tmp_path, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["5-cc", "notes"]


def test_discard_attempts_keeps_the_batch_being_published(tmp_path: Path) -> None:
    # Batch 4 is still moving its files out of its staging directory while batch 5 starts
    # over: only batch 5's earlier attempts go.
    root = tmp_path / "_staging"
    for name in ("4-aaa", "5-bbb", "5-ccc", "50-ddd"):
        (root / name).mkdir(parents=True)
    discard_attempts(root, 5)
    assert sorted(p.name for p in root.iterdir()) == ["4-aaa", "50-ddd"]


def test_committed_after_lists_unpublished_manifests_in_order(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path / "checkpoint")
    assert store.committed_after(-1) == []
    for batch_id in (12, 3, 10, 11):
        store.save(_manifest(tmp_path / "lake", batch_id, [f"f{batch_id}"]))
    assert store.committed_after(10) == [11, 12]
    assert store.committed_after(-1) == [3, 10, 11, 12]
    assert store.committed_after(12) == []
