"""Which character set a binlog collation id names, and how its bytes become text exactly.

A table map gives each text column's collation as a number. pymysql's table of them holds
only the collations a client may connect with: not ucs2, utf16, utf16le or utf32 (which are
no connection character sets), nor MariaDB's own (``*_nopad_*``, ``utf8mb4_unicode_520_ci``
and many more: 184 of MariaDB 10.11's 322). So the collector learns the numbers from the
server it reads (``learn``: information_schema, once per connection) and falls back to
pymysql's table for a recording read without a server.

The bytes must become the text a SELECT returns: the server's own conversion to utf8mb4.
Python's codec of the same name is not always that (latin1 is MySQL's cp1252 with the five
bytes cp1252 leaves undefined as C1 controls; Python's cp866, koi8u differ in a few bytes;
armscii8, dec8, geostd8, hp8, keybcs2, macce and swe7 have no Python codec at all). So:

* a single-byte character set is decoded by a table of its 256 bytes that ``learn`` has the
  server convert once per connection (a byte the set does not define is ``?``, as a SELECT
  gives it); codec ``mysql-<set>``;
* ucs2 and utf16 are big-endian UTF-16, utf16le little-endian, utf32 big-endian UTF-32, all
  without a byte-order mark; utf8mb3 and utf8mb4 UTF-8;
* euckr is cp949 (MySQL's euckr holds the UHC extension Python's euc_kr lacks); sjis is
  Python's shift_jis except 0x815F, which MySQL reads as ``\\`` (U+005C), Python as ``＼``
  (U+FF3C); gbk, gb2312 and cp932 are Python's codecs (each of their two-byte codes was
  compared with the server's conversion); big5, ujis and eucjpms are not exact yet (see
  docs/simplebinlog.md).

Without a server (a recording), latin1 is ``mysql-latin1`` (cp1252 with the five C1 bytes)
and other single-byte sets their Python codec. ``tests/integration/mirror/test_types_end_to_end.py``
compares every character set the stack's server offers with the server's own conversion to
utf8mb4, byte for byte.
"""

from __future__ import annotations

import codecs
import logging
from typing import Any

import pymysql
from pymysql.charset import charset_by_id, charset_by_name

from simple_binlog.errors import ContractError, UnsupportedTypeError

log = logging.getLogger(__name__)

BINARY_COLLATION = 63

# Collation id → character set name, as servers read by this process reported them.
_LEARNED: dict[int, str] = {}
# Single-byte character set → the text of each of its 256 bytes, as the server converts them.
_BYTE_TABLES: dict[str, str] = {}
_TABLE_PREFIX = "mysql-"

# Character sets whose Python codec differs from the server's conversion in name or in
# bytes (see the module docstring).
_CODEC = {
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
    "latin1": "mysql-latin1",  # without a server; with one, its own table
    "euckr": "cp949",  # MySQL's euckr holds the UHC extension (갂 is 0x8141)
    "sjis": "mysql-sjis",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
}

# cp1252 with its five undefined bytes mapped to the C1 controls of the same number, as MySQL's
# latin1 maps them (strings/ctype-latin1.c).
_LATIN1_TABLE = "".join(
    bytes([byte]).decode("cp1252", errors="ignore") or chr(byte) for byte in range(256)
)
_LATIN1_ENCODING = codecs.charmap_build(_LATIN1_TABLE)


def _latin1_decode(data: Any, errors: str = "strict") -> tuple[str, int]:
    return codecs.charmap_decode(data, errors, _LATIN1_TABLE)


def _latin1_encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
    return codecs.charmap_encode(text, errors, _LATIN1_ENCODING)


def _table_codec(charset: str) -> codecs.CodecInfo:
    """A codec reading ``_BYTE_TABLES[charset]`` when called (``learn`` may refresh it after
    Python's codec registry cached the codec)."""

    def decode(data: Any, errors: str = "strict") -> tuple[str, int]:
        return codecs.charmap_decode(data, errors, _BYTE_TABLES[charset])

    def encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
        return codecs.charmap_encode(text, errors, codecs.charmap_build(_BYTE_TABLES[charset]))

    return codecs.CodecInfo(encode, decode, name=_TABLE_PREFIX + charset)


def _sjis_decode(data: Any, errors: str = "strict") -> tuple[str, int]:
    text, consumed = codecs.lookup("shift_jis").decode(data, errors)
    return text.replace("\uff3c", "\\"), consumed  # only 0x815F decodes to U+FF3C


def _search(name: str) -> codecs.CodecInfo | None:
    normal = name.replace("_", "-")
    if normal == "mysql-sjis":
        return codecs.CodecInfo(codecs.lookup("shift_jis").encode, _sjis_decode, name=normal)
    if normal == "mysql-latin1" and "latin1" not in _BYTE_TABLES:
        return codecs.CodecInfo(_latin1_encode, _latin1_decode, name="mysql-latin1")
    if normal.startswith(_TABLE_PREFIX) and normal[len(_TABLE_PREFIX) :] in _BYTE_TABLES:
        return _table_codec(normal[len(_TABLE_PREFIX) :])
    return None


codecs.register(_search)

_ALL_BYTES = bytes(range(256)).hex()


def learn(connection: Any) -> None:
    """Record the collation ids of the server behind ``connection`` (a pymysql connection)
    and how it converts each byte of each single-byte character set to utf8mb4. A server
    that does not answer (a proxy, a stand-in) leaves pymysql's table and Python's codecs in
    use, with a warning; a collation neither knows then stops its table by name."""
    try:
        _learn(connection)
    except pymysql.err.Error as error:
        log.warning(
            "The source did not say which character set each collation is (%s); the "
            "collector uses pymysql's table of them.",
            error,
        )


def _learn(connection: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL"
        )
        _LEARNED.update({int(number): str(name) for number, name in cursor.fetchall()})
        cursor.execute(
            "SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS "
            "WHERE MAXLEN = 1 AND CHARACTER_SET_NAME <> 'binary'"
        )
        single_byte = [str(name) for (name,) in cursor.fetchall()]
        if not single_byte:
            return
        # HEX: the client decodes nothing; one query for every set.
        cursor.execute(
            "SELECT "
            + ", ".join(
                f"HEX(CONVERT(CAST(x'{_ALL_BYTES}' AS CHAR CHARACTER SET {name}) USING utf8mb4))"
                for name in single_byte
            )
        )
        row = cursor.fetchone()
    for name, converted in zip(single_byte, row, strict=True):
        table = bytes.fromhex(str(converted)).decode("utf-8", "surrogatepass")
        if len(table) == 256:  # one character per byte, as a single-byte set converts
            _BYTE_TABLES[name] = table


def charset_name(collation: int) -> str:
    """The character set of a collation id: ``binary`` for 63."""
    if collation == BINARY_COLLATION:
        return "binary"
    name = _LEARNED.get(collation)
    if name is not None:
        return name
    try:
        return str(charset_by_id(collation).name)  # type: ignore[attr-defined]
    except KeyError:
        raise ContractError(
            f"the binlog names collation {collation}, which neither the server read nor "
            "pymysql knows; the collector cannot tell its character set."
        ) from None


def python_codec(charset: str) -> str:
    """The Python codec that turns the character set's bytes into the text the server's own
    conversion to utf8mb4 gives."""
    if charset in _BYTE_TABLES:
        return _TABLE_PREFIX + charset
    codec = _CODEC.get(charset)
    if codec is not None:
        return codec
    known = charset_by_name(charset)  # pymysql's codec name for the set, if it has one
    codec = str(known.encoding) if known is not None else charset
    try:
        codecs.lookup(codec)
    except LookupError:
        raise UnsupportedTypeError(
            f"the collector cannot decode character set {charset} (no exact decoding of it "
            "is known); convert the column to utf8mb4 or leave the table out."
        ) from None
    return codec
