"""binlogOffset generation: strictly increasing, deterministic on resume, MOCK-safe."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simple_binlog.errors import ContractError
from simple_binlog.offsets import (
    MAX_SEQ,
    MOCK_LEAD_SECONDS,
    SEQ_SPAN,
    OffsetGenerator,
    OffsetState,
    compose,
    mock_offset,
    split,
)

FAST = settings(max_examples=200, deadline=None, database=None)

# Realistic epoch seconds, with room for jumps backwards and forwards.
BASE = 1_700_000_000
event_seconds = st.lists(st.integers(BASE - 50, BASE + 50), min_size=1, max_size=60)
# Also the degenerate "all in the same second" sequences, which exercise seq and borrowing.
bursts = st.integers(BASE - 5, BASE + 5).flatmap(
    lambda s: st.lists(st.integers(s - 2, s), min_size=1, max_size=60)
)
start_states = st.one_of(
    st.just(OffsetState()),
    st.builds(
        lambda second, seq: OffsetState(compose(second, seq)),
        st.integers(BASE - 10, BASE + 10),
        st.one_of(st.integers(1, MAX_SEQ), st.integers(MAX_SEQ - 5, MAX_SEQ)),
    ),
)


def run(state: OffsetState, seconds: list[int]) -> list[int]:
    gen = OffsetGenerator(state)
    return [gen.next(s) for s in seconds]


@FAST
@given(start_states, st.one_of(event_seconds, bursts))
def test_offsets_strictly_increase(state, seconds):
    offsets = run(state, seconds)
    previous = state.last_offset
    for offset in offsets:
        assert offset > previous
        previous = offset


@FAST
@given(start_states, st.one_of(event_seconds, bursts))
def test_second_is_max_of_previous_and_event_second_unless_borrowing(state, seconds):
    gen = OffsetGenerator(state)
    prev_second, prev_seq = split(state.last_offset)
    for event_second in seconds:
        second, seq = split(gen.next(event_second))
        if event_second > prev_second:
            assert (second, seq) == (event_second, 1)
        elif prev_seq >= MAX_SEQ:
            # Borrowing: the burst passed 999,999 and takes the next second.
            assert (second, seq) == (prev_second + 1, 1)
        else:
            assert second == max(prev_second, event_second) == prev_second
            assert seq == prev_seq + 1
        prev_second, prev_seq = second, seq


@FAST
@given(start_states, st.one_of(event_seconds, bursts))
def test_collected_sequences_are_never_zero(state, seconds):
    for offset in run(state, seconds):
        assert 1 <= split(offset)[1] <= MAX_SEQ


@FAST
@given(start_states, st.one_of(event_seconds, bursts), st.data())
def test_resuming_from_saved_state_reproduces_the_uninterrupted_run(state, seconds, data):
    cut = data.draw(st.integers(0, len(seconds)), label="cut")
    uninterrupted = run(state, seconds)

    first = OffsetGenerator(state)
    head = [first.next(s) for s in seconds[:cut]]
    saved = first.state
    # The saved state is the last offset handed out (or the start state if none).
    assert saved.last_offset == (head[-1] if head else state.last_offset)
    tail = run(OffsetState(saved.last_offset), seconds[cut:])

    assert head + tail == uninterrupted


@FAST
@given(start_states, st.one_of(event_seconds, bursts))
def test_same_input_same_offsets(state, seconds):
    assert run(state, seconds) == run(state, seconds)


def test_burst_beyond_999999_borrows_the_next_second():
    gen = OffsetGenerator(OffsetState(compose(BASE, MAX_SEQ - 1)))
    offsets = [gen.next(BASE) for _ in range(4)]
    assert [split(o) for o in offsets] == [
        (BASE, MAX_SEQ),
        (BASE + 1, 1),
        (BASE + 1, 2),
        (BASE + 1, 3),
    ]
    # An event of the borrowed second continues the sequence, it does not restart it.
    assert split(gen.next(BASE + 1)) == (BASE + 1, 4)
    # The next real second restarts at 1.
    assert split(gen.next(BASE + 2)) == (BASE + 2, 1)


def test_time_going_backwards_keeps_the_later_second():
    gen = OffsetGenerator()
    assert split(gen.next(BASE)) == (BASE, 1)
    assert split(gen.next(BASE - 30)) == (BASE, 2)
    assert split(gen.next(BASE + 1)) == (BASE + 1, 1)


def test_fresh_generator_starts_at_seq_one():
    gen = OffsetGenerator()
    assert gen.state == OffsetState(0)
    assert gen.next(BASE) == BASE * SEQ_SPAN + 1
    assert gen.state == OffsetState(BASE * SEQ_SPAN + 1)
    assert (gen.state.second, gen.state.seq) == (BASE, 1)


@FAST
@given(st.integers(MOCK_LEAD_SECONDS, 4_000_000_000))
def test_mock_offset_is_query_time_minus_five_minutes_with_seq_zero(query_second):
    offset = mock_offset(query_second)
    assert offset == (query_second - 300) * 10**6
    assert split(offset) == (query_second - 300, 0)


@FAST
@given(st.integers(MOCK_LEAD_SECONDS, 4_000_000_000), st.integers(0, 10))
def test_mock_offset_never_ties_a_collected_change_of_the_same_second(query_second, extra):
    second = query_second - MOCK_LEAD_SECONDS
    collected = OffsetGenerator(OffsetState(mock_offset(query_second))).next(second + extra)
    assert collected > mock_offset(query_second)
    assert collected != mock_offset(query_second)


def test_mock_offset_before_epoch_plus_lead_is_refused():
    with pytest.raises(ContractError, match="negative"):
        mock_offset(MOCK_LEAD_SECONDS - 1)
    assert mock_offset(MOCK_LEAD_SECONDS) == 0


@FAST
@given(st.integers(0, 10**12), st.integers(0, MAX_SEQ))
def test_compose_split_round_trip(second, seq):
    offset = compose(second, seq)
    assert split(offset) == (second, seq)
    assert compose(*split(offset)) == offset
    assert OffsetState(offset).second == second
    assert OffsetState(offset).seq == seq


@FAST
@given(st.integers(0, 10**18))
def test_split_compose_round_trip(offset):
    assert compose(*split(offset)) == offset


@pytest.mark.parametrize(
    ("second", "seq", "mentions"),
    [
        (BASE, -1, "sequence -1"),
        (BASE, SEQ_SPAN, f"sequence {SEQ_SPAN}"),
        (BASE, 10**9, "sequence"),
        (-1, 0, "second -1"),
        (-BASE, 5, "negative"),
    ],
)
def test_compose_range_errors(second, seq, mentions):
    with pytest.raises(ContractError, match=mentions):
        compose(second, seq)
