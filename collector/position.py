"""The collector's resume state, committed in the same Kafka transaction as the rows it covers.

``gtid`` is the GTID position of the last MySQL transaction published completely: MariaDB's
``domain-server-seq`` list, or a MySQL GTID set (``uuid:1-42``, tagged ``uuid:tag:1-3``,
``collector.mysql_gtid``); the text tells them apart (a MySQL GTID has colons). Reading
resumes with the transaction after it. A MySQL transaction too large for one Kafka
transaction is published in parts; then ``partial`` names
that transaction's GTID and ``rows_done`` how many of its rows (counted across all its rows
events, in binlog order) are already published, so a restart skips exactly those. The offset
state is the generator's state after the last published row: resuming there reproduces the
following binlogOffsets exactly.

"After the last published item", as bytewax's snapshot() puts it: never "at".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from collector import mysql_gtid
from simple_binlog.errors import ContractError
from simple_binlog.offsets import OffsetState

FORMAT = 1
_ONE_GTID = re.compile(r"\d+-\d+-\d+")


def parse_gtid(gtid: str) -> tuple[int, int, int]:
    """``"0-1-42"`` → (domain, server, sequence)."""
    try:
        domain, server, sequence = (int(part) for part in gtid.split("-"))
    except ValueError:
        raise ContractError(f"{gtid!r} is not a MariaDB GTID (domain-server-sequence).") from None
    return domain, server, sequence


def advance_gtid_position(position: str, gtid: str) -> str:
    """The GTID position after ``gtid`` completed: its domain's entry is replaced."""
    if (
        _ONE_GTID.fullmatch(gtid)
        and _ONE_GTID.fullmatch(position)
        and position.partition("-")[0] == gtid.partition("-")[0]
    ):
        return gtid  # one domain, the usual case: once per transaction, so kept cheap
    if not gtid:
        return position  # a transaction without a GTID (MySQL's anonymous ones)
    if mysql_gtid.is_mysql_gtid(gtid):
        return mysql_gtid.advance(position, gtid)
    domain = parse_gtid(gtid)[0]
    entries = {parse_gtid(entry)[0]: entry for entry in position.split(",") if entry}
    entries[domain] = gtid
    return ",".join(entries[d] for d in sorted(entries))


@dataclass(frozen=True, slots=True)
class CollectorPosition:
    instance: str
    gtid: str
    offset_state: OffsetState
    partial: str | None = None
    rows_done: int = 0
    file: str = ""
    pos: int = 0
    epoch: int = 0

    def after_row(
        self, gtid: str, rows_done: int, file: str, pos: int, offset: int
    ) -> CollectorPosition:
        """Inside a transaction: ``rows_done`` rows of ``gtid`` are published."""
        return CollectorPosition(
            self.instance, self.gtid, OffsetState(offset), gtid, rows_done, file, pos, self.epoch
        )

    def after_transaction(
        self, gtid: str, file: str, pos: int, last_offset: int | None = None
    ) -> CollectorPosition:
        """``gtid`` is published completely (its last row's offset ``last_offset``, if rows
        were published since this position)."""
        return CollectorPosition(
            self.instance,
            advance_gtid_position(self.gtid, gtid),
            self.offset_state if last_offset is None else OffsetState(last_offset),
            None,
            0,
            file,
            pos,
            self.epoch,
        )

    def rows_to_skip(self, gtid: str) -> int:
        """Rows of ``gtid`` published before a restart (0 unless it was split)."""
        return self.rows_done if gtid == self.partial else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "instance": self.instance,
            "gtid": self.gtid,
            "lastOffset": self.offset_state.last_offset,
            "partial": self.partial,
            "rowsDone": self.rows_done,
            "file": self.file,
            "pos": self.pos,
            "epoch": self.epoch,
        }

    @classmethod
    def from_json(cls, document: Any) -> CollectorPosition:
        """Validate a stored position; ContractError in one sentence if anything is off."""

        def field(name: str, kind: type, optional: bool = False) -> Any:
            if not isinstance(document, dict) or name not in document:
                raise ContractError(f"a stored collector position is malformed: no '{name}'.")
            value = document[name]
            if (value is None and optional) or (
                isinstance(value, kind) and not isinstance(value, bool)
            ):
                return value
            raise ContractError(f"a stored collector position has a malformed '{name}'.")

        if not isinstance(document, dict) or "format" not in document:
            raise ContractError("a stored collector position is malformed: not a position.")
        if document["format"] != FORMAT:
            raise ContractError(f"collector position format {document['format']!r} is unknown.")
        gtid = field("gtid", str)
        if mysql_gtid.is_mysql_gtid(gtid):
            mysql_gtid.validate_position(gtid)
        else:
            for entry in filter(None, gtid.split(",")):
                parse_gtid(entry)
        partial = field("partial", str, optional=True)
        if partial is not None and mysql_gtid.is_mysql_gtid(partial):
            mysql_gtid.Gtid.parse(partial)
        elif partial is not None:
            parse_gtid(partial)
        return cls(
            instance=field("instance", str),
            gtid=gtid,
            offset_state=OffsetState(field("lastOffset", int)),
            partial=partial,
            rows_done=field("rowsDone", int),
            file=field("file", str),
            pos=field("pos", int),
            epoch=field("epoch", int),
        )
