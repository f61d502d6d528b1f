"""The binlogOffset: a global, deterministic ordering id per MySQL instance.

``binlogOffset = second * 10**6 + seq``. Binlog event timestamps are not monotonic across
transactions, so ``second = max(previous second, event second)``; the 6-digit ``seq`` restarts
when ``second`` advances and borrows the next second when it would pass 999999.

Sequence 000000 is reserved for history replay (``source=MOCK``, stamped with query time
minus 5 minutes), so a replayed row can never tie a collected change: collected changes use
sequences 1..999999.

The generator is pure: the same starting state fed the same event times yields the same
offsets, which is what makes re-reading a binlog after a crash or failover reproduce them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simple_binlog.errors import ContractError

SEQ_DIGITS = 6
SEQ_SPAN: int = 10**SEQ_DIGITS
MAX_SEQ: int = SEQ_SPAN - 1
MOCK_SEQ = 0
FIRST_SEQ = 1
MOCK_LEAD_SECONDS = 5 * 60


def compose(second: int, seq: int) -> int:
    if not 0 <= seq <= MAX_SEQ:
        raise ContractError(f"offset sequence {seq} is outside 0..{MAX_SEQ}.")
    if second < 0:
        raise ContractError(f"offset second {second} is negative.")
    return second * SEQ_SPAN + seq


def split(offset: int) -> tuple[int, int]:
    """``(second, seq)`` of an offset."""
    return divmod(offset, SEQ_SPAN)


def mock_offset(query_start_second: int) -> int:
    """The offset of every row of a history replay that started reading at this second."""
    return compose(query_start_second - MOCK_LEAD_SECONDS, MOCK_SEQ)


@dataclass(frozen=True, slots=True)
class OffsetState:
    """The generator's resume state: the last offset handed out (0 before the first).

    Saved together with the binlog position it belongs to; resuming from that position with
    this state reproduces the following offsets exactly.
    """

    last_offset: int = 0

    @property
    def second(self) -> int:
        return split(self.last_offset)[0]

    @property
    def seq(self) -> int:
        return split(self.last_offset)[1]


class OffsetGenerator:
    """Hands out strictly increasing offsets from event timestamps (seconds)."""

    __slots__ = ("_second", "_seq")

    def __init__(self, state: OffsetState | None = None) -> None:
        state = state or OffsetState()
        self._second, self._seq = split(state.last_offset)

    def next(self, event_second: int) -> int:
        if event_second > self._second:
            self._second, self._seq = event_second, FIRST_SEQ
        elif self._seq >= MAX_SEQ:
            # A burst of more than 999,999 rows within one second borrows the next one.
            self._second, self._seq = self._second + 1, FIRST_SEQ
        else:
            self._seq += 1
        return self._second * SEQ_SPAN + self._seq

    @property
    def state(self) -> OffsetState:
        return OffsetState(self._second * SEQ_SPAN + self._seq)
