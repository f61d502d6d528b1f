"""``commits_ahead_of_progress``: which raw commits maintenance's snapshot expiry must keep so
that a writer restarted after a crash between its raw and its progress commit finds its
position (expired, the writer would write those rows again)."""

from __future__ import annotations

from cdc_platform.iceberg import OFFSETS_PROPERTY, WRITER_PROPERTY, KafkaOffsets
from cdc_platform.lake import WriterProgress, commits_ahead_of_progress


def _commit(snapshot_id: int, writer: str, offsets: dict[tuple[str, int], int]):
    return snapshot_id, {WRITER_PROPERTY: writer, OFFSETS_PROPERTY: KafkaOffsets(offsets).encode()}


def test_a_writer_whose_progress_lags_its_newest_raw_commit_keeps_that_commit() -> None:
    newest_first = [
        _commit(3, "a", {("t", 0): 30, ("t", 1): 12}),  # a crashed before its progress commit
        _commit(2, "b", {("u", 0): 9}),
        _commit(1, "a", {("t", 0): 20, ("t", 1): 12}),
    ]
    progress = {"a": {("t", 0): 20, ("t", 1): 12}, "b": {("u", 0): 9}}
    assert commits_ahead_of_progress(newest_first, progress) == {3}


def test_writers_in_step_with_their_progress_need_nothing_kept() -> None:
    newest_first = [_commit(5, "a", {("t", 0): 30}), _commit(4, "b", {("u", 0): 9})]
    assert (
        commits_ahead_of_progress(newest_first, {"a": {("t", 0): 30}, "b": {("u", 0): 9}}) == set()
    )


def test_only_each_writers_newest_commit_counts_and_commits_without_offsets_are_passed_over() -> (
    None
):
    newest_first = [
        (9, {"operation": "replace"}),  # compaction: no writer, no offsets
        _commit(8, "a", {("t", 0): 30}),
        _commit(7, "a", {("t", 0): 40}),  # older than 8: not the writer's position
    ]
    assert commits_ahead_of_progress(newest_first, {"a": {("t", 0): 30}}) == set()


def test_a_writer_that_crashed_before_its_first_progress_commit_keeps_its_commit() -> None:
    assert commits_ahead_of_progress([_commit(1, "new", {("t", 0): 5})], {}) == {1}


def test_the_progress_rows_offsets_are_read_from_its_state() -> None:
    state = {
        "partitions": [
            {"topic": "t", "partition": 3, "nextOffset": 17, "watermarkMs": None, "lag": 0}
        ]
    }
    progress = WriterProgress(writer="a", batch_id=4, committed_ms=1, state=state)
    assert progress.next_offsets == {("t", 3): 17}
