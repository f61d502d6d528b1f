"""Where MySQL's side cuts a chunk into parts hashed on several connections at once."""

from __future__ import annotations

from validation.mysql import part_offsets


def test_a_chunk_is_cut_into_parts_of_about_equal_rows_one_per_connection() -> None:
    assert part_offsets(10_000, 2, 1_000) == [5_000]
    assert part_offsets(10_001, 3, 1_000) == [3_333, 6_667]


def test_a_chunk_stays_whole_on_one_connection_or_when_parts_would_be_too_small() -> None:
    assert part_offsets(10_000, 1, 1_000) == []
    assert part_offsets(1_999, 2, 1_000) == []
    assert part_offsets(0, 2, 1_000) == []
    # Fewer parts than connections when only that many reach the minimum.
    assert part_offsets(2_500, 4, 1_000) == [1_250]
