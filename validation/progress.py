"""Where a validation run stands, stored so a crashed run resumes where it stopped.

One record per (table mirror, target): the key after which the scan goes on (wire form; None:
from the start), the rows and chunks compared so far, the candidate keys found so far
(wire form, with their kind) and whether the scan ended. It is written after every window of
chunks; a run that starts finds the record of an unfinished scan and continues after its key,
with its candidates (they are settled at the end, as if found in this run). A finished scan's
record is the last run's result.

``KafkaProgress`` keeps the records in the compacted topic ``<instance topic>.validation-
progress`` (key ``<table>/<target>``); ``MemoryProgress`` is the fake for unit tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson
from confluent_kafka import Producer

from cdc_platform.config import KafkaSettings
from cdc_platform.kafka import (
    UnknownTopicError,
    ensure_topic,
    kafka_errors,
    producer_config,
    read_to_end,
)
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.naming import topic_name
from simple_binlog.values import JsonScalar

WireKey = list[JsonScalar]


@dataclass(frozen=True, slots=True)
class ScanProgress:
    table: str
    target: str
    after: WireKey | None = None  # the scan continues after this key (None: from the start)
    rows: int = 0
    chunks: int = 0
    candidates: list[tuple[WireKey, str]] = field(default_factory=list)
    done: bool = False
    updated_ms: int = 0

    @property
    def key(self) -> bytes:
        return f"{self.table}/{self.target}".encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "target": self.target,
            "after": self.after,
            "rows": self.rows,
            "chunks": self.chunks,
            "candidates": [[key, kind] for key, kind in self.candidates],
            "done": self.done,
            "updatedMs": self.updated_ms,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ScanProgress:
        return cls(
            table=str(raw["table"]),
            target=str(raw["target"]),
            after=raw.get("after"),
            rows=int(raw.get("rows", 0)),
            chunks=int(raw.get("chunks", 0)),
            candidates=[(list(k), str(kind)) for k, kind in raw.get("candidates", [])],
            done=bool(raw.get("done", False)),
            updated_ms=int(raw.get("updatedMs", 0)),
        )

    def stamped(self) -> ScanProgress:
        return replace(self, updated_ms=int(time.time() * 1000))


class ProgressStore(Protocol):
    def load(self, table: str, target: str) -> ScanProgress | None: ...

    def save(self, progress: ScanProgress) -> None: ...


class MemoryProgress:
    """Records in a dict (unit tests; and runs that keep no record: ``keep=False``)."""

    def __init__(self) -> None:
        self.records: dict[bytes, ScanProgress] = {}
        self.saves = 0

    def load(self, table: str, target: str) -> ScanProgress | None:
        return self.records.get(f"{table}/{target}".encode())

    def save(self, progress: ScanProgress) -> None:
        self.saves += 1
        self.records[progress.key] = progress


def progress_topic(settings: KafkaSettings, instance: str) -> str:
    return f"{topic_name(settings, instance)}.validation-progress"


class KafkaProgress:
    """The records of one instance in its compacted validation-progress topic."""

    def __init__(self, settings: KafkaSettings, instance: str, timeout_s: float = 30.0) -> None:
        self._settings = settings
        self._topic = progress_topic(settings, instance)
        self._timeout_s = timeout_s
        self._producer: Producer | None = None

    def load(self, table: str, target: str) -> ScanProgress | None:
        wanted = f"{table}/{target}".encode()
        found: ScanProgress | None = None
        try:
            for record in read_to_end(self._settings, self._topic, idle_timeout_s=self._timeout_s):
                if record.key == wanted:
                    found = (
                        None
                        if record.value is None
                        else ScanProgress.from_json(orjson.loads(record.value))
                    )
        except UnknownTopicError:
            return None  # no run was ever recorded
        return found

    def save(self, progress: ScanProgress) -> None:
        if self._producer is None:
            ensure_topic(self._settings, self._topic, partitions=1, compacted=True)
            with kafka_errors(f"writing validation progress to {self._topic}"):
                self._producer = Producer(
                    producer_config(self._settings, client_id="cdc-validate-progress")
                )
        with kafka_errors(f"writing validation progress to {self._topic}"):
            self._producer.produce(
                self._topic, key=progress.key, value=orjson.dumps(progress.stamped().to_json())
            )
            left = self._producer.flush(self._timeout_s)
        if left:
            raise ServiceUnavailableError(
                f"the validation progress could not be written to {self._topic} within "
                f"{self._timeout_s:.0f} s."
            )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
