"""Table schemas from information_schema: column order, COLUMN_TYPE spellings, the key."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from cdc_platform.mysql_schema import read_table_shape
from collector.binlog_types import column_type, refine
from collector.decoding import TableSchema
from simple_binlog.errors import ContractError

log = logging.getLogger(__name__)


def load_table_schema(cursor: Any, schema: str, table: str) -> TableSchema:
    """Read one table's schema with a DB-API cursor, through the platform's one table-shape
    reader (so the collector's key is the key every other component sees). A table without a
    usable key gets an empty key here; components that need one refuse it by name."""
    shape = read_table_shape(cursor, schema, table)
    return TableSchema(
        schema=schema, table=table, column_types=dict(shape.columns), primary_keys=shape.key
    )


class BinlogTableSchemas:
    """Table schemas taken from each rows event's table map (``binlog_row_metadata=FULL``).

    Cached per table map (table id and column names), so a DDL, which gives the table a new
    map, is picked up at exactly the event written after it. ``information_schema`` is asked
    once per table map: for the server's COLUMN_TYPE text of each column, which the messages'
    ``columnTypes`` carry verbatim where it matches the table map (``binlog_types.refine``),
    and for the unique key of a table without a primary key. A table that no longer exists is
    decoded with the table map's own spelling, and a warning says so.
    """

    def __init__(self, lookup: Callable[[str, str], TableSchema]) -> None:
        self._lookup = lookup
        self._cache: dict[tuple[str, str, int, tuple[str, ...]], TableSchema] = {}

    def for_event(self, event: Any) -> TableSchema:
        if not getattr(event, "has_names", True):
            self._name_columns(event)
        names = tuple(column.name for column in event.columns)
        key = (event.schema, event.table, event.table_id, names)
        schema = self._cache.get(key)
        if schema is None:
            schema = self._build(event, names)
            self._cache[key] = schema
        return schema

    def _name_columns(self, event: Any) -> None:
        """A table map without column names (MySQL's ``binlog_row_metadata=MINIMAL``, or a
        server before 8.0): names from the table's schema, in order, when it has as many
        columns as the map; otherwise they stay unknown and ``_build`` says what to set."""
        try:
            live = self._lookup(event.schema, event.table)
        except ContractError:
            return
        if len(live.column_types) == len(event.columns):
            for column, name in zip(event.columns, live.column_types, strict=True):
                column.name = name

    def forget_all(self) -> None:
        self._cache.clear()

    def forget(self, schema: str, table: str | None = None) -> None:
        """Drop cached entries after a DDL on the table (or the whole schema)."""
        for key in [k for k in self._cache if k[0] == schema and table in (None, k[1])]:
            del self._cache[key]

    def _build(self, event: Any, names: tuple[str, ...]) -> TableSchema:
        if any(name is None for name in names):
            raise ContractError(
                f"the binlog has no column names for {event.schema}.{event.table}; set "
                "binlog_row_metadata=FULL on the server."
            )
        types = {column.name: column_type(column) for column in event.columns}
        keys = tuple(column.name for column in event.columns if column.is_primary)
        try:
            live = self._lookup(event.schema, event.table)
        except ContractError:
            # The table was dropped since this event was written: the binlog's own
            # metadata stands (MariaDB's UUID/INET columns stay binary).
            log.warning(
                "%s.%s no longer exists; decoding it with the binlog's metadata only, so its "
                "columnTypes are the table map's spelling, not the server's COLUMN_TYPE "
                "(no display widths, lengths or geometry subtypes; UUID/INET as binary)",
                event.schema,
                event.table,
            )
            return TableSchema(event.schema, event.table, types, keys)
        refined = refine(types, live.column_types)
        differing = sorted(
            name for name in types if refined[name] == types[name] != live.column_types.get(name)
        )
        if differing:
            log.warning(
                "%s.%s: information_schema no longer describes column(s) %s as the binlog "
                "does (a DDL not reached yet); their columnTypes are the table map's spelling",
                event.schema,
                event.table,
                ", ".join(differing),
            )
        if not keys and set(live.primary_keys) <= set(types):
            keys = live.primary_keys
        return TableSchema(event.schema, event.table, refined, keys)
