"""The Redis listing's integer keys: a SCAN reply of numbers' own texts parsed whole into the
key column's array type, anything else left to the name-by-name path, and the chunk bounds
searched in the array as ``bisect_right`` finds them in a list."""

from __future__ import annotations

import bisect

import numpy as np
import pytest

from validation.redis import _IntegerKeys, _plain_numbers

HEAD = b"pre:orders:"
SIGNED, UNSIGNED = np.dtype(np.int64), np.dtype(np.uint64)


def _names(*parts: bytes) -> list[bytes]:
    return [HEAD + part for part in parts]


@pytest.mark.parametrize("dtype", [SIGNED, UNSIGNED])
def test_a_reply_of_plain_numbers_is_parsed_whole(dtype: np.dtype[np.generic]) -> None:
    numbers = _plain_numbers(_names(b"17", b"1", b"300", b"9223372036854775"), HEAD, dtype)
    assert numbers is not None and numbers.dtype == dtype
    assert numbers.tolist() == [17, 1, 300, 9_223_372_036_854_775]


def test_an_unsigned_number_past_the_signed_range_is_parsed_exactly() -> None:
    numbers = _plain_numbers(_names(b"9223372036854775808", b"5"), HEAD, UNSIGNED)
    assert numbers is not None and numbers.tolist() == [2**63, 5]


@pytest.mark.parametrize(
    ("names", "dtype"),
    [
        (_names(b"12", b"007"), SIGNED),  # a leading zero: read as written
        (_names(b"12", b"0"), SIGNED),  # zero is read name by name too
        (_names(b"12", b"-5"), SIGNED),  # a sign
        (_names(b"12", b""), SIGNED),  # the head alone
        (_names(b"12", b"5:more"), SIGNED),  # a name of more parts
        (_names(b"12", b"5" + HEAD + b"6"), SIGNED),  # the head twice
        ([HEAD + b"12", b"other:orders:5"], SIGNED),  # a name without the head
        (_names(b"12", b"1" * 19), SIGNED),  # may not fit int64: numpy would clamp it
        (_names(b"12", b"1" * 20), UNSIGNED),  # may not fit uint64
        ([], SIGNED),
    ],
)
def test_any_other_reply_is_left_to_the_name_by_name_path(
    names: list[bytes], dtype: np.dtype[np.generic]
) -> None:
    assert _plain_numbers(names, HEAD, dtype) is None


@pytest.mark.parametrize("dtype", [SIGNED, UNSIGNED])
def test_a_chunk_bound_is_found_as_bisect_right_finds_it(dtype: np.dtype[np.generic]) -> None:
    listed = [3, 3, 5, 9, 2**40] if dtype == UNSIGNED else [-7, 3, 3, 5, 9, 2**40]
    keys = _IntegerKeys(np.array(listed, dtype=dtype))
    tuples = [(number,) for number in listed]
    for bound in [-(2**70), -8, -7, 0, 3, 4, 9, 2**40, 2**64, 2**70]:
        assert keys.after((bound,)) == bisect.bisect_right(tuples, (bound,)), bound
    assert keys[1:3] == tuples[1:3] and keys[0] == tuples[0]
    assert type(keys[0][0]) is int
