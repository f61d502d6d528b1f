"""Shard routing: physical ``schema.table`` → the logical (shard-merged) table.

``ordercenter_07.orderinfo_42`` → ``ordercenter_orderinfo``. Rules are regexes with named
groups ``db`` and ``table``; the first rule that matches both names wins. Pure logic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, field_validator

from simple_binlog.errors import ConfigError
from simple_binlog.patterns import compile_pattern

if TYPE_CHECKING:
    from simple_binlog.patterns import Matcher

_LOGICAL_NAME = re.compile(r"^[a-z0-9_]{1,128}$")


class ShardRule(BaseModel):
    """A shard suffix rule. The default strips a trailing ``_<digits>`` from both names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_pattern: str = r"^(?P<db>.+?)(_\d+)?$"
    table_pattern: str = r"^(?P<table>.+?)(_\d+)?$"

    @field_validator("schema_pattern", "table_pattern")
    @classmethod
    def _compiles_with_group(cls, value: str, info: object) -> str:
        # Bounded for Spark's Java regexes too (stream_writer.transform runs these patterns).
        compiled = compile_pattern(value)
        group = "db" if getattr(info, "field_name", "") == "schema_pattern" else "table"
        if group not in compiled.groupindex:
            raise ValueError(f"must have a named group (?P<{group}>...)")
        return value

    @cached_property
    def _schema_re(self) -> Matcher:
        return compile_pattern(self.schema_pattern)

    @cached_property
    def _table_re(self) -> Matcher:
        return compile_pattern(self.table_pattern)

    def match(self, schema: str, table: str) -> LogicalTable | None:
        db_match = self._schema_re.fullmatch(schema)
        table_match = self._table_re.fullmatch(table)
        if db_match is None or table_match is None:
            return None
        return LogicalTable(db_prefix=db_match.group("db"), table_prefix=table_match.group("table"))


@dataclass(frozen=True, slots=True)
class LogicalTable:
    """The shard-merged table: ``<db_prefix>_<table_prefix>`` in the lake, warehouse and Redis."""

    db_prefix: str
    table_prefix: str

    @property
    def name(self) -> str:
        return f"{self.db_prefix}_{self.table_prefix}".lower()


class ShardRouter:
    """Maps physical tables to logical tables with an ordered list of rules (first match)."""

    def __init__(self, rules: list[ShardRule]) -> None:
        if not rules:
            raise ConfigError("shard routing needs at least one rule.")
        self._rules = rules
        self._cache: dict[tuple[str, str], LogicalTable] = {}

    def route(self, schema: str, table: str) -> LogicalTable:
        key = (schema, table)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        for rule in self._rules:
            logical = rule.match(schema, table)
            if logical is not None:
                if not _LOGICAL_NAME.match(logical.name):
                    raise ConfigError(
                        f"shard routing maps {schema}.{table} to {logical.name!r}, which is not "
                        "a usable table name (lowercase letters, digits and '_')."
                    )
                self._cache[key] = logical
                return logical
        raise ConfigError(f"no shard routing rule matches {schema}.{table}.")


def partition_key(schema: str, table: str) -> bytes:
    """Kafka partition key of a physical table: per-table order, the collector's and replay's."""
    return f"{schema}.{table}".encode()
