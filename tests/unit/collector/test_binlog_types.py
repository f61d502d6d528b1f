"""Column types from the binlog's table map, spelled as information_schema's COLUMN_TYPE."""

from types import SimpleNamespace

import pytest

from collector.binlog_types import binlog_form, column_type, refine
from simple_binlog.errors import ContractError, UnsupportedTypeError
from simple_binlog.values import Kind, parse_column_type

# MySQL protocol field types (include/mysql_com.h), spelled out independently of the module.
TINY, SHORT, LONG, FLOAT, DOUBLE = 1, 2, 3, 4, 5
TIMESTAMP, LONGLONG, INT24, DATE, TIME, DATETIME, YEAR = 7, 8, 9, 10, 11, 12, 13
NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = 14, 15, 16, 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = (
    249,
    250,
    251,
    252,
    253,
    254,
    255,
)


def column(kind: int, **attributes) -> SimpleNamespace:
    """A python-mysql-replication table-map column with every attribute column_type reads."""
    fields = {
        "type": kind,
        "name": "c",
        "unsigned": False,
        "precision": None,
        "decimals": None,
        "fsp": 0,
        "bits": None,
        "enum_values": None,
        "set_values": None,
        "character_set_name": "utf8mb4",
        "max_length": None,
        "length_size": 2,
    }
    fields.update(attributes)
    return SimpleNamespace(**fields)


CASES = [
    # integers, signed and unsigned
    (column(TINY), "tinyint", Kind.INT),
    (column(TINY, unsigned=True), "tinyint unsigned", Kind.INT),
    (column(SHORT), "smallint", Kind.INT),
    (column(SHORT, unsigned=True), "smallint unsigned", Kind.INT),
    (column(INT24), "mediumint", Kind.INT),
    (column(INT24, unsigned=True), "mediumint unsigned", Kind.INT),
    (column(LONG), "int", Kind.INT),
    (column(LONG, unsigned=True), "int unsigned", Kind.INT),
    (column(LONGLONG), "bigint", Kind.INT),
    (column(LONGLONG, unsigned=True), "bigint unsigned", Kind.UINT64),
    # decimals and floating point
    (column(NEWDECIMAL, precision=12, decimals=2), "decimal(12,2)", Kind.DECIMAL),
    (column(NEWDECIMAL, precision=65, decimals=30), "decimal(65,30)", Kind.DECIMAL),
    (
        column(NEWDECIMAL, precision=5, decimals=0, unsigned=True),
        "decimal(5,0) unsigned",
        Kind.DECIMAL,
    ),
    (column(FLOAT), "float", Kind.FLOAT),
    (column(DOUBLE), "double", Kind.DOUBLE),
    # dates and times
    (column(DATE), "date", Kind.DATE),
    (column(NEWDATE), "date", Kind.DATE),
    (column(DATETIME2, fsp=0), "datetime", Kind.DATETIME),
    (column(DATETIME2, fsp=3), "datetime(3)", Kind.DATETIME),
    (column(DATETIME2, fsp=6), "datetime(6)", Kind.DATETIME),
    (column(DATETIME), "datetime", Kind.DATETIME),
    (column(TIMESTAMP2, fsp=0), "timestamp", Kind.TIMESTAMP),
    (column(TIMESTAMP2, fsp=6), "timestamp(6)", Kind.TIMESTAMP),
    (column(TIMESTAMP), "timestamp", Kind.TIMESTAMP),
    (column(TIME2, fsp=0), "time", Kind.TIME),
    (column(TIME2, fsp=4), "time(4)", Kind.TIME),
    (column(TIME), "time", Kind.TIME),
    (column(YEAR), "year", Kind.YEAR),
    # bits, enums, sets
    (column(BIT, bits=1), "bit(1)", Kind.BIT),
    (column(BIT, bits=64), "bit(64)", Kind.BIT),
    (column(ENUM, enum_values=["small", "it's", "x,y"]), "enum('small','it''s','x,y')", Kind.ENUM),
    (column(ENUM, enum_values=None), "enum()", Kind.ENUM),
    (column(SET, set_values=["a", "b", "o'k"]), "set('a','b','o''k')", Kind.SET),
    (column(SET, set_values=None), "set()", Kind.SET),
    # character strings
    (column(STRING, max_length=40), "char", Kind.TEXT),
    (column(VARCHAR, max_length=1020), "varchar", Kind.TEXT),
    (column(VAR_STRING, max_length=1020), "varchar", Kind.TEXT),
    (column(STRING, max_length=4, character_set_name=None), "char", Kind.TEXT),
    # byte strings
    (column(STRING, character_set_name="binary", max_length=16), "binary(16)", Kind.BINARY),
    (column(STRING, character_set_name="binary", max_length=255), "binary(255)", Kind.BINARY),
    (column(VARCHAR, character_set_name="binary", max_length=300), "varbinary(300)", Kind.BINARY),
    (column(VAR_STRING, character_set_name="binary", max_length=8), "varbinary(8)", Kind.BINARY),
    # blobs and texts, by the size of their length prefix
    (column(BLOB, character_set_name="binary", length_size=1), "tinyblob", Kind.BINARY),
    (column(BLOB, character_set_name="binary", length_size=2), "blob", Kind.BINARY),
    (column(BLOB, character_set_name="binary", length_size=3), "mediumblob", Kind.BINARY),
    (column(BLOB, character_set_name="binary", length_size=4), "longblob", Kind.BINARY),
    (column(BLOB, length_size=1), "tinytext", Kind.TEXT),
    (column(BLOB, length_size=2), "text", Kind.TEXT),
    (column(BLOB, length_size=3), "mediumtext", Kind.TEXT),
    (column(BLOB, length_size=4), "longtext", Kind.TEXT),
    (column(TINY_BLOB, character_set_name="binary", length_size=1), "tinyblob", Kind.BINARY),
    (column(MEDIUM_BLOB, length_size=3), "mediumtext", Kind.TEXT),
    (column(LONG_BLOB, character_set_name="binary", length_size=4), "longblob", Kind.BINARY),
    # the rest
    (column(JSON, length_size=4), "json", Kind.TEXT),
    (column(GEOMETRY, length_size=4, character_set_name="binary"), "geometry", Kind.GEOMETRY),
]


@pytest.mark.parametrize(("col", "spelling", "kind"), CASES, ids=[c[1] for c in CASES])
def test_column_type_spelling(col, spelling, kind):
    assert column_type(col) == spelling


@pytest.mark.parametrize(("col", "spelling", "kind"), CASES, ids=[c[1] for c in CASES])
def test_every_spelling_parses_to_its_kind(col, spelling, kind):
    parsed = parse_column_type(column_type(col))
    assert parsed.kind is kind
    assert parsed.spec == spelling


def test_parsed_details_survive_the_spelling():
    decimal = parse_column_type(
        column_type(column(NEWDECIMAL, precision=12, decimals=4, unsigned=True))
    )
    assert (decimal.precision, decimal.scale, decimal.unsigned) == (12, 4, True)
    assert parse_column_type(column_type(column(DATETIME2, fsp=3))).fsp == 3
    assert parse_column_type(column_type(column(TIMESTAMP2, fsp=6))).fsp == 6
    assert parse_column_type(column_type(column(TIME2, fsp=4))).fsp == 4
    assert parse_column_type(column_type(column(TIME2, fsp=0))).fsp == 0
    assert parse_column_type(column_type(column(BIT, bits=13))).length == 13
    fixed = parse_column_type(
        column_type(column(STRING, character_set_name="binary", max_length=16))
    )
    assert fixed.is_fixed_binary
    assert fixed.length == 16
    variable = parse_column_type(
        column_type(column(VARCHAR, character_set_name="binary", max_length=16))
    )
    assert not variable.is_fixed_binary


def test_enum_and_set_labels_survive_quoting():
    labels = ["plain", "it's", "''", "'", "", "a,b", "x) unsigned", "back\\slash"]
    enum = parse_column_type(column_type(column(ENUM, enum_values=labels)))
    assert enum.labels == tuple(labels)
    members = ["o'k", "b"]
    assert parse_column_type(column_type(column(SET, set_values=members))).labels == tuple(members)


def test_blob_without_length_size_is_a_plain_blob():
    bare = SimpleNamespace(type=BLOB, name="b", character_set_name="binary")
    assert column_type(bare) == "blob"
    bare_text = SimpleNamespace(type=BLOB, name="t")  # no character set known: text
    assert column_type(bare_text) == "text"


@pytest.mark.parametrize("kind", [0, 6, 20, 99, 244])
def test_unknown_type_names_the_column(kind):
    with pytest.raises(UnsupportedTypeError, match=r"column weird_col has binlog type") as caught:
        column_type(column(kind, name="weird_col"))
    assert str(kind) in str(caught.value)
    assert isinstance(caught.value, ContractError)  # a data error, dead-lettered by callers


# -- MariaDB's UUID / INET4 / INET6 ----------------------------------------------------------------


def test_refine_puts_back_extended_types():
    types = {
        "id": "binary(16)",
        "v4": "binary(4)",
        "v6": "binary(16)",
        "raw": "binary(16)",
        "n": "int",
        "vb": "varbinary(16)",
        "gone": "binary(16)",
    }
    live = {
        "id": "uuid",
        "v4": "inet4",
        "v6": "inet6",
        "raw": "binary(16)",
        "n": "uuid",  # not binary in the binlog: never replaced
        "vb": "uuid",  # varbinary is not how these travel
    }
    refined = refine(types, live)
    assert refined == {
        "id": "uuid",
        "v4": "inet4",
        "v6": "inet6",
        "raw": "binary(16)",
        "n": "int",
        "vb": "varbinary(16)",
        "gone": "binary(16)",
    }
    assert list(refined) == list(types)  # column order kept
    assert types["id"] == "binary(16)"  # input untouched
    assert parse_column_type(refined["id"]).kind is Kind.UUID
    assert parse_column_type(refined["v4"]).kind is Kind.INET4
    assert parse_column_type(refined["v6"]).kind is Kind.INET6


def test_refine_with_nothing_live_changes_nothing():
    types = {"id": "binary(16)", "name": "varchar"}
    assert refine(types, {}) == types


# (the server's COLUMN_TYPE, what the binlog's table map says of it)
SERVER_SPELLINGS = [
    ("bigint(20) unsigned", "bigint unsigned"),
    ("int(11)", "int"),
    ("int(5) unsigned zerofill", "int unsigned"),
    ("tinyint(1)", "tinyint"),
    ("smallint(3) zerofill", "smallint"),
    ("mediumint(8) unsigned", "mediumint unsigned"),
    ("decimal(12,4) unsigned zerofill", "decimal(12,4) unsigned"),
    ("decimal(10,0)", "decimal(10,0)"),
    ("float(7,3)", "float"),
    ("float unsigned", "float"),
    ("double(10,4) unsigned", "double"),
    ("date", "date"),
    ("datetime(3)", "datetime(3)"),
    ("timestamp", "timestamp"),
    ("time(6)", "time(6)"),
    ("year(4)", "year"),
    ("bit(10)", "bit(10)"),
    ("enum('a,b','c''d')", "enum('a,b','c''d')"),
    ("set('x','y')", "set('x','y')"),
    ("char(5)", "char"),
    ("varchar(32)", "varchar"),
    ("longtext", "longtext"),
    ("binary(6)", "binary(6)"),
    ("varbinary(20)", "varbinary(20)"),
    ("mediumblob", "mediumblob"),
    ("point", "geometry"),
    ("linestring", "geometry"),
    ("polygon", "geometry"),
    ("multipoint", "geometry"),
    ("multilinestring", "geometry"),
    ("multipolygon", "geometry"),
    ("geometrycollection", "geometry"),
    ("geometry", "geometry"),
    ("uuid", "binary(16)"),
    ("inet4", "binary(4)"),
    ("inet6", "binary(16)"),
]


@pytest.mark.parametrize(("server", "binlog"), SERVER_SPELLINGS)
def test_binlog_form_is_what_the_table_map_says_of_a_column_type(server, binlog):
    assert binlog_form(server) == binlog


def test_refine_carries_the_servers_column_type_verbatim():
    """columnTypes is the server's own text (display widths, ZEROFILL, lengths, float(M,D),
    geometry subtypes), wherever it says what the table map says."""
    types = {f"c{i}": binlog for i, (_, binlog) in enumerate(SERVER_SPELLINGS)}
    live = {f"c{i}": server for i, (server, _) in enumerate(SERVER_SPELLINGS)}
    assert refine(types, live) == live


def test_refine_keeps_the_table_maps_spelling_where_the_live_schema_differs():
    """A DDL the collector has not reached yet: the row was written under the old type."""
    types = {"id": "int", "v": "varchar", "gone": "date", "f": "float"}
    live = {"id": "bigint(20)", "v": "varchar(10)", "f": "double(10,2)"}
    assert refine(types, live) == {"id": "int", "v": "varchar(10)", "gone": "date", "f": "float"}
