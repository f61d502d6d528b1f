"""Table and database DDL found in the binlog, as schema-change records. Pure logic.

In a row binlog every statement that is not a row change arrives as a query event: BEGIN,
the COMMIT of non-transactional changes, DDL and DCL. Table and database DDL matters
downstream (the mirrors evolve their schemas), so it is published, in binlog order and in the
same Kafka transaction as the rows around it, to the instance's schema-change topic. Other
statements (CREATE USER, GRANT, …) are never published or logged: they carry passwords.
A table DDL can carry secrets too (``CONNECTION='mysql://user:password@host/…'``,
``PASSWORD='…'`` of an engine): those string values are replaced by ``'***'``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TRANSACTION_STARTS = frozenset({"BEGIN", "XA START", "XA END"})

_TABLE_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(?P<verb>ALTER|CREATE|DROP|RENAME|TRUNCATE)\s+(?:ONLINE\s+|IGNORE\s+|"
    r"OR\s+REPLACE\s+|TEMPORARY\s+)*(?P<object>TABLE|TABLES|DATABASE|SCHEMA)\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?`?(?P<name>[\w$]+)`?(?:\.`?(?P<table>[\w$]+)`?)?",
    re.I | re.S,
)
_SECRET_OPTION = re.compile(
    # Not inside a literal or an identifier: "DEFAULT 'PASSWORD'" is a value, not an option.
    r"(?P<option>(?<![\w'\"`])(?:CONNECTION|PASSWORD|ENCRYPTION_KEY_ID|IDENTIFIED\s+BY)\s*=?\s*)"
    r"(?P<quote>['\"])(?:\\.|(?!(?P=quote)).)*(?P=quote)",
    re.I | re.S,
)


@dataclass(frozen=True, slots=True)
class TableDdl:
    """One DDL statement on a table (``table`` set) or a whole database (``table`` None)."""

    verb: str
    object: str
    schema: str
    table: str | None
    statement: str

    @property
    def target(self) -> str:
        return f"{self.schema}.{self.table}" if self.table else self.schema

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "DDL",
            "verb": self.verb,
            "object": self.object,
            "schemaName": self.schema,
            "tableName": self.table,
            "statement": self.statement,
        }


def redact(statement: str) -> str:
    """The statement with the values of secret-bearing options replaced by '***'."""
    return _SECRET_OPTION.sub(lambda m: f"{m.group('option')}'***'", statement)


def parse_table_ddl(query: str, default_schema: str) -> TableDdl | None:
    """The table/database DDL in a query event, or None for anything else."""
    match = _TABLE_DDL.match(query)
    if match is None:
        return None
    verb, kind = match.group("verb").upper(), match.group("object").upper()
    name, table = match.group("name"), match.group("table")
    if kind in ("DATABASE", "SCHEMA"):
        return TableDdl(verb, "DATABASE", name, None, redact(query.strip()))
    if table:
        return TableDdl(verb, "TABLE", name, table, redact(query.strip()))
    return TableDdl(verb, "TABLE", default_schema, name, redact(query.strip()))
