"""Lossless MySQL values: encode → JSON → decode gives the canonical value for every Kind."""

import base64
import datetime as dt
import struct
from decimal import Decimal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simple_binlog.errors import ContractError, UnsupportedTypeError
from simple_binlog.values import Kind, canonical, decode, encode, parse_column_type

FAST = settings(max_examples=150, deadline=None, database=None)

MAX_TIME_MICROS = ((838 * 60 + 59) * 60 + 59) * 1_000_000 + 999_999


def wire(spec: str, value, name: str = "col"):
    """The JSON text a value travels as, parsed back as a consumer would."""
    column = parse_column_type(spec)
    return orjson.loads(orjson.dumps(encode(column, value, name)))


def round_trip(spec: str, value, name: str = "col"):
    column = parse_column_type(spec)
    decoded = decode(column, wire(spec, value, name), name)
    assert decoded == canonical(column, value)
    return decoded


def float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def truncate_micros(micros: int, fsp: int) -> int:
    step = 10 ** (6 - fsp)
    return micros - micros % step


# --- integers --------------------------------------------------------------------------------

INT_RANGES = {
    "tinyint(4)": (-(2**7), 2**7 - 1),
    "tinyint(3) unsigned": (0, 2**8 - 1),
    "smallint(6)": (-(2**15), 2**15 - 1),
    "mediumint(9)": (-(2**23), 2**23 - 1),
    "int(11)": (-(2**31), 2**31 - 1),
    "int(10) unsigned": (0, 2**32 - 1),
    "bigint(20)": (-(2**63), 2**63 - 1),
}


@FAST
@given(st.sampled_from(sorted(INT_RANGES)), st.data())
def test_integers_round_trip_as_json_numbers(spec, data):
    low, high = INT_RANGES[spec]
    value = data.draw(st.one_of(st.integers(low, high), st.sampled_from([low, high, 0])))
    assert wire(spec, value) == value
    assert isinstance(wire(spec, value), int)
    assert round_trip(spec, value) == value


@FAST
@given(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63, 2**64 - 1])))
def test_bigint_unsigned_travels_as_a_string_of_digits(value):
    assert wire("bigint(20) unsigned", value) == str(value)
    assert round_trip("bigint(20) unsigned", value) == value
    assert round_trip("BIGINT UNSIGNED ZEROFILL", value) == value


def test_negative_signed_bigint_extremes():
    assert round_trip("bigint(20)", -(2**63)) == -(2**63)
    assert round_trip("bigint", -1) == -1


# --- DECIMAL ---------------------------------------------------------------------------------


@st.composite
def decimal_cases(draw):
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    digits = draw(st.integers(0, 10**precision - 1))
    negative = draw(st.booleans())
    text = f"{'-' if negative else ''}{digits}E-{scale}"
    return f"decimal({precision},{scale})", scale, Decimal(text)


@FAST
@given(decimal_cases())
def test_decimal_round_trips_with_exactly_scale_decimals(case):
    spec, scale, value = case
    text = wire(spec, value)
    assert isinstance(text, str)
    fraction = text.partition(".")[2]
    assert len(fraction) == scale
    assert Decimal(text) == value
    decoded = round_trip(spec, value)
    assert decoded == value
    assert isinstance(decoded, Decimal)
    assert decoded.as_tuple().exponent == -scale


def test_decimal_is_padded_to_the_column_scale():
    assert wire("decimal(12,4) unsigned", Decimal("1.5")) == "1.5000"
    assert wire("decimal(12,4)", 7) == "7.0000"
    assert wire("decimal(12,4)", "-0.25") == "-0.2500"
    assert wire("decimal(10,0)", Decimal("42")) == "42"
    assert wire("decimal", Decimal("3")) == "3"


def test_decimal_of_sixty_five_digits_is_not_refused():
    value = Decimal("12345678901234567890123456789012345.123456789012345678901234567890")
    assert round_trip("decimal(65,30)", value) == value
    assert wire("decimal(65,30)", value) == str(value)


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), "abc", 1.5, b"1"])
def test_decimal_refuses_non_finite_and_non_decimal_values(value):
    with pytest.raises(ContractError, match="amount"):
        encode(parse_column_type("decimal(10,2)"), value, "amount")


# --- FLOAT / DOUBLE --------------------------------------------------------------------------


@FAST
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float_column_values_are_exact_float32(value):
    assert wire("float", value) == value
    assert round_trip("float", value) == value


@FAST
@given(st.floats(min_value=-3.4e38, max_value=3.4e38, allow_nan=False))
def test_float_column_rounds_doubles_to_float32(value):
    expected = float32(value)
    assert round_trip("float", value) == expected
    assert round_trip("float(7,4)", value) == expected


def test_float_column_rounding_example():
    assert round_trip("float", 0.1) == float32(0.1) != 0.1


@FAST
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_round_trips_exactly(value):
    assert wire("double", value) == value
    decoded = round_trip("double", value)
    assert decoded == value
    assert isinstance(decoded, float)
    assert round_trip("real", value) == value


def test_float_out_of_float32_range_is_a_contract_error():
    with pytest.raises(ContractError, match="ratio"):
        encode(parse_column_type("float"), 1e300, "ratio")


# --- dates and times -------------------------------------------------------------------------


@FAST
@given(st.dates(min_value=dt.date(1, 1, 1)))
def test_date_round_trip(value):
    assert wire("date", value) == value.isoformat()
    assert round_trip("date", value) == value


@st.composite
def datetime_cases(draw, min_year=1, max_year=9999):
    fsp = draw(st.integers(0, 6))
    value = draw(
        st.datetimes(min_value=dt.datetime(min_year, 1, 1), max_value=dt.datetime(max_year, 12, 31))
    )
    value = value.replace(microsecond=truncate_micros(value.microsecond, fsp))
    spec = "datetime" if fsp == 0 and draw(st.booleans()) else f"datetime({fsp})"
    return spec, fsp, value


@FAST
@given(datetime_cases())
def test_datetime_round_trip_with_fsp(case):
    spec, fsp, value = case
    text = wire(spec, value)
    assert text.startswith(f"{value.year:04d}-{value.month:02d}-{value.day:02d} ")
    fraction = text.partition(".")[2]
    assert len(fraction) == fsp
    assert round_trip(spec, value) == value


def test_datetime_wire_form_examples():
    moment = dt.datetime(2024, 2, 29, 23, 59, 58, 123456)
    assert wire("datetime", moment.replace(microsecond=0)) == "2024-02-29 23:59:58"
    assert wire("datetime(3)", moment.replace(microsecond=123000)) == "2024-02-29 23:59:58.123"
    assert wire("datetime(6)", moment) == "2024-02-29 23:59:58.123456"
    assert wire("datetime", dt.datetime(1, 1, 1)) == "0001-01-01 00:00:00"
    assert wire("datetime(6)", dt.datetime(999, 1, 1)) == "0999-01-01 00:00:00.000000"


@FAST
@given(datetime_cases(1970, 2037))
def test_naive_timestamp_round_trip(case):
    spec, _fsp, value = case
    spec = spec.replace("datetime", "timestamp")
    assert round_trip(spec, value) == value


@FAST
@given(
    datetime_cases(1971, 2036),
    st.integers(-14 * 60, 14 * 60).map(lambda minutes: dt.timezone(dt.timedelta(minutes=minutes))),
)
def test_aware_timestamp_is_converted_to_naive_utc(case, zone):
    _spec, fsp, naive_utc = case
    spec = f"timestamp({fsp})"
    aware = naive_utc.replace(tzinfo=dt.UTC).astimezone(zone)
    decoded = round_trip(spec, aware)
    assert decoded.tzinfo is None
    assert decoded == naive_utc


def test_aware_timestamp_example():
    aware = dt.datetime(2024, 1, 1, 8, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=8)))
    assert wire("timestamp", aware) == "2024-01-01 00:00:00"


@st.composite
def time_cases(draw):
    fsp = draw(st.integers(0, 6))
    magnitude = draw(st.one_of(st.integers(0, MAX_TIME_MICROS), st.just(MAX_TIME_MICROS)))
    magnitude = truncate_micros(magnitude, fsp)
    sign = draw(st.sampled_from([1, -1]))
    spec = "time" if fsp == 0 else f"time({fsp})"
    return spec, dt.timedelta(microseconds=sign * magnitude)


@FAST
@given(time_cases())
def test_time_round_trip_within_838_hours(case):
    spec, value = case
    text = wire(spec, value)
    assert text.startswith("-") == (value < dt.timedelta(0))
    assert round_trip(spec, value) == value


def test_time_extremes_and_negative_fractions():
    biggest = dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999_999)
    assert wire("time(6)", biggest) == "838:59:59.999999"
    assert round_trip("time(6)", biggest) == biggest
    assert round_trip("time(6)", -biggest) == -biggest
    half = dt.timedelta(microseconds=-500_000)
    assert wire("time(1)", half) == "-00:00:00.5"
    assert round_trip("time(1)", half) == half


@pytest.mark.parametrize(
    ("spec", "zero"),
    [
        ("date", "0000-00-00"),
        ("datetime", "0000-00-00 00:00:00"),
        ("datetime(6)", "0000-00-00 00:00:00.000000"),
        ("timestamp", "0000-00-00 00:00:00"),
    ],
)
def test_zero_dates_travel_verbatim(spec, zero):
    assert wire(spec, zero) == zero
    assert round_trip(spec, zero) == zero


@pytest.mark.parametrize("spec", ["date", "datetime", "timestamp(3)"])
def test_other_strings_are_not_dates(spec):
    with pytest.raises(ContractError, match="created_at"):
        encode(parse_column_type(spec), "yesterday", "created_at")


# --- YEAR, BIT -------------------------------------------------------------------------------


@FAST
@given(st.one_of(st.just(0), st.integers(1901, 2155)))
def test_year_round_trip(value):
    assert wire("year(4)", value) == value
    assert round_trip("year", value) == value


@FAST
@given(st.integers(1, 64), st.data())
def test_bit_round_trips_from_int_bytes_and_bit_strings(width, data):
    value = data.draw(st.integers(0, 2**width - 1))
    spec = f"bit({width})"
    as_bytes = value.to_bytes((width + 7) // 8, "big")
    as_bits = format(value, f"0{width}b")
    for driver_value in (value, as_bytes, as_bits):
        assert wire(spec, driver_value) == value
        assert round_trip(spec, driver_value) == value


def test_bit_examples():
    assert round_trip("bit(4)", "0101") == 5
    assert round_trip("bit(16)", b"\x01\x00") == 256
    assert round_trip("bit(1)", True) == 1


# --- ENUM, SET -------------------------------------------------------------------------------

label_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters=",\\"),
    min_size=1,
    max_size=8,
)
label_lists = st.lists(label_text, min_size=1, max_size=8, unique=True)


def quoted(labels):
    return ",".join("'" + label.replace("'", "''") + "'" for label in labels)


@FAST
@given(label_lists, st.data())
def test_enum_round_trip_and_label_parsing(labels, data):
    spec = f"enum({quoted(labels)})"
    column = parse_column_type(spec)
    assert column.kind is Kind.ENUM
    assert column.labels == tuple(labels)
    label = data.draw(st.sampled_from(labels))
    assert round_trip(spec, label) == label
    assert round_trip(spec, label.encode()) == label


@FAST
@given(label_lists, st.data())
def test_set_is_ordered_by_definition(labels, data):
    spec = f"set({quoted(labels)})"
    assert parse_column_type(spec).labels == tuple(labels)
    chosen = data.draw(st.sets(st.sampled_from(labels)))
    expected = ",".join(label for label in labels if label in chosen)
    shuffled = data.draw(st.permutations(sorted(chosen)))
    assert wire(spec, chosen) == expected
    assert wire(spec, ",".join(shuffled)) == expected
    assert round_trip(spec, chosen) == expected
    assert round_trip(spec, frozenset(chosen)) == expected


def test_set_examples():
    spec = "set('read','write','admin')"
    assert wire(spec, {"admin", "read"}) == "read,admin"
    assert wire(spec, "admin,read") == "read,admin"
    assert wire(spec, set()) == ""
    assert wire(spec, "") == ""
    with pytest.raises(ContractError, match="perms"):
        encode(parse_column_type(spec), {"root"}, "perms")


# --- text ------------------------------------------------------------------------------------

text_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))


@FAST
@given(st.sampled_from(["varchar(255)", "char(10)", "text", "longtext", "json"]), text_values)
def test_text_round_trip(spec, value):
    assert wire(spec, value) == value
    assert round_trip(spec, value) == value
    assert round_trip(spec, value.encode("utf-8")) == value


@pytest.mark.parametrize("spec", ["varchar(10)", "text", "int", "blob", "datetime", "enum('a')"])
def test_null_stays_none(spec):
    column = parse_column_type(spec)
    assert encode(column, None) is None
    assert orjson.dumps(encode(column, None)) == b"null"
    assert decode(column, None) is None


def test_empty_string_is_not_null():
    column = parse_column_type("varchar(10)")
    assert wire("varchar(10)", "") == ""
    assert decode(column, "") == ""
    assert decode(column, "") is not None
    assert decode(column, None) is None


def test_unicode_text():
    value = '订单 ✓ café 🚀 \u0000 "quoted" \\'
    assert round_trip("varchar(64)", value) == value


# --- binary ----------------------------------------------------------------------------------


@FAST
@given(
    st.sampled_from(["varbinary(255)", "blob", "longblob", "tinyblob", "geometry", "point"]),
    st.binary(max_size=64),
)
def test_binary_round_trips_via_base64(spec, value):
    text = wire(spec, value)
    assert text == base64.b64encode(value).decode("ascii")
    assert round_trip(spec, value) == value
    assert round_trip(spec, bytearray(value)) == value


@FAST
@given(st.integers(1, 32), st.data())
def test_fixed_binary_is_right_padded_with_zero_bytes(length, data):
    value = data.draw(st.binary(max_size=length))
    spec = f"binary({length})"
    decoded = round_trip(spec, value)
    assert decoded == value.ljust(length, b"\x00")
    assert len(decoded) == length


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("date", "2024-00-15"),
        ("date", "2024-03-00"),
        ("date", "2024-00-00"),
        ("date", "0000-05-06"),
        ("datetime", "2024-00-00 10:11:12"),
        ("datetime(3)", "2024-03-00 23:59:59.125"),
        ("datetime(6)", "0000-00-00 10:11:12.000001"),
    ],
)
def test_partial_zero_dates_travel_as_mysqls_text(spec, text):
    """A zero month or day (permissive sql_modes) is not the all-zero date: its text travels
    and decodes as it is, never as another date."""
    assert wire(spec, text) == text
    assert decode(parse_column_type(spec), text) == text


@pytest.mark.parametrize("text", ["2024-13-01", "2024-1-01", "not a date", "2024-00-15x"])
def test_text_that_is_no_mysql_date_is_refused(text):
    with pytest.raises(ContractError):
        wire("date", text)


@pytest.mark.parametrize(
    ("spec", "value", "text"),
    [
        ("time", dt.timedelta(hours=-838, minutes=-59, seconds=-59), "-838:59:59"),
        (
            "time(1)",
            dt.timedelta(hours=1, minutes=2, seconds=3, microseconds=400_000),
            "01:02:03.4",
        ),
        ("time(2)", dt.timedelta(microseconds=-10_000), "-00:00:00.01"),
        ("time(3)", dt.timedelta(seconds=5), "00:00:05.000"),
        ("time(6)", dt.timedelta(microseconds=-1), "-00:00:00.000001"),
    ],
)
def test_time_carries_exactly_its_fsp_digits_as_mysql_prints_it(spec, value, text):
    assert wire(spec, value) == text
    assert round_trip(spec, value) == value


def test_fixed_binary_is_sent_with_all_its_bytes():
    """The wire value itself holds BINARY(n)'s n bytes: every store gets them, not only the
    readers that pad from columnTypes."""
    padded = base64.b64encode(b"\x01\x02\x00\x00\x00\x00").decode()
    assert wire("binary(6)", b"\x01\x02") == padded
    assert wire("binary(3)", b"") == "AAAA"
    assert wire("varbinary(6)", b"\x01\x00") == "AQA="


def test_binary_padding_examples():
    assert round_trip("binary(4)", b"ab") == b"ab\x00\x00"
    assert round_trip("BINARY(4)", b"abcd") == b"abcd"
    # VARBINARY keeps its length.
    assert round_trip("varbinary(4)", b"ab") == b"ab"
    # A str for a binary column is taken as its UTF-8 bytes.
    assert round_trip("varbinary(8)", "é") == "é".encode()


# --- parse_column_type -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "decimal(12,4) unsigned",
            {"kind": Kind.DECIMAL, "unsigned": True, "precision": 12, "scale": 4},
        ),
        ("decimal(12,4)", {"kind": Kind.DECIMAL, "unsigned": False, "scale": 4}),
        ("numeric", {"kind": Kind.DECIMAL, "precision": 10, "scale": 0}),
        ("datetime(6)", {"kind": Kind.DATETIME, "fsp": 6}),
        ("datetime", {"kind": Kind.DATETIME, "fsp": 0}),
        ("timestamp(3)", {"kind": Kind.TIMESTAMP, "fsp": 3}),
        ("time(2)", {"kind": Kind.TIME, "fsp": 2}),
        ("enum('a','it''s')", {"kind": Kind.ENUM, "labels": ("a", "it's")}),
        ("set('x','y,z')", {"kind": Kind.SET, "labels": ("x", "y,z")}),
        ("bigint(20) unsigned", {"kind": Kind.UINT64, "unsigned": True}),
        ("BIGINT UNSIGNED", {"kind": Kind.UINT64}),
        ("bigint(20)", {"kind": Kind.INT, "unsigned": False}),
        ("int(10) unsigned", {"kind": Kind.INT, "unsigned": True, "length": 10}),
        ("tinyint(1)", {"kind": Kind.INT, "length": 1}),
        ("int(10) unsigned zerofill", {"kind": Kind.INT, "unsigned": True}),
        ("varchar(255)", {"kind": Kind.TEXT, "length": 255}),
        ("json", {"kind": Kind.TEXT}),
        ("binary(16)", {"kind": Kind.BINARY, "length": 16, "is_fixed_binary": True}),
        ("varbinary(16)", {"kind": Kind.BINARY, "is_fixed_binary": False}),
        ("blob", {"kind": Kind.BINARY, "is_fixed_binary": False}),
        ("bit(5)", {"kind": Kind.BIT, "length": 5}),
        ("year(4)", {"kind": Kind.YEAR}),
        ("float", {"kind": Kind.FLOAT}),
        ("double", {"kind": Kind.DOUBLE}),
        ("multipolygon", {"kind": Kind.GEOMETRY}),
        ("point", {"kind": Kind.GEOMETRY}),
        ("linestring", {"kind": Kind.GEOMETRY}),
        ("polygon", {"kind": Kind.GEOMETRY}),
        ("float(7,3)", {"kind": Kind.FLOAT}),
        ("double(10,4) unsigned", {"kind": Kind.DOUBLE, "unsigned": True}),
        ("smallint(3) unsigned zerofill", {"kind": Kind.INT, "unsigned": True, "length": 3}),
        ("decimal(12,4) unsigned zerofill", {"kind": Kind.DECIMAL, "precision": 12, "scale": 4}),
        ("enum('a,b','c''d')", {"kind": Kind.ENUM, "labels": ("a,b", "c'd")}),
        ("set('x,y','it''s','z')", {"kind": Kind.SET, "labels": ("x,y", "it's", "z")}),
        ("  Date  ", {"kind": Kind.DATE}),
    ],
)
def test_parse_column_type(spec, expected):
    column = parse_column_type(spec)
    assert column.spec == spec
    for attribute, value in expected.items():
        assert getattr(column, attribute) == value, attribute


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "   ",
        "frobnicate",
        "vectors(3)",
        "decimal(12,4",
        "varchar(255",
        "int(10) signedness",
        "int(10) unsigned garbage",
        "double precision",
        "(10)",
        "int;drop table t",
    ],
)
def test_unsupported_or_garbled_types_are_refused(spec):
    with pytest.raises(UnsupportedTypeError, match="column type"):
        parse_column_type(spec)


def test_mysql_vector_is_binary():
    # MySQL 9's VECTOR(n) travels as the bytes of its float32s, like a BINARY column.
    assert parse_column_type("vector(3)").kind is Kind.BINARY


def test_unsupported_type_error_is_a_contract_error():
    assert issubclass(UnsupportedTypeError, ContractError)


# --- wrong value types -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ("int", "12"),
        ("int", 1.5),
        ("int", True),
        ("bigint(20) unsigned", -1),
        ("bigint(20) unsigned", "18446744073709551615"),
        ("double", "1.5"),
        ("double", True),
        ("float", "not a number"),
        ("date", dt.datetime(2024, 1, 1)),
        ("date", 20240101),
        ("datetime", dt.date(2024, 1, 1)),
        ("timestamp", 1_700_000_000),
        ("time", "12:00:00"),
        ("time", dt.time(12, 0)),
        ("year", "2024"),
        ("bit(8)", "12"),
        ("bit(8)", ""),
        ("bit(8)", 1.0),
        ("varchar(10)", 5),
        ("varchar(10)", b"\xff\xfe"),
        ("enum('a')", 1),
        ("set('a','b')", "a,c"),
        ("blob", 5),
        ("binary(4)", [1, 2]),
    ],
)
def test_wrong_value_types_raise_contract_error_naming_the_column(spec, value):
    with pytest.raises(ContractError) as caught:
        encode(parse_column_type(spec), value, "order_total")
    message = str(caught.value)
    assert "order_total" in message
    assert spec in message


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ("int", "5"),
        ("int", 1.5),
        ("int", True),
        ("bigint unsigned", 5),
        ("bigint unsigned", "-5"),
        ("decimal(10,2)", 1.5),
        ("decimal(10,2)", "abc"),
        ("double", "1.0"),
        ("date", "2024-13-01"),
        ("date", 5),
        ("datetime", "not a date"),
        ("time", "noon"),
        ("varchar(10)", 5),
        ("blob", "***not base64***"),
    ],
)
def test_malformed_wire_values_raise_contract_error_naming_the_column(spec, value):
    with pytest.raises(ContractError, match="price"):
        decode(parse_column_type(spec), value, "price")
