"""The warehouse applier: a PostgreSQL table per logical table, upserted only if newer.

Layout, in the schema ``mirror.warehouse_schema`` of database ``postgres.warehouse_db``:

- ``<logical table>``: the MySQL columns (types by ``mirror.pgtypes``) plus
  ``_binlog_offset bigint`` (the offset of the change the row holds), ``_shard text``
  (``schema.table`` it came from) and, for ``warehouse_delete: soft``, ``_deleted boolean``.
  Primary key: ``TableMirror.key``, else the messages' ``primaryKeys``.
- ``<logical table>__tombstone`` (``warehouse_delete: hard``): key columns, ``_binlog_offset``
  and ``_shard`` of deleted keys, so an older write replayed later is rejected. A newer write
  of the key removes its tombstone.

One batch is one transaction. Per logical table: the latest change of each key is COPYed into a
temporary staging table (kept for the session, emptied at each commit), then

1. ``INSERT … SELECT … ON CONFLICT (key) DO UPDATE … WHERE target._binlog_offset <
   excluded._binlog_offset`` for writes with no tombstone at the same or a newer offset,
2. tombstones older than those writes are removed,
3. rows older than a delete are removed (hard) and its tombstone written, unless the table
   holds a newer row; soft deletes are upserts setting ``_deleted``.

Schema evolution, inside the batch's transaction and before its rows, under an advisory lock
so concurrent mirror processes do not race; no restart needed. Each column's comment records
the MySQL type it was made for (``MySQL type: decimal(12,4)``); the batch's ``columnTypes``
are compared with it (and with the column's PostgreSQL type, ``format_type`` of the catalog):

- a column the table lacks is added (``ADD COLUMN``). Rows not changed since hold NULL there
  (an ADD COLUMN writes no row events, so a DEFAULT of MySQL's is not seen until the row
  changes);
- a changed type is decided by ``mirror.pg_schema.decide``: widened (``ALTER COLUMN … TYPE``,
  also in the tombstone table for a key column), kept (the column holds every new value:
  logged once), or the table is *stopped*: one sentence logged and in ``stopped``, its changes
  not applied from then on (counted, logged at ``close``) while the other tables flow. After
  altering the column by hand, restart the mirror and replay the table (``cdc-mirror
  replay``); the sentence names the first offset not applied. A refused ALTER (a view depends
  on the column) stops the table too;
- a column the batch no longer carries (a MySQL DROP, or the old name of a RENAME, which row
  events show as a drop and an add) is kept, NULL in rows written since; logged once.

**The stored row hash** ``_cdc_row_hash``: a ``bigint GENERATED ALWAYS AS (…) STORED`` column,
the first 64 bits of the md5 of the row's canonical text over MySQL's columns in MySQL's
order (``cdc_platform.canonical_sql.stored_row_hash``, the encoding validation compares every
store with). PostgreSQL computes it on every INSERT and UPDATE, whoever writes the row, and it
cannot be written, so validation can sum it instead of hashing each row and still find a value
changed behind the mirror's back. Its expression calls the encoding's IMMUTABLE functions,
created in the warehouse schema when the applier starts. When MySQL's columns change (a column
added, dropped or retyped, or a changed encoding), the column is dropped and added again with
the new expression, in the batch's transaction: **that rewrites the whole table** (PostgreSQL
computes the new value of every row), holding its lock meanwhile. A type change drops it
first (PostgreSQL does not retype a column a generated column reads). The column's comment
holds the md5 of its expression, so the applier knows whether it is current. If PostgreSQL
refuses the expression (a column whose type is not the one the mirror makes for its MySQL
type), the table goes without it, logged once; validation then hashes its rows. The hash costs
the warehouse's writes (``bench.mirror_bench``'s ``mirror.warehouse_row_hash`` figure):
``mirror.warehouse_row_hash: false`` leaves it out (a present one is dropped when the mirror next
writes the table; a drop does not rewrite it), and validation hashes the rows.

Adapters for other warehouses (Kudu, StarRocks, …) implement ``mirror.applier.ChangeApplier``
the same way; see ``docs/warehouse-adapters.md``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg

from cdc_platform import warehouse
from cdc_platform.canonical_sql import ROW_HASH_COLUMN, pg_functions, stored_row_hash
from cdc_platform.config import MirrorSettings, PostgresSettings, TableMirror
from cdc_platform.warehouse import Connection, reason_without_values, sql
from mirror.applier import ApplyResult, ChangeApplier
from mirror.pg_schema import Alter, Keep, Stop, decide
from mirror.pgtypes import RowConverters, pg_type
from mirror.plan import RowChange, RowKey, latest_per_key
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.values import parse_column_type

log = logging.getLogger(__name__)

R = TypeVar("R")

OFFSET_COLUMN = "_binlog_offset"
SHARD_COLUMN = "_shard"
DELETED_COLUMN = "_deleted"
TOMBSTONE_SUFFIX = "__tombstone"
_STAGE_DELETE = "_cdc_delete"
_BOOKKEEPING = (OFFSET_COLUMN, SHARD_COLUMN, DELETED_COLUMN, ROW_HASH_COLUMN)
_COMMENT = "MySQL type: "  # each mirrored column's comment: the MySQL type it was made for
_ROW_HASH_COMMENT = "cdc-mirror row hash, expression md5 "  # the row hash column's comment


class _TableStopped(CdcMirrorError):
    """The warehouse cannot follow a schema change of this table; the sentence says why."""


@dataclass(slots=True)
class _Column:
    """A warehouse column: its PostgreSQL type (``format_type``), the MySQL type of its
    comment, and the MySQL types this process already decided about (so a batch with the
    same types costs no catalog read)."""

    pg: str
    mysql: str | None
    seen: set[str] = field(default_factory=set)


def connect_warehouse(settings: PostgresSettings) -> Connection:
    """The mirror's connection to the warehouse database (``cdc_platform.warehouse``)."""
    return warehouse.connect(settings)


class WarehouseApplier(ChangeApplier):
    def __init__(
        self,
        postgres: PostgresSettings,
        mirror_settings: MirrorSettings,
        tables: Sequence[TableMirror],
    ) -> None:
        self._postgres = postgres
        self._schema = mirror_settings.warehouse_schema
        self._tables = {t.name: t for t in tables}
        # Columns of each table as last seen; refreshed after errors.
        self._columns: dict[str, dict[str, _Column]] = {}
        self.stopped: dict[str, str] = {}  # table → the sentence that stopped it
        self._not_applied: dict[str, int] = {}  # changes of stopped tables, by table
        self._absent: set[tuple[str, str]] = set()  # (table, column) logged as absent
        # The staging table of each logical table in this session, by the columns it holds.
        self._stages: dict[str, list[str]] = {}
        # The MySQL columns (name, type) each table's row hash is known to cover.
        self._hashed: dict[str, tuple[tuple[str, str], ...]] = {}
        self._row_hash = mirror_settings.warehouse_row_hash
        self._conn = connect_warehouse(postgres)
        self._run(self._ensure_schema)

    # -- lifecycle ----------------------------------------------------------------------------
    def apply_batch(self, changes: Iterable[RowChange]) -> ApplyResult:
        plan = latest_per_key(changes)
        if not plan.tables:
            return ApplyResult(superseded=plan.superseded)

        def apply(conn: Connection) -> ApplyResult:
            result = ApplyResult(superseded=plan.superseded)
            for table, latest in plan.tables.items():
                if table in self.stopped:
                    self._not_applied[table] = self._not_applied.get(table, 0) + len(latest)
                    continue
                try:
                    result += self._apply_table(conn, table, latest, plan.column_types(table))
                except _TableStopped as exc:
                    self._stop(table, str(exc), latest)
            return result

        return self._run(apply)

    def set_tables(self, tables: Sequence[TableMirror]) -> None:
        fresh = {t.name: t for t in tables}
        for name, old in self._tables.items():
            if fresh.get(name) != old:
                self._columns.pop(name, None)  # read again from the warehouse when next used
        self._tables = fresh

    def close(self) -> None:
        for table, count in self._not_applied.items():
            log.error(
                "warehouse table %s stayed stopped; %d changes were not applied", table, count
            )
        self._conn.close()

    def prepare_table(
        self, mirror: TableMirror, column_types: Mapping[str, str], key_columns: Sequence[str]
    ) -> bool:
        """Create ``mirror``'s table (and its tombstone table) now, from the live MySQL column
        types, exactly as its first change would; a table that exists is left as it is.
        Returns whether it was created. The web admin calls this when a table mirror is
        created (issue 22, item 2), so the target exists before the first row reaches it."""

        def ensure(conn: Connection) -> bool:
            if self._load_columns(conn, mirror.name):
                return False
            self._ensure_table(
                conn,
                mirror.name,
                tuple(mirror.key or key_columns),
                dict(column_types),
                mirror.warehouse_delete == "soft",
            )
            return True

        return self._run(ensure)

    def _stop(self, table: str, reason: str, latest: dict[RowKey, RowChange]) -> None:
        first = min(change.offset for change in latest.values())
        self.stopped[table] = (
            f"the warehouse mirror of {table} stopped at binlogOffset {first}: {reason}; "
            f"alter the column in PostgreSQL, restart the mirror and replay {table} "
            "(cdc-mirror replay)."
        )
        self._not_applied[table] = self._not_applied.get(table, 0) + len(latest)
        log.error("%s", self.stopped[table])

    # -- one transaction with error translation ----------------------------------------------
    def _run(self, work: Callable[[Connection], R]) -> R:
        if self._conn.closed or self._conn.broken:
            self._stages.clear()  # temporary tables die with their session
            self._conn = connect_warehouse(self._postgres)
        try:
            with self._conn.transaction():
                return work(self._conn)
        except psycopg.Error as exc:
            # DDL of a failed transaction is rolled back too: forget what we thought we
            # added; temporary tables die with a lost session.
            self._columns.clear()
            self._stages.clear()
            raise warehouse.map_postgres_error(exc, "a batch") from None

    def _ensure_schema(self, conn: Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('cdc-mirror-ddl'))")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))
        # The row hash's functions: a name is its definition's, so this never changes one.
        for statement in pg_functions(self._functions_schema(conn)):
            conn.execute(statement)

    def _functions_schema(self, conn: Connection) -> str:
        return sql.Identifier(self._schema).as_string(conn)

    # -- DDL ----------------------------------------------------------------------------------
    def _load_columns(self, conn: Connection, table: str) -> dict[str, _Column]:
        # The catalog, not information_schema: it spells the type with its modifiers
        # (numeric(12,4), timestamp(3) …) as ALTER takes it, and holds the comment.
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
            "col_description(a.attrelid, a.attnum) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (self._schema, table),
        ).fetchall()
        return {str(name): _Column(str(kind), _mysql_type(comment)) for name, kind, comment in rows}

    def _ensure_table(
        self,
        conn: Connection,
        table: str,
        key_columns: tuple[str, ...],
        types: dict[str, str],
        soft: bool,
    ) -> list[str]:
        """Create the table or add missing columns; returns the table's MySQL columns (all of
        them, also those this batch lacks: they are written as NULL, the row's state then)."""
        known = self._columns.get(table)
        if known is None:
            known = self._columns[table] = self._load_columns(conn, table)
        if (
            known
            and all(name in known and spec in known[name].seen for name, spec in types.items())
            and self._hashed.get(table) == tuple(types.items())
        ):
            return self._data_columns(table, known, types)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{self._schema}.{table}",))
        known = self._load_columns(conn, table)  # another process may have done it meanwhile
        if not known:
            self._create(conn, table, key_columns, types, soft)
        else:
            self._evolve(conn, table, known, key_columns, types)
        self._ensure_row_hash(conn, table, types)
        known = self._columns[table] = self._load_columns(conn, table)
        for name, spec in types.items():
            known[name].seen.add(spec)
        return self._data_columns(table, known, types)

    def _data_columns(
        self, table: str, known: dict[str, _Column], types: Mapping[str, str]
    ) -> list[str]:
        """The table's MySQL columns, all of them: those the batch lacks are written as NULL
        (the row's state then); each such column is logged once."""
        columns = [c for c in known if c not in _BOOKKEEPING]
        if len(columns) > len(types):
            for name in columns:
                if name not in types and (table, name) not in self._absent:
                    self._absent.add((table, name))
                    log.warning(
                        "warehouse table %s.%s: column %s is no longer in the changes (dropped "
                        "or renamed in MySQL); it is kept, NULL in rows written from now on",
                        self._schema,
                        table,
                        name,
                    )
        return columns

    def _evolve(
        self,
        conn: Connection,
        table: str,
        known: dict[str, _Column],
        key_columns: tuple[str, ...],
        types: Mapping[str, str],
    ) -> None:
        """Add the columns the table lacks and follow type changes, or stop the table (before
        any DDL: the stop leaves the batch's transaction untouched)."""
        decisions = {
            name: decide(known[name].pg, pg_type(spec))
            for name, spec in types.items()
            if name in known and spec != known[name].mysql
        }
        for name, decision in decisions.items():
            if isinstance(decision, Stop):
                raise _TableStopped(
                    f"column {name} changed from MySQL {known[name].mysql or known[name].pg} "
                    f"to {types[name]} and {decision.reason}"
                )
        target = sql.Identifier(self._schema, table)
        for name, spec in types.items():
            if name not in known:
                log.info("warehouse table %s.%s: adding column %s", self._schema, table, name)
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                        target, sql.Identifier(name), sql.SQL(pg_type(spec))
                    )
                )
                self._comment(conn, table, name, spec)
        if any(isinstance(d, Alter) for d in decisions.values()):
            self._stages.pop(table, None)  # the staging table copies the target's types
            # PostgreSQL retypes no column a generated column reads: the row hash goes first
            # and is added again after (_ensure_row_hash).
            try:
                with conn.transaction():  # a savepoint: a refusal stops this table only
                    conn.execute(
                        sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                            target, sql.Identifier(ROW_HASH_COLUMN)
                        )
                    )
            except psycopg.errors.DependentObjectsStillExist as exc:
                raise _TableStopped(
                    f"PostgreSQL refused to drop its row hash column before retyping "
                    f"({reason_without_values(exc)})"
                ) from None
        for name, decision in decisions.items():
            if not isinstance(decision, Stop):  # none is, see above
                self._follow(conn, table, name, known[name], types[name], decision, key_columns)

    def _follow(
        self,
        conn: Connection,
        table: str,
        name: str,
        column: _Column,
        spec: str,
        decision: Alter | Keep,
        key_columns: tuple[str, ...],
    ) -> None:
        where = f"warehouse table {self._schema}.{table}: column {name}"
        if isinstance(decision, Alter):
            log.info(
                "%s: MySQL %s → %s; altering %s to %s",
                where,
                column.mysql,
                spec,
                column.pg,
                decision.to.sql(),
            )
            tables = [table]
            if name in key_columns and self._exists(conn, table + TOMBSTONE_SUFFIX):
                tables.append(table + TOMBSTONE_SUFFIX)
            for each in tables:
                self._alter_type(conn, each, name, decision.to.sql())
        elif decision.narrower:
            log.warning(
                "%s: MySQL %s → %s; its %s column holds every new value and is kept "
                "(values MySQL rewrote in the ALTER change here when their rows change)",
                where,
                column.mysql,
                spec,
                column.pg,
            )
        else:
            log.info(
                "%s: MySQL %s → %s; its %s column holds it as it is",
                where,
                column.mysql,
                spec,
                column.pg,
            )
        self._comment(conn, table, name, spec)

    def _ensure_row_hash(self, conn: Connection, table: str, types: Mapping[str, str]) -> None:
        """Give the table the row hash of MySQL's columns ``types`` (in their order), unless
        its comment says it has it already: the old one dropped and the new one added in one
        ALTER, which rewrites the table (the module docstring)."""
        covered = tuple(types.items())
        target = sql.Identifier(self._schema, table)
        column = sql.Identifier(ROW_HASH_COLUMN)
        found = conn.execute(
            "SELECT col_description(a.attrelid, a.attnum) FROM pg_attribute a "
            "WHERE a.attrelid = %s::regclass AND a.attname = %s AND NOT a.attisdropped",
            (target.as_string(conn), ROW_HASH_COLUMN),
        ).fetchone()
        if not self._row_hash:
            if found is not None:
                # Dropping a column does not rewrite the table; its writes stop paying for it.
                log.info(
                    "warehouse table %s.%s: dropping its row hash (mirror.warehouse_row_hash "
                    "is off)",
                    self._schema,
                    table,
                )
                conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(target, column))
            self._hashed[table] = covered
            return
        columns = [(name, parse_column_type(spec)) for name, spec in types.items()]
        expression = stored_row_hash(self._functions_schema(conn), columns)
        marker = _ROW_HASH_COMMENT + hashlib.md5(expression.encode()).hexdigest()  # noqa: S324
        if found is not None and found[0] == marker:
            self._hashed[table] = covered
            return
        log.info(
            "warehouse table %s.%s: %s its row hash (rewrites the table)",
            self._schema,
            table,
            "adding" if found is None else "redefining",
        )
        try:
            with conn.transaction():  # a savepoint: a refusal leaves the table without it
                conn.execute(
                    sql.SQL(
                        "ALTER TABLE {} DROP COLUMN IF EXISTS {}, "
                        "ADD COLUMN {} bigint GENERATED ALWAYS AS ({}) STORED"
                    ).format(target, column, column, sql.SQL(expression))
                )
                conn.execute(
                    sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                        target, column, sql.Literal(marker)
                    )
                )
        except psycopg.Error as exc:
            log.warning(
                "warehouse table %s.%s: PostgreSQL refused its row hash (%s); validation "
                "hashes its rows instead",
                self._schema,
                table,
                reason_without_values(exc),
            )
        self._hashed[table] = covered

    def _alter_type(self, conn: Connection, table: str, name: str, to: str) -> None:
        column = sql.Identifier(name)
        statement = sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
            sql.Identifier(self._schema, table), column, sql.SQL(to), column, sql.SQL(to)
        )
        try:
            with conn.transaction():  # a savepoint: a refusal stops this table, not the batch
                conn.execute(statement)
        except (
            psycopg.errors.FeatureNotSupported,
            psycopg.errors.DependentObjectsStillExist,
            psycopg.errors.DataException,
        ) as exc:
            raise _TableStopped(
                f"PostgreSQL refused to alter column {name} to {to} ({reason_without_values(exc)})"
            ) from None

    def _exists(self, conn: Connection, table: str) -> bool:
        found = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL",
            (sql.Identifier(self._schema, table).as_string(conn),),
        ).fetchone()
        return bool(found and found[0])

    def _comment(self, conn: Connection, table: str, name: str, spec: str) -> None:
        conn.execute(
            sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                sql.Identifier(self._schema, table),
                sql.Identifier(name),
                sql.Literal(_COMMENT + spec),
            )
        )

    def _create(
        self,
        conn: Connection,
        table: str,
        key_columns: tuple[str, ...],
        types: dict[str, str],
        soft: bool,
    ) -> None:
        missing_key = [k for k in key_columns if k not in types]
        if missing_key:
            raise ConfigError(f"key column {missing_key[0]!r} of table {table!r} is not a column.")
        columns: list[sql.Composable] = [
            sql.SQL("{} {}{}").format(
                sql.Identifier(name),
                sql.SQL(pg_type(spec)),
                sql.SQL(" NOT NULL" if name in key_columns else ""),
            )
            for name, spec in types.items()
        ]
        columns.append(sql.SQL(f"{OFFSET_COLUMN} bigint NOT NULL"))
        columns.append(sql.SQL(f"{SHARD_COLUMN} text NOT NULL"))
        if soft:
            columns.append(sql.SQL(f"{DELETED_COLUMN} boolean NOT NULL DEFAULT false"))
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in key_columns)
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
                sql.Identifier(self._schema, table), sql.SQL(", ").join(columns), keys
            )
        )
        tombstone = sql.SQL(", ").join(
            [
                *(
                    sql.SQL("{} {} NOT NULL").format(sql.Identifier(k), sql.SQL(pg_type(types[k])))
                    for k in key_columns
                ),
                sql.SQL(f"{OFFSET_COLUMN} bigint NOT NULL"),
                sql.SQL(f"{SHARD_COLUMN} text NOT NULL"),
            ]
        )
        if not soft:
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
                    sql.Identifier(self._schema, table + TOMBSTONE_SUFFIX), tombstone, keys
                )
            )
        for name, spec in types.items():
            self._comment(conn, table, name, spec)
        log.info(
            "warehouse table %s.%s created (key %s, %s deletes)",
            self._schema,
            table,
            ", ".join(key_columns),
            "soft" if soft else "hard",
        )

    # -- DML ----------------------------------------------------------------------------------
    def _apply_table(
        self,
        conn: Connection,
        table: str,
        latest: dict[RowKey, RowChange],
        types: dict[str, str],
    ) -> ApplyResult:
        mirror = self._tables.get(table)
        soft = mirror is not None and mirror.warehouse_delete == "soft"
        first = next(iter(latest.values()))
        key_columns = tuple(mirror.key) if mirror and mirror.key else first.key_columns
        data_columns = self._ensure_table(conn, table, key_columns, types, soft)
        stage = sql.Identifier(f"_cdc_stage_{table}")
        target = sql.Identifier(self._schema, table)
        if self._stages.get(table) != data_columns:
            # Kept for the session and emptied at each commit: creating it for every batch
            # cost catalog work and a fresh plan for every statement reading it. Made again
            # when the target gained columns.
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage))
            conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS, {} boolean NOT NULL) "
                    "ON COMMIT DELETE ROWS"
                ).format(stage, target, sql.Identifier(_STAGE_DELETE))
            )
            self._stages[table] = data_columns
        copy_columns = [*data_columns, OFFSET_COLUMN, SHARD_COLUMN, _STAGE_DELETE]
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
            stage, sql.SQL(", ").join(sql.Identifier(c) for c in copy_columns)
        )
        converters = RowConverters(data_columns)
        with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            for change in latest.values():
                values = converters.values(change.row, change.column_types)
                values += (change.offset, change.shard, "t" if change.deleted else "f")
                copy.write_row(values)
        # No ANALYZE of the stage: it cost ~10 % of a batch, and the planner's estimate from
        # the stage's page count already picks index lookups into the target.
        parts = _Statement(target, stage, key_columns, data_columns)
        deletes = sum(1 for change in latest.values() if change.deleted)
        if soft:
            applied = conn.execute(parts.upsert(soft=True)).rowcount
        else:
            tombstones = sql.Identifier(self._schema, table + TOMBSTONE_SUFFIX)
            applied = 0
            if deletes < len(latest):
                applied += conn.execute(parts.upsert(soft=False, tombstones=tombstones)).rowcount
                conn.execute(parts.drop_superseded_tombstones(tombstones))
            if deletes:
                # The deletes of a batch are few next to the table, but without statistics on
                # the stage the planner hashes the whole target for them (seen: 90 ms per batch
                # at 80k rows, growing with the table); index lookups per deleted key it is.
                conn.execute("SET LOCAL enable_hashjoin = off")
                conn.execute("SET LOCAL enable_mergejoin = off")
                conn.execute(parts.delete_older_rows())
                applied += conn.execute(parts.write_tombstones(tombstones)).rowcount
                conn.execute("SET LOCAL enable_hashjoin TO DEFAULT")
                conn.execute("SET LOCAL enable_mergejoin TO DEFAULT")
        return ApplyResult(applied=applied, stale=len(latest) - applied)


class _Statement:
    """The SQL of one table's batch (pure composition, see the module docstring)."""

    def __init__(
        self,
        target: sql.Identifier,
        stage: sql.Identifier,
        key_columns: tuple[str, ...],
        data_columns: list[str],
    ) -> None:
        self.target, self.stage = target, stage
        self.keys = [sql.Identifier(k) for k in key_columns]
        self.data = [sql.Identifier(c) for c in data_columns]

    def _match(self, left: str, right: str) -> sql.Composable:
        return sql.SQL(" AND ").join(
            sql.SQL("{}.{} = {}.{}").format(sql.Identifier(left), k, sql.Identifier(right), k)
            for k in self.keys
        )

    def upsert(self, soft: bool, tombstones: sql.Identifier | None = None) -> sql.Composed:
        columns = [*self.data, sql.Identifier(OFFSET_COLUMN), sql.Identifier(SHARD_COLUMN)]
        selected = [sql.SQL("s.{}").format(c) for c in columns]
        if soft:
            columns.append(sql.Identifier(DELETED_COLUMN))
            selected.append(sql.SQL("s.{}").format(sql.Identifier(_STAGE_DELETE)))
            where: sql.Composable = sql.SQL("TRUE")
        else:
            assert tombstones is not None
            where = sql.SQL(
                "NOT s.{} AND NOT EXISTS (SELECT 1 FROM {} b WHERE {} AND b.{} >= s.{})"
            ).format(
                sql.Identifier(_STAGE_DELETE),
                tombstones,
                self._match("b", "s"),
                sql.Identifier(OFFSET_COLUMN),
                sql.Identifier(OFFSET_COLUMN),
            )
        updates = sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(c, c) for c in columns if c not in self.keys
        )
        return sql.SQL(
            "INSERT INTO {target} AS t ({columns}) SELECT {selected} FROM {stage} s WHERE {where} "
            "ON CONFLICT ({keys}) DO UPDATE SET {updates} "
            "WHERE t.{offset} < EXCLUDED.{offset}"
        ).format(
            target=self.target,
            columns=sql.SQL(", ").join(columns),
            selected=sql.SQL(", ").join(selected),
            stage=self.stage,
            where=where,
            keys=sql.SQL(", ").join(self.keys),
            updates=updates,
            offset=sql.Identifier(OFFSET_COLUMN),
        )

    def drop_superseded_tombstones(self, tombstones: sql.Identifier) -> sql.Composed:
        return sql.SQL("DELETE FROM {} b USING {} s WHERE NOT s.{} AND {} AND b.{} < s.{}").format(
            tombstones,
            self.stage,
            sql.Identifier(_STAGE_DELETE),
            self._match("b", "s"),
            sql.Identifier(OFFSET_COLUMN),
            sql.Identifier(OFFSET_COLUMN),
        )

    def delete_older_rows(self) -> sql.Composed:
        return sql.SQL("DELETE FROM {} t USING {} s WHERE s.{} AND {} AND t.{} < s.{}").format(
            self.target,
            self.stage,
            sql.Identifier(_STAGE_DELETE),
            self._match("t", "s"),
            sql.Identifier(OFFSET_COLUMN),
            sql.Identifier(OFFSET_COLUMN),
        )

    def write_tombstones(self, tombstones: sql.Identifier) -> sql.Composed:
        columns = [*self.keys, sql.Identifier(OFFSET_COLUMN), sql.Identifier(SHARD_COLUMN)]
        return sql.SQL(
            "INSERT INTO {tombstones} AS b ({columns}) SELECT {selected} FROM {stage} s "
            "WHERE s.{delete} AND NOT EXISTS "
            "(SELECT 1 FROM {target} t WHERE {match} AND t.{offset} >= s.{offset}) "
            "ON CONFLICT ({keys}) DO UPDATE SET {offset} = EXCLUDED.{offset}, "
            "{shard} = EXCLUDED.{shard} WHERE b.{offset} < EXCLUDED.{offset}"
        ).format(
            tombstones=tombstones,
            columns=sql.SQL(", ").join(columns),
            selected=sql.SQL(", ").join(sql.SQL("s.{}").format(c) for c in columns),
            stage=self.stage,
            delete=sql.Identifier(_STAGE_DELETE),
            target=self.target,
            match=self._match("t", "s"),
            keys=sql.SQL(", ").join(self.keys),
            offset=sql.Identifier(OFFSET_COLUMN),
            shard=sql.Identifier(SHARD_COLUMN),
        )


def _mysql_type(comment: object) -> str | None:
    if isinstance(comment, str) and comment.startswith(_COMMENT):
        return comment[len(_COMMENT) :]
    return None


def prepare_warehouse_table(
    postgres: PostgresSettings,
    mirror_settings: MirrorSettings,
    mirror: TableMirror,
    column_types: Mapping[str, str],
    key_columns: Sequence[str],
) -> bool:
    """``WarehouseApplier.prepare_table`` over a connection of its own; whether the table
    was created (False: it existed)."""
    applier = WarehouseApplier(postgres, mirror_settings, [mirror])
    try:
        return applier.prepare_table(mirror, column_types, key_columns)
    finally:
        applier.close()
