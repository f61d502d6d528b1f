"""The state a replay resumes from, and what its status shows: typed records in a topic.

A run's records live in the compacted topic ``<instance topic>.replay-progress``, keyed so that
compaction keeps the latest of each:

* ``run/<run_id>``: the ``RunSpec`` (what was asked, the tables, the query start), written
  once before the first row;
* ``table/<run_id>/<schema>.<table>``: a ``TableProgress``, written in the same Kafka
  transaction as the rows of each chunk, so "rows done" and "last key" are exactly what a
  ``read_committed`` reader of the instance topic sees;
* ``state/<run_id>``: the ``RunState`` (running, done, failed, cancelled);
* ``cancel/<run_id>``: a cancel request from another process (the web admin).

``last_key`` means "every row with a key up to and including this one is published": a
resumed run selects keys strictly greater. ``None`` means no row of the table is published.
Pure logic: the fold from records to a status is tested without Kafka.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from simple_binlog.errors import ContractError
from simple_binlog.values import JsonScalar

TableState = Literal["pending", "running", "done", "failed", "cancelled"]
RunStateName = Literal["running", "done", "failed", "cancelled"]


def now_ms() -> int:
    return int(dt.datetime.now(dt.UTC).timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class RunSpec:
    run_id: str
    instance: str
    db_prefix: str
    table_prefix: str
    condition: str | None
    execute_day: str  # YYYY-MM-DD
    query_start: int  # epoch second the run started reading; binlogOffset = this − 300 s
    batch_size: int
    workers: int
    tables: tuple[str, ...]  # "schema.table", in the order the run reads them
    replica: str | None = None
    created_ms: int = 0

    @property
    def key(self) -> bytes:
        return f"run/{self.run_id}".encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "instance": self.instance,
            "dbPrefix": self.db_prefix,
            "tablePrefix": self.table_prefix,
            "condition": self.condition,
            "executeDay": self.execute_day,
            "queryStart": self.query_start,
            "batchSize": self.batch_size,
            "workers": self.workers,
            "tables": list(self.tables),
            "replica": self.replica,
            "createdMs": self.created_ms,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunSpec:
        return cls(
            run_id=str(raw["runId"]),
            instance=str(raw["instance"]),
            db_prefix=str(raw["dbPrefix"]),
            table_prefix=str(raw["tablePrefix"]),
            condition=raw.get("condition"),
            execute_day=str(raw["executeDay"]),
            query_start=int(raw["queryStart"]),
            batch_size=int(raw["batchSize"]),
            workers=int(raw.get("workers", 1)),
            tables=tuple(str(t) for t in raw["tables"]),
            replica=raw.get("replica"),
            created_ms=int(raw.get("createdMs", 0)),
        )

    def worker_tables(self, worker: int) -> tuple[str, ...]:
        """The tables worker ``worker`` reads: dealt round robin, the same on every resume."""
        return self.tables[worker :: self.workers]


@dataclass(frozen=True, slots=True)
class TableProgress:
    run_id: str
    table: str  # "schema.table"
    key_columns: tuple[str, ...]
    last_key: tuple[JsonScalar, ...] | None = None
    rows_done: int = 0
    estimated_rows: int = 0
    state: TableState = "pending"
    updated_ms: int = 0
    error: str | None = None

    @property
    def key(self) -> bytes:
        return f"table/{self.run_id}/{self.table}".encode()

    def advanced(self, last_key: tuple[JsonScalar, ...], rows: int) -> TableProgress:
        return replace(
            self,
            last_key=last_key,
            rows_done=self.rows_done + rows,
            state="running",
            updated_ms=now_ms(),
        )

    def finished(self, state: TableState, error: str | None = None) -> TableProgress:
        return replace(self, state=state, error=error, updated_ms=now_ms())

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "table": self.table,
            "keyColumns": list(self.key_columns),
            "lastKey": None if self.last_key is None else list(self.last_key),
            "rowsDone": self.rows_done,
            "estimatedRows": self.estimated_rows,
            "state": self.state,
            "updatedMs": self.updated_ms,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TableProgress:
        last = raw.get("lastKey")
        return cls(
            run_id=str(raw["runId"]),
            table=str(raw["table"]),
            key_columns=tuple(raw["keyColumns"]),
            last_key=None if last is None else tuple(last),
            rows_done=int(raw["rowsDone"]),
            estimated_rows=int(raw.get("estimatedRows", 0)),
            state=raw["state"],
            updated_ms=int(raw.get("updatedMs", 0)),
            error=raw.get("error"),
        )


@dataclass(frozen=True, slots=True)
class RunState:
    run_id: str
    state: RunStateName
    updated_ms: int = 0
    error: str | None = None

    @property
    def key(self) -> bytes:
        return f"state/{self.run_id}".encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "state": self.state,
            "updatedMs": self.updated_ms,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunState:
        return cls(str(raw["runId"]), raw["state"], int(raw.get("updatedMs", 0)), raw.get("error"))


def cancel_key(run_id: str) -> bytes:
    return f"cancel/{run_id}".encode()


@dataclass
class RunStatus:
    """Everything known about one run, folded from its records."""

    spec: RunSpec
    tables: dict[str, TableProgress] = field(default_factory=dict)
    state: RunState | None = None
    cancel_requested: bool = False

    @property
    def rows_done(self) -> int:
        return sum(t.rows_done for t in self.tables.values())

    @property
    def estimated_rows(self) -> int:
        return sum(t.estimated_rows for t in self.tables.values())

    @property
    def state_name(self) -> str:
        return self.state.state if self.state is not None else "running"

    def to_json(self) -> dict[str, Any]:
        return {
            **self.spec.to_json(),
            "state": self.state_name,
            "error": self.state.error if self.state else None,
            "cancelRequested": self.cancel_requested,
            "rowsDone": self.rows_done,
            "estimatedRows": self.estimated_rows,
            "tableProgress": [self.tables[name].to_json() for name in sorted(self.tables)],
        }


def fold(records: Iterable[tuple[bytes, dict[str, Any] | None]]) -> dict[str, RunStatus]:
    """Runs by id from ``(key, value)`` records in topic order; the latest record of a key wins.

    A record whose run spec is missing (compacted away or never written) is ignored; a
    malformed one raises ContractError naming its key.
    """
    specs: dict[str, RunSpec] = {}
    tables: dict[str, dict[str, TableProgress]] = {}
    states: dict[str, RunState] = {}
    cancels: set[str] = set()
    for key_bytes, value in records:
        key = key_bytes.decode("utf-8", "replace")
        kind, _, rest = key.partition("/")
        try:
            if value is None:
                continue  # a tombstone
            if kind == "run":
                specs[rest] = RunSpec.from_json(value)
            elif kind == "table":
                progress = TableProgress.from_json(value)
                tables.setdefault(progress.run_id, {})[progress.table] = progress
            elif kind == "state":
                states[rest] = RunState.from_json(value)
            elif kind == "cancel":
                cancels.add(rest)
        except (KeyError, TypeError, ValueError) as exc:
            raise ContractError(
                f"the replay progress record {key!r} is malformed ({exc})."
            ) from None
    return {
        run_id: RunStatus(
            spec=spec,
            tables=tables.get(run_id, {}),
            state=states.get(run_id),
            cancel_requested=run_id in cancels,
        )
        for run_id, spec in specs.items()
    }
