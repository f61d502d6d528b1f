"""The writer makes the view of every logical table it writes; one that could not be made
(a metastore error) is tried again after the NEXT batch, whatever that batch writes: before,
it was tried only when its own table was written again, so a table written once and never
since kept no view (``stream_writer.writer.views_to_make``)."""

from __future__ import annotations

from stream_writer.writer import views_to_make


def test_a_failed_view_is_made_by_a_batch_that_does_not_write_its_table() -> None:
    # Batch 1 wrote x and y; x's view failed. Batch 2 writes only y.
    assert views_to_make({"y"}, made={"y"}, failed={"x"}) == ["x"]


def test_a_batch_makes_the_views_its_new_tables_lack_and_no_other() -> None:
    assert views_to_make({"a", "b", "c"}, made={"b"}, failed=set()) == ["a", "c"]
    assert views_to_make({"b"}, made={"b"}, failed=set()) == []


def test_a_view_being_made_or_made_is_not_started_twice() -> None:
    # ``made`` holds the views being made too; a failure moves its table to ``failed``.
    assert views_to_make({"x"}, made={"x"}, failed={"x"}) == []
