"""The collector's resume state: GTID positions, split transactions, its stored JSON form."""

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.position import (
    FORMAT,
    CollectorPosition,
    advance_gtid_position,
    parse_gtid,
)
from simple_binlog.errors import ContractError
from simple_binlog.offsets import OffsetState

FAST = settings(max_examples=150, deadline=None, database=None)

OFFSET = 1_700_000_000_000_042


def position(**overrides) -> CollectorPosition:
    fields = {"instance": "db1", "gtid": "0-1-10", "offset_state": OffsetState(OFFSET)}
    fields.update(overrides)
    return CollectorPosition(**fields)


def assert_one_sentence(error: BaseException) -> None:
    text = str(error)
    assert text.endswith(".")
    assert "\n" not in text
    assert "Traceback" not in text
    assert error.__cause__ is None  # raised "from None": no driver internals attached


# -- parse_gtid ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gtid", "expected"),
    [
        ("0-1-42", (0, 1, 42)),
        ("0-0-0", (0, 0, 0)),
        ("12-3001-987654321", (12, 3001, 987654321)),
        ("4294967295-4294967295-18446744073709551615", (2**32 - 1, 2**32 - 1, 2**64 - 1)),
    ],
)
def test_parse_gtid_valid(gtid, expected):
    assert parse_gtid(gtid) == expected


@pytest.mark.parametrize(
    "gtid",
    ["", "0", "0-1", "0-1-2-3", "a-b-c", "0-1-x", "0:1:2", "0-1-", "-0-1-2", "0-1-2,1-2-3"],
)
def test_parse_gtid_invalid_is_a_contract_error(gtid):
    with pytest.raises(ContractError, match="is not a MariaDB GTID") as caught:
        parse_gtid(gtid)
    assert repr(gtid) in str(caught.value)
    assert_one_sentence(caught.value)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_parse_gtid_round_trips_its_parts(domain, server, sequence):
    assert parse_gtid(f"{domain}-{server}-{sequence}") == (domain, server, sequence)


# -- advance_gtid_position ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "gtid", "after"),
    [
        ("", "0-1-5", "0-1-5"),  # empty position: the first transaction
        ("0-1-5", "0-1-6", "0-1-6"),  # same domain: replaced
        ("0-1-5", "0-2-9", "0-2-9"),  # same domain, another server (a failover): replaced
        ("0-1-5,1-2-7", "1-2-8", "0-1-5,1-2-8"),
        ("0-1-5,1-2-7", "0-1-6", "0-1-6,1-2-7"),
        ("0-1-5,1-2-7", "2-3-1", "0-1-5,1-2-7,2-3-1"),  # a new domain is added
        ("1-2-7,0-1-5", "0-1-6", "0-1-6,1-2-7"),  # kept sorted by domain
        ("2-1-1,10-1-1", "3-1-1", "2-1-1,3-1-1,10-1-1"),  # numerically, not as text
        ("0-1-5,", "1-1-1", "0-1-5,1-1-1"),  # an empty entry is ignored
    ],
)
def test_advance_gtid_position(before, gtid, after):
    assert advance_gtid_position(before, gtid) == after


@pytest.mark.parametrize(("before", "gtid"), [("0-1-5", "0-1"), ("0-1-5,junk", "0-1-6")])
def test_advance_gtid_position_rejects_malformed_gtids(before, gtid):
    with pytest.raises(ContractError):
        advance_gtid_position(before, gtid)


gtids = st.builds(
    lambda d, s, n: f"{d}-{s}-{n}", st.integers(0, 5), st.integers(0, 3), st.integers(0, 10**6)
)


@FAST
@given(st.lists(gtids, max_size=30))
def test_advance_gtid_position_keeps_the_last_gtid_of_each_domain_sorted(sequence):
    current = ""
    last_by_domain: dict[int, str] = {}
    for gtid in sequence:
        current = advance_gtid_position(current, gtid)
        last_by_domain[parse_gtid(gtid)[0]] = gtid
    entries = current.split(",") if current else []
    assert entries == [last_by_domain[d] for d in sorted(last_by_domain)]


# -- after_row / after_transaction / rows_to_skip ------------------------------------------------


def test_a_fresh_position_skips_nothing():
    start = position()
    assert start.partial is None
    assert start.rows_done == 0
    assert start.rows_to_skip("0-1-11") == 0
    assert start.rows_to_skip("0-1-10") == 0


def test_after_row_marks_the_transaction_partly_published():
    start = position(epoch=3)
    moved = start.after_row("0-1-11", 250, "mysql-bin.000002", 4096, OFFSET + 250)
    # The completed GTID position does not move until the transaction is complete.
    assert moved.gtid == "0-1-10"
    assert moved.partial == "0-1-11"
    assert moved.rows_done == 250
    assert (moved.file, moved.pos) == ("mysql-bin.000002", 4096)
    assert moved.offset_state == OffsetState(OFFSET + 250)
    assert (moved.instance, moved.epoch) == ("db1", 3)
    # Frozen: the earlier position is untouched.
    assert start.partial is None
    assert start.offset_state == OffsetState(OFFSET)


def test_rows_to_skip_only_for_the_partial_gtid():
    moved = position().after_row("0-1-11", 250, "f", 4, OFFSET + 250)
    assert moved.rows_to_skip("0-1-11") == 250
    assert moved.rows_to_skip("0-1-12") == 0
    assert moved.rows_to_skip("0-1-10") == 0  # the last complete one
    assert moved.rows_to_skip("1-1-11") == 0  # same sequence, another domain


def test_after_transaction_completes_it():
    partial = position().after_row("0-1-11", 250, "f", 4, OFFSET + 250)
    done = partial.after_transaction("0-1-11", "mysql-bin.000002", 8192)
    assert done.gtid == "0-1-11"
    assert done.partial is None
    assert done.rows_done == 0
    assert done.rows_to_skip("0-1-11") == 0
    assert (done.file, done.pos) == ("mysql-bin.000002", 8192)
    # The offset state is that of the last published row.
    assert done.offset_state == OffsetState(OFFSET + 250)


def test_after_transaction_keeps_other_domains():
    start = position(gtid="0-1-10,1-2-7")
    assert start.after_transaction("1-2-8", "f", 1).gtid == "0-1-10,1-2-8"
    assert start.after_transaction("2-9-1", "f", 1).gtid == "0-1-10,1-2-7,2-9-1"


def test_after_transaction_without_rows_keeps_the_offset_state():
    assert position().after_transaction("0-1-11", "f", 9).offset_state == OffsetState(OFFSET)


# -- the stored JSON form ------------------------------------------------------------------------


def test_to_json_spelling():
    stored = position(partial="0-1-11", rows_done=7, file="mysql-bin.000003", pos=77, epoch=2)
    assert stored.to_json() == {
        "format": FORMAT,
        "instance": "db1",
        "gtid": "0-1-10",
        "lastOffset": OFFSET,
        "partial": "0-1-11",
        "rowsDone": 7,
        "file": "mysql-bin.000003",
        "pos": 77,
        "epoch": 2,
    }


positions = st.builds(
    CollectorPosition,
    instance=st.text(max_size=20),
    gtid=st.lists(gtids, max_size=3).map(",".join),
    offset_state=st.builds(OffsetState, st.integers(0, 2**63 - 1)),
    partial=st.none() | gtids,
    rows_done=st.integers(0, 2**31),
    file=st.text(max_size=30),
    pos=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**31),
)


@FAST
@given(positions)
def test_json_round_trip(stored):
    assert CollectorPosition.from_json(stored.to_json()) == stored
    # As it travels: through JSON bytes on the positions topic.
    assert CollectorPosition.from_json(orjson.loads(orjson.dumps(stored.to_json()))) == stored


def _document(**overrides):
    document = position(partial="0-1-11", rows_done=7).to_json()
    document.update(overrides)
    return document


def _without(key):
    document = _document()
    del document[key]
    return document


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        "a string",
        42,
        {},
        _without("instance"),
        _without("gtid"),
        _without("lastOffset"),
        _without("partial"),
        _without("rowsDone"),
        _without("file"),
        _without("pos"),
        _without("epoch"),
        _without("format"),
        _document(lastOffset="not a number"),
        _document(lastOffset=None),
        _document(rowsDone="many"),
        _document(pos=[1]),
        _document(epoch={"a": 1}),
    ],
)
def test_malformed_documents_are_contract_errors(document):
    with pytest.raises(ContractError, match="malformed") as caught:
        CollectorPosition.from_json(document)
    assert_one_sentence(caught.value)


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_unknown_format_is_rejected(version):
    with pytest.raises(ContractError, match=r"format .* is unknown") as caught:
        CollectorPosition.from_json(_document(format=version))
    assert_one_sentence(caught.value)


@pytest.mark.parametrize(
    "document",
    [
        _document(gtid=None),
        _document(instance=None),
        _document(file=None),
        _document(partial=5),
        _document(lastOffset=1.9),
        _document(rowsDone=True),
    ],
)
def test_wrongly_typed_fields_are_contract_errors(document):
    with pytest.raises(ContractError, match="malformed"):
        CollectorPosition.from_json(document)
