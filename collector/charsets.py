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
armscii8, dec8, eucjpms, geostd8, hp8, keybcs2, macce and swe7 have no Python codec at all).
So:

* a single-byte character set is decoded by a table of its 256 bytes that ``learn`` has the
  server convert once per connection (a byte the set does not define is ``?``, as a SELECT
  gives it); codec ``mysql-<set>``;
* ucs2 and utf16 are big-endian UTF-16, utf16le little-endian, utf32 big-endian UTF-32, all
  without a byte-order mark; utf8mb3 and utf8mb4 UTF-8;
* euckr is cp949 (MySQL's euckr holds the UHC extension Python's euc_kr lacks); gbk, gb2312
  and cp932 are Python's codecs; sjis, ujis and big5 are Python's with MySQL's differences
  patched in (``_PATCHED``): 0x815F (sjis) and 0xA1C0 (ujis) are a backslash, not U+FF3C;
  ujis's user-defined rows are the Private Use Area; big5's ETEN extensions 0xF9D6-0xF9DC
  are read, and the seven codes MariaDB's table leaves empty are U+FFFD, as a SELECT returns
  them; eucjpms is decoded here (``_eucjpms_character``). Each two-byte code of these sets
  (and the three-byte ones of ujis and eucjpms) was compared with the server's conversion.

Without a server (a recording), latin1 is ``mysql-latin1`` (cp1252 with the five C1 bytes)
and other single-byte sets their Python codec. ``tests/integration/mirror/test_types_end_to_end.py``
compares every character set the stack's server offers with the server's own conversion to
utf8mb4, byte for byte.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
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
    "ujis": "mysql-ujis",
    "big5": "mysql-big5",
    "eucjpms": "mysql-eucjpms",
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


@dataclass(frozen=True)
class _Patched:
    """A multi-byte set read as Python's ``base`` codec reads it, except for the codes in
    ``overrides`` (code → the server's text) and the codes ``user_defined`` maps (those
    ``base`` refuses: MySQL's user-defined area, extensions)."""

    base: str
    overrides: dict[bytes, str]
    user_defined: Callable[[bytes], tuple[str, int] | None] | None = None


def _ujis_user_defined(rest: bytes) -> tuple[str, int] | None:
    """ujis's user-defined rows 0xF5-0xFE, which MySQL reads as the Private Use Area:
    two-byte codes from U+E000, three-byte (0x8F first) from U+E3AC, 94 per row."""
    three = rest[:1] == b"\x8f"
    code, start = (rest[1:3], 0xE3AC) if three else (rest[:2], 0xE000)
    if len(code) == 2 and 0xF5 <= code[0] <= 0xFE and 0xA1 <= code[1] <= 0xFE:
        return chr(start + (code[0] - 0xF5) * 94 + (code[1] - 0xA1)), 3 if three else 2
    return None


# big5's ETEN extensions MySQL reads (Python's big5 does not).
_BIG5_EXTENSIONS = dict(
    zip((bytes([0xF9, b]) for b in range(0xD6, 0xDD)), "碁銹裏墻恒粧嫺", strict=True)
)


def _big5_extension(rest: bytes) -> tuple[str, int] | None:
    text = _BIG5_EXTENSIONS.get(rest[:2])
    return None if text is None else (text, 2)


_PATCHED = {
    # 0x815F: MySQL reads a backslash, Python U+FF3C.
    "sjis": _Patched("shift_jis", {b"\x81\x5f": "\\"}),
    "ujis": _Patched("euc_jp", {b"\xa1\xc0": "\\"}, _ujis_user_defined),
    # Codes MariaDB's big5 table leaves without a character: a SELECT returns U+FFFD.
    "big5": _Patched(
        "big5",
        {
            bytes.fromhex(code): "\ufffd"
            for code in ("a15a", "a1c3", "a1c5", "a1fe", "a240", "a2cc", "a2ce")
        },
        _big5_extension,
    ),
}


# eucjpms (eucJP-ms): its two-byte codes are JIS X 0208 as cp932 reads them (NEC and IBM
# extensions, ～ as U+FF5E), its three-byte codes JIS X 0212 as euc_jp reads them, except two
# and the IBM extensions in rows 0xF3-0xF4 (below, in code order from 0x8FF3F3), and the
# user-defined rows 0xF5-0xFE of both are the Private Use Area as in ujis. Python has no
# codec of it; each of its codes was compared with the server's conversion.
_EUCJPMS_IBM = (
    "\u2170\u2171\u2172\u2173\u2174\u2175\u2176\u2177\u2178\u2179\u2160\u2161\u2162"
    "\u2163\u2164\u2165\u2166\u2167\u2168\u2169\uff07\uff02\u3231\u2116\u2121\u70bb"
    "\u4efc\u50f4\u51ec\u5307\u5324\ufa0e\u548a\u5759\ufa0f\ufa10\u589e\u5bec\u5cf5"
    "\u5d53\ufa11\u5fb7\u6085\u6120\u654e\u663b\u6665\ufa12\uf929\u6801\ufa13\ufa14"
    "\u6a6b\u6ae2\u6df8\u6df2\u7028\ufa15\ufa16\u7501\u7682\u769e\ufa17\u7930\ufa18"
    "\ufa19\ufa1a\ufa1b\u7ae7\ufa1c\ufa1d\u7da0\u7dd6\ufa1e\u8362\ufa1f\u85b0\ufa20"
    "\ufa21\u8807\ufa22\u8b7f\u8cf4\u8d76\ufa23\ufa24\ufa25\u90de\ufa26\u9115\ufa27"
    "\ufa28\u9592\uf9dc\ufa29\u973b\u974d\u9751\ufa2a\ufa2b\ufa2c\u999e\u9ad9\u9b72"
    "\ufa2d\u9ed1"
)
_EUCJPMS_JIS0212 = {b"\xa2\xb7": "\uff5e", b"\xa2\xc3": "\uffe4"}


def _eucjpms_character(raw: bytes, at: int) -> tuple[str, int]:
    lead = raw[at]
    if lead < 0x80:
        return chr(lead), 1
    if lead == 0x8E:  # half-width katakana
        return raw[at : at + 2].decode("euc_jp"), 2
    if lead == 0x8F:
        code = raw[at + 1 : at + 3]
        if len(code) == 2 and code[0] in (0xF3, 0xF4) and 0xA1 <= code[1] <= 0xFE:
            index = (code[0] - 0xF3) * 94 + code[1] - 0xA1 - (0xF3 - 0xA1)
            if 0 <= index < len(_EUCJPMS_IBM):
                return _EUCJPMS_IBM[index], 3
        found = _ujis_user_defined(raw[at : at + 3]) or (
            (_EUCJPMS_JIS0212[code], 3) if code in _EUCJPMS_JIS0212 else None
        )
        return found or (raw[at : at + 3].decode("euc_jp"), 3)
    found = _ujis_user_defined(raw[at : at + 2])
    if found is not None:
        return found
    if len(raw) < at + 2 or not (0xA1 <= lead <= 0xFE and 0xA1 <= raw[at + 1] <= 0xFE):
        raise UnicodeDecodeError("eucjpms", raw, at, at + 1, "not a character")
    row, cell = lead - 0x80, raw[at + 1] - 0x80  # JIS X 0208, to Shift_JIS for cp932
    first = ((row + 1) >> 1) + (0x70 if row <= 0x5E else 0xB0)
    second = cell + (0x1F if cell <= 0x5F else 0x20) if row % 2 else cell + 0x7E
    return bytes([first, second]).decode("cp932"), 2


def _eucjpms_decode(data: Any, errors: str = "strict") -> tuple[str, int]:
    raw = bytes(data)
    if raw.isascii():
        return raw.decode("ascii"), len(raw)
    pieces: list[str] = []
    at = 0
    while at < len(raw):
        text, size = _eucjpms_character(raw, at)
        pieces.append(text)
        at += size
    return "".join(pieces), len(raw)


def _eucjpms_encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
    raise UnicodeEncodeError("eucjpms", text, 0, len(text), "the collector only decodes")


def _patched_decode(patched: _Patched, data: Any, errors: str = "strict") -> tuple[str, int]:
    raw = bytes(data)
    if not any(code in raw for code in patched.overrides):
        return _decode_with(patched, raw, errors), len(raw)
    # An override's bytes occur (perhaps only inside other codes): character by character,
    # so a code is only ever matched where a character starts.
    pieces: list[str] = []
    start = 0
    decoder = codecs.getincrementaldecoder(patched.base)("strict")
    position = 0
    while position < len(raw):
        code = raw[position : position + 2]
        if position == start and code in patched.overrides:
            pieces.append(patched.overrides[code])
            position = start = position + 2
            continue
        try:
            piece = decoder.decode(raw[position : position + 1])
        except UnicodeDecodeError:
            decoder.reset()
            pieces.append(_decode_with(patched, raw[start:], errors, one=True))
            position = start = start + _consumed(patched, raw[start:])
            continue
        position += 1
        if piece:
            pieces.append(piece)
            start = position
    return "".join(pieces), len(raw)


def _user_defined_or_fail(patched: _Patched, rest: bytes) -> tuple[str, int]:
    found = patched.user_defined(rest) if patched.user_defined else None
    if found is None:
        rest[:4].decode(patched.base)  # raises the codec's own UnicodeDecodeError
        raise UnicodeDecodeError(patched.base, rest, 0, 1, "not a character")
    return found


def _consumed(patched: _Patched, rest: bytes) -> int:
    return _user_defined_or_fail(patched, rest)[1]


def _decode_with(patched: _Patched, raw: bytes, errors: str, one: bool = False) -> str:
    """``raw`` by the base codec, the codes it refuses by ``user_defined`` (``one``: only
    the code at the start, which the base refused)."""
    if one:
        return _user_defined_or_fail(patched, raw)[0]
    pieces: list[str] = []
    position = 0
    while position < len(raw):
        try:
            pieces.append(raw[position:].decode(patched.base, errors))
            break
        except UnicodeDecodeError as error:
            pieces.append(raw[position : position + error.start].decode(patched.base))
            text, size = _user_defined_or_fail(patched, raw[position + error.start :])
            pieces.append(text)
            position += error.start + size
    return "".join(pieces)


def _search(name: str) -> codecs.CodecInfo | None:
    normal = name.replace("_", "-")
    if normal == "mysql-eucjpms":
        return codecs.CodecInfo(_eucjpms_encode, _eucjpms_decode, name=normal)
    if normal.startswith(_TABLE_PREFIX) and normal[len(_TABLE_PREFIX) :] in _PATCHED:
        patched = _PATCHED[normal[len(_TABLE_PREFIX) :]]
        return codecs.CodecInfo(
            codecs.lookup(patched.base).encode, partial(_patched_decode, patched), name=normal
        )
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
