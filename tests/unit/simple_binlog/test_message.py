"""The SimpleBinlog message: encode → decode_message round-trip and one-sentence errors."""

import datetime as dt
from decimal import Decimal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simple_binlog.errors import ContractError
from simple_binlog.message import (
    FORMAT_VERSION,
    BinlogPosition,
    EventType,
    SimpleBinlog,
    Source,
    decode_message,
    from_json,
)

FAST = settings(max_examples=150, deadline=None, database=None)

REQUIRED = (
    "version",
    "binlogOffset",
    "executeTime",
    "eventType",
    "schemaName",
    "tableName",
    "source",
    "content",
)
KNOWN = {*REQUIRED, "primaryKeys", "columnTypes", "beforeContent", "position"}

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=12)
scalars = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
rows = st.dictionaries(names, scalars, max_size=6)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
positions = st.builds(
    BinlogPosition,
    server_id=st.integers(1, 2**32 - 1),
    file=st.from_regex(r"\Amysql-bin\.[0-9]{6}\Z"),
    pos=st.integers(4, 2**40),
    row_index=st.integers(0, 10_000),
    gtid=st.one_of(st.none(), st.from_regex(r"\A[0-9a-f]{8}-[0-9a-f]{4}:[1-9][0-9]{0,5}\Z")),
)


@st.composite
def messages(draw):
    content = draw(rows)
    columns = list(content)
    typed = draw(st.booleans())
    column_types = (
        {name: draw(st.sampled_from(["int", "varchar(20)", "double"])) for name in columns}
        if typed
        else {}
    )
    primary_keys = tuple(draw(st.lists(st.sampled_from(columns), unique=True))) if columns else ()
    source = draw(st.sampled_from(Source))
    extra = draw(st.dictionaries(names.filter(lambda n: n not in KNOWN), json_values, max_size=3))
    return SimpleBinlog(
        binlog_offset=draw(st.integers(1, 2**63 - 1)),
        execute_time=draw(st.integers(0, 2**41)),
        event_type=draw(st.sampled_from(EventType)),
        schema_name=draw(text),
        table_name=draw(text),
        source=source,
        content=content,
        column_types=column_types,
        primary_keys=primary_keys,
        before_content=draw(st.one_of(st.none(), rows)),
        position=None if source is Source.MOCK else draw(st.one_of(st.none(), positions)),
        extra=extra,
    )


def valid_document(**overrides):
    document = {
        "version": 1,
        "binlogOffset": 1_700_000_000_000_001,
        "executeTime": 1_700_000_000_000,
        "eventType": "UPDATE",
        "schemaName": "ordercenter_07",
        "tableName": "orderinfo_42",
        "source": "BINLOG",
        "primaryKeys": ["id"],
        "columnTypes": {"id": "bigint(20) unsigned", "amount": "decimal(12,4)", "note": "text"},
        "content": {"id": "18446744073709551615", "amount": "12.5000", "note": ""},
        "beforeContent": {"id": "1", "amount": "0.0000", "note": None},
        "position": {
            "serverId": 1,
            "file": "mysql-bin.000003",
            "pos": 4711,
            "rowIndex": 2,
            "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23",
        },
    }
    document.update(overrides)
    return document


def payload(document) -> bytes:
    return orjson.dumps(document)


@FAST
@given(messages())
def test_encode_decode_round_trip(message):
    decoded = decode_message(message.encode())
    assert decoded == message
    assert decoded.encode() == message.encode()


def test_valid_document_decodes_with_all_fields():
    message = decode_message(payload(valid_document()))
    assert message.version == FORMAT_VERSION
    assert message.event_type is EventType.UPDATE
    assert message.source is Source.BINLOG
    assert message.primary_keys == ("id",)
    assert message.primary_key_values() == ("18446744073709551615",)
    assert message.before_content == {"id": "1", "amount": "0.0000", "note": None}
    assert message.content["note"] == ""
    assert message.decoded_content() == {
        "id": 2**64 - 1,
        "amount": Decimal("12.5000"),
        "note": "",
    }
    assert message.extra == {}


def test_decoded_content_uses_column_types():
    document = valid_document(
        columnTypes={"id": "int", "at": "datetime(3)", "raw": "binary(3)"},
        content={"id": 7, "at": "2024-01-02 03:04:05.600", "raw": "AQ=="},
        primaryKeys=["id"],
    )
    assert decode_message(payload(document)).decoded_content() == {
        "id": 7,
        "at": dt.datetime(2024, 1, 2, 3, 4, 5, 600_000),
        "raw": b"\x01\x00\x00",
    }


@pytest.mark.parametrize("field", REQUIRED)
def test_every_required_field_missing_is_named(field):
    document = valid_document()
    del document[field]
    with pytest.raises(ContractError, match=f"'{field}'"):
        decode_message(payload(document))


@pytest.mark.parametrize("version", [0, 2, 99, -1])
def test_unsupported_version(version):
    with pytest.raises(ContractError, match=f"version {version} is not supported"):
        decode_message(payload(valid_document(version=version)))


@pytest.mark.parametrize("version", ["1", 1.0, True, None])
def test_version_of_the_wrong_type(version):
    with pytest.raises(ContractError, match="'version'"):
        decode_message(payload(valid_document(version=version)))


@pytest.mark.parametrize("event_type", ["insert", "UPSERT", "", 1, None])
def test_bad_event_type(event_type):
    with pytest.raises(ContractError, match="EventType"):
        decode_message(payload(valid_document(eventType=event_type)))


@pytest.mark.parametrize("source", ["binlog", "REPLAY", "", 0, None])
def test_bad_source(source):
    with pytest.raises(ContractError, match="Source"):
        decode_message(payload(valid_document(source=source)))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("binlogOffset", "1700000000000001"),
        ("binlogOffset", 1.5),
        ("binlogOffset", True),
        ("executeTime", "now"),
        ("executeTime", None),
        ("schemaName", 7),
        ("tableName", None),
        ("content", []),
        ("content", "id=1"),
        ("beforeContent", [1]),
        ("columnTypes", "int"),
    ],
)
def test_fields_of_the_wrong_type_are_named(field, value):
    with pytest.raises(ContractError, match=f"'{field}'"):
        decode_message(payload(valid_document(**{field: value})))


@pytest.mark.parametrize("offset", [0, -1])
def test_binlog_offset_must_be_positive(offset):
    with pytest.raises(ContractError, match="'binlogOffset' must be positive"):
        decode_message(payload(valid_document(binlogOffset=offset)))


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"{", b"\xff\xfe", b'{"version": 1,}', b"NaN"],
)
def test_non_json_payload(body):
    with pytest.raises(ContractError, match="not valid JSON"):
        decode_message(body)


@pytest.mark.parametrize("body", [b"[]", b"[{}]", b"1", b'"message"', b"null", b"true"])
def test_non_object_payload(body):
    with pytest.raises(ContractError, match="must be a JSON object"):
        decode_message(body)


def test_from_json_refuses_non_dicts():
    with pytest.raises(ContractError, match="JSON object"):
        from_json([valid_document()])


@pytest.mark.parametrize("field", ["content", "beforeContent"])
@pytest.mark.parametrize("value", [[1, 2], {"nested": 1}, []])
def test_non_scalar_content_value(field, value):
    row = {"id": "1", "amount": value, "note": None}
    with pytest.raises(ContractError, match=f"'{field}.amount'"):
        decode_message(payload(valid_document(**{field: row})))


@pytest.mark.parametrize(
    "primary_keys", [["missing"], ["id", "missing"], "id", {"id": 1}, [1], [["id"]], [None]]
)
def test_primary_keys_must_name_content_columns(primary_keys):
    with pytest.raises(ContractError, match="'primaryKeys'"):
        decode_message(payload(valid_document(primaryKeys=primary_keys)))


def test_content_column_without_a_type_is_named():
    document = valid_document(columnTypes={"id": "int", "amount": "decimal(12,4)"})
    with pytest.raises(ContractError, match="'note'"):
        decode_message(payload(document))


def test_optional_fields_may_be_absent():
    document = valid_document()
    for name in ("primaryKeys", "columnTypes", "beforeContent", "position"):
        del document[name]
    message = decode_message(payload(document))
    assert message.primary_keys == ()
    assert message.column_types == {}
    assert message.before_content is None
    assert message.position is None
    assert set(message.to_json()) == set(REQUIRED) | {"primaryKeys", "columnTypes"}


def test_mock_message_without_position():
    document = valid_document(source="MOCK", eventType="INSERT", binlogOffset=1_699_999_700_000_000)
    del document["position"]
    del document["beforeContent"]
    message = decode_message(payload(document))
    assert message.source is Source.MOCK
    assert message.position is None
    assert message.binlog_offset % 10**6 == 0


@FAST
@given(positions)
def test_position_round_trip(position):
    assert position.to_json()["rowIndex"] == position.row_index
    message = decode_message(payload(valid_document(position=position.to_json())))
    assert message.position == position
    assert decode_message(message.encode()).position == position


@pytest.mark.parametrize(
    "position",
    [
        {"serverId": 1, "file": "mysql-bin.000001", "pos": 4},  # no rowIndex
        {"file": "mysql-bin.000001", "pos": 4, "rowIndex": 0},  # no serverId
        {"serverId": "one", "file": "f", "pos": 4, "rowIndex": 0},
        {"serverId": 1, "file": "f", "pos": None, "rowIndex": 0},
        [1, "f", 4, 0],
        "mysql-bin.000001:4",
        42,
    ],
)
def test_malformed_position(position):
    with pytest.raises(ContractError, match="'position'"):
        decode_message(payload(valid_document(position=position)))


def test_unknown_fields_are_preserved_in_extra():
    document = valid_document(traceId="abc-123", producer={"host": "c1", "pid": 42}, tags=[1, 2])
    message = decode_message(payload(document))
    assert message.extra == {
        "traceId": "abc-123",
        "producer": {"host": "c1", "pid": 42},
        "tags": [1, 2],
    }
    again = orjson.loads(message.encode())
    assert again["traceId"] == "abc-123"
    assert again["producer"] == {"host": "c1", "pid": 42}
    assert decode_message(message.encode()) == message


def test_errors_are_one_sentence():
    document = valid_document()
    del document["tableName"]
    with pytest.raises(ContractError) as caught:
        decode_message(payload(document))
    message = str(caught.value)
    assert message.endswith(".")
    assert "\n" not in message
