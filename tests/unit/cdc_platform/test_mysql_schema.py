"""The one key rule of every component (cdc_platform.mysql_schema.choose_key), case by case."""

from __future__ import annotations

from cdc_platform.mysql_schema import IndexColumn, choose_key


def _unique(name: str, *columns: str, nullable: tuple[str, ...] = ()) -> list[IndexColumn]:
    return [IndexColumn(name, c, non_unique=False, nullable=c in nullable) for c in columns]


def _index(name: str, *columns: str) -> list[IndexColumn]:
    return [IndexColumn(name, c, non_unique=True, nullable=False) for c in columns]


def test_the_primary_key_in_index_order_wins_over_every_unique_index():
    indexes = [*_unique("a_first", "a"), *_unique("PRIMARY", "id", "shard")]
    assert choose_key(indexes) == ("id", "shard")
    assert choose_key(_unique("PRIMARY", "b", "a")) == ("b", "a")


def test_without_a_primary_key_a_unique_not_null_index_is_the_key():
    assert choose_key([*_index("ix_v", "v"), *_unique("uk_order", "order_no", "shard")]) == (
        "order_no",
        "shard",
    )


def test_a_unique_index_with_a_nullable_column_is_no_key():
    assert choose_key(_unique("uk_ab", "a", "b", nullable=("b",))) == ()


def test_of_several_unique_not_null_indexes_the_first_by_name_is_the_key():
    indexes = [
        *_unique("z_b", "b"),
        *_unique("m_c", "c", nullable=("c",)),
        *_unique("a_a", "a"),
    ]
    assert choose_key(indexes) == ("a",)
    assert choose_key(list(reversed(indexes))) == ("a",)


def test_a_nullable_unique_index_first_by_name_is_skipped_for_the_next_usable_one():
    indexes = [*_unique("a_null", "x", nullable=("x",)), *_unique("b_ok", "y")]
    assert choose_key(indexes) == ("y",)


def test_no_unique_index_means_no_key():
    assert choose_key(_index("ix_a", "a")) == ()
    assert choose_key([]) == ()
