"""The read-ahead of chunks: order kept, errors raised to the consumer, early exit stops it."""

from __future__ import annotations

import threading

import pytest

from mock_replay.runner import ReadAhead


def test_items_arrive_in_order_and_the_producer_stays_one_ahead() -> None:
    produced: list[int] = []

    def items():
        for number in range(5):
            produced.append(number)
            yield number

    with ReadAhead(items()) as chunks:
        seen = []
        for item in chunks:
            seen.append(item)
            # At most the item being consumed, one queued and one in hand are read.
            assert len(produced) <= item + 3
    assert seen == [0, 1, 2, 3, 4]


def test_an_error_of_the_reader_reaches_the_consumer() -> None:
    def items():
        yield 1
        raise RuntimeError("the server went away")

    with pytest.raises(RuntimeError, match="went away"), ReadAhead(items()) as chunks:
        assert next(chunks) == 1
        next(chunks)


def test_leaving_early_stops_the_reader_and_closes_its_iterator() -> None:
    closed = threading.Event()

    def items():
        try:
            number = 0
            while True:
                yield number
                number += 1
        finally:
            closed.set()

    with ReadAhead(items()) as chunks:
        assert next(chunks) == 0
    assert closed.wait(5)
