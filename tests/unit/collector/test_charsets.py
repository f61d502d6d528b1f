"""The collector's reading of character sets without a server (``collector.charsets``): the
codecs that differ from Python's of the same name, and a clear refusal of what it cannot
name or decode. Against the server: ``tests/integration/mirror/test_types_end_to_end.py``."""

from __future__ import annotations

import pytest

from collector import charsets
from simple_binlog.errors import ContractError, UnsupportedTypeError

UCS2_GENERAL_CI = 35  # not in pymysql's table of connection collations


def test_latin1_reads_the_five_bytes_cp1252_leaves_undefined_as_c1_controls() -> None:
    every_byte = bytes(range(256))
    text = every_byte.decode(charsets.python_codec("latin1"))
    assert len(text) == 256
    assert [text[b] for b in (0x81, 0x8D, 0x8F, 0x90, 0x9D)] == [
        "\x81",
        "\x8d",
        "\x8f",
        "\x90",
        "\x9d",
    ]
    assert text[0x80] == "€" and text[0xFF] == "ÿ"
    assert text.encode(charsets.python_codec("latin1")) == every_byte


def test_sjis_reads_0x815f_as_a_backslash_as_mysql_does() -> None:
    assert bytes.fromhex("815f41").decode(charsets.python_codec("sjis")) == "\\A"
    assert "日本".encode("shift_jis").decode(charsets.python_codec("sjis")) == "日本"


@pytest.mark.parametrize(
    ("charset", "raw", "text"),
    [
        ("ucs2", b"\x00a\x00\xe9", "aé"),
        ("utf16", "😀".encode("utf-16-be"), "😀"),
        ("utf16le", "😀".encode("utf-16-le"), "😀"),
        ("utf32", "😀".encode("utf-32-be"), "😀"),
        ("euckr", bytes.fromhex("8141"), "갂"),  # the UHC extension of MySQL's euckr
        ("utf8mb3", "é".encode(), "é"),
    ],
)
def test_unicode_and_extended_sets(charset: str, raw: bytes, text: str) -> None:
    assert raw.decode(charsets.python_codec(charset)) == text


def test_a_collation_pymysql_lacks_is_named_by_the_server_or_refused() -> None:
    learned = dict(charsets._LEARNED)
    try:
        charsets._LEARNED.pop(UCS2_GENERAL_CI, None)
        with pytest.raises(ContractError, match="collation 35"):
            charsets.charset_name(UCS2_GENERAL_CI)
        charsets._LEARNED[UCS2_GENERAL_CI] = "ucs2"
        assert charsets.charset_name(UCS2_GENERAL_CI) == "ucs2"
    finally:
        charsets._LEARNED.clear()
        charsets._LEARNED.update(learned)
    assert charsets.charset_name(charsets.BINARY_COLLATION) == "binary"


def test_a_set_without_an_exact_decoding_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedTypeError, match="character set klingon8"):
        charsets.python_codec("klingon8")


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (bytes.fromhex("a4a2a1c1"), "あ～"),  # JIS X 0208 as cp932 reads it
        (bytes.fromhex("8ea1"), "｡"),  # half-width katakana
        (bytes.fromhex("8fa2b78fb0a1"), "～丂"),  # JIS X 0212
        (bytes.fromhex("8ff3f38ff4a1"), "ⅰⅢ"),  # IBM extensions
        (bytes.fromhex("f5a18ff5a141"), "\ue000\ue3acA"),  # user-defined rows
    ],
)
def test_eucjpms_reads_as_mysql_reads_it(raw: bytes, text: str) -> None:
    assert raw.decode(charsets.python_codec("eucjpms")) == text


@pytest.mark.parametrize(
    ("charset", "raw", "text"),
    [
        # An override's bytes straddling two characters are not the override.
        ("big5", bytes.fromhex("a4a2cc41"), bytes.fromhex("a4a2cc41").decode("big5")),
        ("big5", bytes.fromhex("a2cc41a451f9d6"), "\ufffdA十碁"),  # MariaDB: U+FFFD; ETEN
        ("ujis", bytes.fromhex("b0a1c0a1a1c041"), "亜澄\\A"),
        ("ujis", bytes.fromhex("f5a1fefe8ff5a18ffefe41"), "\ue000\ue3ab\ue3ac\ue757A"),
        ("sjis", bytes.fromhex("815f41"), "\\A"),
    ],
)
def test_multi_byte_sets_read_as_mysql_reads_them(charset: str, raw: bytes, text: str) -> None:
    assert raw.decode(charsets.python_codec(charset)) == text


def test_a_multi_byte_set_refuses_bytes_it_does_not_define() -> None:
    with pytest.raises(UnicodeDecodeError):
        bytes.fromhex("f9fe").decode(charsets.python_codec("big5"))
