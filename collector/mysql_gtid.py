"""MySQL GTID sets as a typed resume position: ``uuid:1-5:7,uuid2:1-3`` and, from MySQL 8.4,
tagged GTIDs ``uuid:tag:1-3`` (MySQL prints one uuid's tags after its untagged intervals:
``uuid:1-5:tag1:1-3``). Pure logic.

A MariaDB position lists one ``domain-server-seq`` per domain (``collector.position``); a
MySQL position is the set of every transaction executed, as ``gtid_executed`` says and as
COM_BINLOG_DUMP_GTID takes it. The text is canonical: uuids in lower case and sorted,
untagged intervals first, tags sorted, intervals merged.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from simple_binlog.errors import ContractError

_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)
_TAG = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_INTERVAL = re.compile(r"(\d+)(?:-(\d+))?")

Key = tuple[str, str]  # (uuid, tag; "" untagged)


def is_mysql_gtid(text: str) -> bool:
    """Whether a GTID or GTID position is MySQL's (uuid-based) rather than MariaDB's."""
    return ":" in text


def _uuid(text: str) -> str:
    if not _UUID.fullmatch(text):
        raise ContractError(f"{text!r} is not a server uuid of a MySQL GTID.")
    plain = text.replace("-", "").lower()
    return f"{plain[:8]}-{plain[8:12]}-{plain[12:16]}-{plain[16:20]}-{plain[20:]}"


def uuid_text(raw: bytes) -> str:
    """The 16 bytes of a server uuid (GTID events) as text."""
    return _uuid(raw.hex())


@dataclass(frozen=True, slots=True)
class Gtid:
    """One MySQL transaction: ``uuid:gno`` or ``uuid:tag:gno``."""

    uuid: str
    gno: int
    tag: str = ""

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"

    @classmethod
    def parse(cls, text: str) -> Gtid:
        parts = text.strip().split(":")
        if len(parts) not in (2, 3) or not parts[-1].isdigit() or int(parts[-1]) < 1:
            raise ContractError(f"{text!r} is not a MySQL GTID (uuid:number or uuid:tag:number).")
        tag = parts[1] if len(parts) == 3 else ""
        if tag and not _TAG.fullmatch(tag):
            raise ContractError(f"{text!r} has a malformed GTID tag.")
        return cls(_uuid(parts[0]), int(parts[-1]), tag.lower())


class GtidSet:
    """A set of MySQL GTIDs: per (uuid, tag), sorted disjoint closed intervals."""

    __slots__ = ("_intervals",)

    def __init__(self, intervals: dict[Key, list[tuple[int, int]]] | None = None) -> None:
        self._intervals: dict[Key, list[tuple[int, int]]] = {}
        for key, ranges in (intervals or {}).items():
            for start, end in ranges:
                self._add_range(key, start, end)

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        """``uuid:1-5:7,uuid:tag:1-3`` (also ``uuid:1-5:tag:1-3``; empty: the empty set)."""
        result = cls()
        for entry in filter(None, (part.strip() for part in text.replace("\n", "").split(","))):
            parts = entry.split(":")
            uuid, tag = _uuid(parts[0]), ""
            if len(parts) < 2:
                raise ContractError(f"{entry!r} is not a MySQL GTID set entry (uuid:intervals).")
            for part in parts[1:]:
                interval = _INTERVAL.fullmatch(part)
                if interval is None:
                    if not _TAG.fullmatch(part):
                        raise ContractError(f"{entry!r} has a malformed GTID interval or tag.")
                    tag = part.lower()
                    continue
                start = int(interval.group(1))
                end = int(interval.group(2) or start)
                if start < 1 or end < start:
                    raise ContractError(f"{entry!r} has an empty GTID interval.")
                result._add_range((uuid, tag), start, end)
        return result

    def _add_range(self, key: Key, start: int, end: int) -> None:
        ranges = self._intervals.setdefault(key, [])
        ranges.append((start, end))
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for low, high in ranges:
            if merged and low <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        self._intervals[key] = merged

    def intervals(self) -> list[tuple[str, str, list[tuple[int, int]]]]:
        """(uuid, tag, closed intervals) per entry, in the canonical order."""
        keys = sorted(self._intervals)
        return [(uuid, tag, list(self._intervals[(uuid, tag)])) for uuid, tag in keys]

    def issubset(self, other: GtidSet) -> bool:
        return all(
            any(low >= l2 and high <= h2 for l2, h2 in other._intervals.get(key, []))
            for key, ranges in self._intervals.items()
            for low, high in ranges
        )

    def add(self, gtid: Gtid) -> GtidSet:
        """A new set with ``gtid`` in it."""
        result = GtidSet(self._intervals)
        result._add_range((gtid.uuid, gtid.tag), gtid.gno, gtid.gno)
        return result

    def __contains__(self, gtid: Gtid) -> bool:
        return any(
            low <= gtid.gno <= high for low, high in self._intervals.get((gtid.uuid, gtid.tag), [])
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GtidSet) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        entries = []
        for uuid in sorted({uuid for uuid, _ in self._intervals}):
            parts = [uuid]
            for tag in sorted(tag for u, tag in self._intervals if u == uuid):
                if tag:
                    parts.append(tag)
                parts.extend(
                    str(low) if low == high else f"{low}-{high}"
                    for low, high in self._intervals[(uuid, tag)]
                )
            entries.append(":".join(parts))
        return ",".join(entries)


def advance(position: str, gtid: str) -> str:
    """The GTID set ``position`` after transaction ``gtid`` completed."""
    return str(GtidSet.parse(position).add(Gtid.parse(gtid)))


def validate_position(text: str) -> None:
    """ContractError in one sentence unless ``text`` is a MySQL GTID set."""
    GtidSet.parse(text)


# -- the binary form: COM_BINLOG_DUMP_GTID's payload and PREVIOUS_GTIDS events -------------------
#
# n_sids (8 bytes), then per (uuid, tag): the uuid's 16 bytes, [tag], n_intervals (8), and each
# interval as start and end-exclusive (8 + 8). MySQL 8.3+ (sql/rpl_gtid_set.cc,
# encode_nsids_format) writes a set holding any tag in the "tagged" format: the first 8 bytes
# are (1 << 56) | (n_sids << 8) | 1, and every entry carries its tag (a serialization-library
# length: for up to 32 characters one byte, length << 1; 0 untagged). Servers before 8.3 know
# only the untagged format, which is kept for a set without tags.

_TAGGED = 1


def encode(gtids: GtidSet) -> bytes:
    """The binary form of ``gtids`` (untagged format unless a tag is in it)."""
    entries = gtids.intervals()
    tagged = any(tag for _, tag, _ in entries)
    count = len(entries)
    parts = [struct.pack("<Q", (_TAGGED << 56) | (count << 8) | _TAGGED if tagged else count)]
    for uuid, tag, ranges in entries:
        parts.append(bytes.fromhex(uuid.replace("-", "")))
        if tagged:
            parts.append(bytes([len(tag) << 1]) + tag.encode("ascii"))
        parts.append(struct.pack("<Q", len(ranges)))
        parts.extend(struct.pack("<QQ", low, high + 1) for low, high in ranges)
    return b"".join(parts)


def decode(data: bytes) -> GtidSet:
    """A GTID set from its binary form (either format); ContractError if malformed."""
    try:
        return _decode(data)
    except (struct.error, IndexError, UnicodeDecodeError):
        raise ContractError("a binary GTID set is truncated or malformed.") from None


def _decode(data: bytes) -> GtidSet:
    raw = struct.unpack_from("<Q", data, 0)[0]
    tagged = raw >> 56 == _TAGGED
    if raw >> 56 not in (0, _TAGGED):
        raise ContractError(f"a binary GTID set has an unknown format {raw >> 56}.")
    count = (raw >> 8) & ((1 << 48) - 1) if tagged else raw
    offset, result = 8, GtidSet()
    for _ in range(count):
        if len(data) < offset + 16:
            raise IndexError
        uuid = uuid_text(data[offset : offset + 16])
        offset += 16
        tag = ""
        if tagged:
            length = data[offset]
            if length & 1:
                raise ContractError("a binary GTID set has a tag longer than a GTID tag can be.")
            tag = data[offset + 1 : offset + 1 + (length >> 1)].decode("ascii").lower()
            offset += 1 + (length >> 1)
        (intervals,) = struct.unpack_from("<Q", data, offset)
        offset += 8
        for _ in range(intervals):
            low, end = struct.unpack_from("<QQ", data, offset)
            offset += 16
            if low < 1 or end <= low:
                raise ContractError("a binary GTID set has an empty interval.")
            result._add_range((uuid, tag), low, end - 1)
    return result
