"""Where a batch component (merge) reads a logical table's live MySQL shape and its rows per
day: one interface, ``LiveTableSource``, chosen with the configuration store
(``open_live_tables``, by ``config_store.source``):

- ``file``: ``cdc_platform.mysql_schema.LiveTables`` reads MySQL directly, with the
  instance's password from the config file;
- ``webui``: ``AdminLiveTables`` asks the web admin, which keeps the MySQL passwords: it
  reads the table with the password it stores, by the same ``cdc_platform.mysql_schema``
  (one shape reader, one key rule), and answers with the shape, never the password:

  - ``GET /api/table-mirrors/{name}/live-schema``: ``live_schema_body``;
  - ``GET /api/table-mirrors/{name}/live-counts?column=C&today=D``: ``live_counts_body``,
    rows per day by the mirror's check column (``C`` must be it).

  Only tokens of role ``component`` may call them (``config_store.token``); each call is
  audited in the web admin.
- ``FakeLiveTables``: the fake, real code for unit tests.

Why not hand components the password instead: a component token reads no secret (the
snapshot of ``GET /api/config-snapshot`` carries none), so a leaked merge host or token gives
away table shapes and counts, not MySQL logins.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.mysql_schema import LiveSchema, LiveTables
from simple_binlog.errors import ConfigError, ServiceUnavailableError

TABLE_MIRRORS_PATH = "/api/table-mirrors"
# The web admin reads MySQL while the request waits: counting a week of a large table takes
# far longer than a config poll (config_store.timeout_s bounds connecting only).
READ_TIMEOUT_S = 300.0


class LiveTableSource(Protocol):
    """A logical table (a table mirror's name) as MySQL has it now."""

    def live_schema(self, logical: str) -> LiveSchema:
        """Its columns, key and shards (``cdc_platform.mysql_schema.read_live_schema``).

        Raises ConfigError (unknown table, no MySQL table routes to it) or
        ServiceUnavailableError (MySQL or the web admin cannot be asked)."""
        ...

    def count_per_day(self, logical: str, column: str, today: dt.date) -> dict[dt.date, int]:
        """Rows per day by ``column`` over the days before ``today``, summed over its shards
        (``cdc_platform.mysql_schema.LiveTables.count_per_day``). Raises like
        ``live_schema``."""
        ...


# --- the wire form (pure) -------------------------------------------------------------------


class _Column(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    type: str


class _LiveSchemaWire(BaseModel):
    """Columns as a list: their order is the table's, whatever a JSON reader does to keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    table: str
    shards: list[str]
    columns: list[_Column]
    key: list[str]
    shards_agree: bool
    differences: list[str] = []


class _DayCount(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    day: dt.date
    rows: int


class _LiveCountsWire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    table: str
    column: str
    counts: list[_DayCount]


def live_schema_body(schema: LiveSchema) -> dict[str, Any]:
    """The JSON the web admin answers with. Pure."""
    return {
        "table": schema.table,
        "shards": list(schema.shards),
        "columns": [{"name": name, "type": spec} for name, spec in schema.columns.items()],
        "key": list(schema.key),
        "shards_agree": schema.shards_agree,
        "differences": list(schema.differences),
    }


def parse_live_schema(document: Any) -> LiveSchema:
    """``live_schema_body`` back; ValueError when it is not one. Pure."""
    try:
        wire = _LiveSchemaWire.model_validate(document)
    except ValidationError as exc:
        raise ValueError(f"not a live schema ({exc.error_count()} problems)") from None
    return LiveSchema(
        table=wire.table,
        shards=list(wire.shards),
        columns={c.name: c.type for c in wire.columns},
        key=list(wire.key),
        shards_agree=wire.shards_agree,
        differences=list(wire.differences),
    )


def live_counts_body(table: str, column: str, counts: Mapping[dt.date, int]) -> dict[str, Any]:
    """The JSON the web admin answers with, days in order. Pure."""
    return {
        "table": table,
        "column": column,
        "counts": [{"day": day.isoformat(), "rows": rows} for day, rows in sorted(counts.items())],
    }


def parse_live_counts(document: Any) -> dict[dt.date, int]:
    """``live_counts_body`` back; ValueError when it is not one. Pure."""
    try:
        wire = _LiveCountsWire.model_validate(document)
    except ValidationError as exc:
        raise ValueError(f"not live counts ({exc.error_count()} problems)") from None
    return {entry.day: entry.rows for entry in wire.counts}


# --- the web admin --------------------------------------------------------------------------


class AdminLiveTables:
    """``LiveTableSource`` through the web admin (``config_store.webui_url``), with a token of
    role ``component``. One short HTTP request per call (merge asks once per table and day)."""

    def __init__(
        self,
        webui_url: str,
        token: SecretStr,
        connect_timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._base = webui_url.rstrip("/")
        self._token = token
        self._timeout = httpx.Timeout(READ_TIMEOUT_S, connect=connect_timeout_s)
        self._transport = transport

    def live_schema(self, logical: str) -> LiveSchema:
        document = self._get(logical, "live-schema", {}, "the live schema")
        try:
            return parse_live_schema(document)
        except ValueError as exc:
            raise ServiceUnavailableError(
                f"the web admin at {self._base} answered the live schema of {logical!r} with "
                f"something else ({exc})."
            ) from None

    def count_per_day(self, logical: str, column: str, today: dt.date) -> dict[dt.date, int]:
        params = {"column": column, "today": today.isoformat()}
        document = self._get(logical, "live-counts", params, "the rows per day")
        try:
            return parse_live_counts(document)
        except ValueError as exc:
            raise ServiceUnavailableError(
                f"the web admin at {self._base} answered the rows per day of {logical!r} with "
                f"something else ({exc})."
            ) from None

    def _get(self, logical: str, what: str, params: dict[str, str], meaning: str) -> Any:
        url = f"{self._base}{TABLE_MIRRORS_PATH}/{quote(logical, safe='')}/{what}"
        headers = {"Authorization": f"Bearer {self._token.get_secret_value()}"}
        asking = f"the web admin at {self._base}"
        try:
            with httpx.Client(timeout=self._timeout, transport=self._transport) as client:
                response = client.get(url, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise ServiceUnavailableError(
                f"{asking} cannot be reached to read {meaning} of table mirror {logical!r} "
                f"({type(exc).__name__}); the MySQL passwords stay in the web admin, so "
                "reading MySQL needs it."
            ) from None
        status = response.status_code
        detail = _detail(response)
        if status == httpx.codes.OK:
            try:
                return json.loads(response.content)
            except ValueError:
                raise ServiceUnavailableError(
                    f"{asking} answered {meaning} of {logical!r} with something that is not JSON."
                ) from None
        if status in (httpx.codes.UNAUTHORIZED, httpx.codes.FORBIDDEN):
            raise ConfigError(
                f"{asking} refused config_store.token ({status}: {detail}); reading "
                f"{meaning} needs an unexpired web admin token of role 'component'."
            )
        if status == httpx.codes.SERVICE_UNAVAILABLE:
            raise ServiceUnavailableError(
                f"{asking} cannot read {meaning} of {logical!r}: {detail}"
            )
        if status in (httpx.codes.BAD_REQUEST, httpx.codes.NOT_FOUND, 422):
            raise ConfigError(f"{asking} cannot read {meaning} of {logical!r}: {detail}")
        raise ServiceUnavailableError(
            f"{asking} answered {status} when asked for {meaning} of {logical!r}: {detail}"
        )


def _detail(response: httpx.Response) -> str:
    """The web admin's own sentence(s) from an answer (``{"detail": [...]}``), else its
    status text."""
    try:
        detail = json.loads(response.content).get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list) and detail:
        return " ".join(str(item) for item in detail)
    if isinstance(detail, str) and detail:
        return detail
    return response.reason_phrase or f"HTTP {response.status_code}"


# --- the fake -------------------------------------------------------------------------------


class FakeLiveTables:
    """Fixed schemas and counts, by logical table; ``failure`` is raised by every call when
    set. For unit tests."""

    def __init__(
        self,
        schemas: Mapping[str, LiveSchema] | None = None,
        counts: Mapping[str, dict[dt.date, int]] | None = None,
    ) -> None:
        self.schemas = dict(schemas or {})
        self.counts = dict(counts or {})
        self.failure: Exception | None = None
        self.asked: list[tuple[str, str]] = []  # (what, logical) in order

    def live_schema(self, logical: str) -> LiveSchema:
        self.asked.append(("live_schema", logical))
        if self.failure is not None:
            raise self.failure
        if logical not in self.schemas:
            raise ConfigError(f"no MySQL table routes to the logical table {logical!r}.")
        return self.schemas[logical]

    def count_per_day(self, logical: str, column: str, today: dt.date) -> dict[dt.date, int]:
        self.asked.append(("count_per_day", logical))
        if self.failure is not None:
            raise self.failure
        return dict(self.counts.get(logical, {}))


# --- the choice -----------------------------------------------------------------------------


def open_live_tables(settings: Settings, config: ConfigSnapshot) -> LiveTableSource:
    """The source for ``config_store.source``: the web admin (``webui``: it holds the MySQL
    passwords) or MySQL directly with the instances of ``config`` (``file``)."""
    chosen = settings.config_store
    if chosen.source == "webui":
        return AdminLiveTables(chosen.webui_url, chosen.component_token(), chosen.timeout_s)
    return LiveTables(config)
