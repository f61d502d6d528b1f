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

Schema evolution: a column a message carries that the table lacks is added
(``ALTER TABLE … ADD COLUMN``) inside the batch's transaction, under an advisory lock so
concurrent mirror processes do not race; no restart needed. Rows not changed since hold NULL
there (an ADD COLUMN writes no row events, so a DEFAULT of MySQL's is not seen until the row
changes). Columns are never dropped or
retyped by the mirror (a MySQL type change that the old type cannot hold stops the batch with
an error naming the table, and it is retried until an operator alters the column).

Adapters for other warehouses (Kudu, StarRocks, …) implement ``mirror.applier.ChangeApplier``
the same way; see ``docs/warehouse-adapters.md``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import psycopg
from psycopg import sql

from mirror.applier import ApplyResult, ChangeApplier
from mirror.pgtypes import RowConverters, pg_type
from mirror.plan import RowChange, RowKey, latest_per_key
from simple_binlog.config import MirrorSettings, PostgresSettings, TableMirror
from simple_binlog.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[object, ...]]
R = TypeVar("R")

OFFSET_COLUMN = "_binlog_offset"
SHARD_COLUMN = "_shard"
DELETED_COLUMN = "_deleted"
TOMBSTONE_SUFFIX = "__tombstone"
_STAGE_DELETE = "_cdc_delete"
_BOOKKEEPING = (OFFSET_COLUMN, SHARD_COLUMN, DELETED_COLUMN)


def connect_warehouse(settings: PostgresSettings) -> Connection:
    try:
        return psycopg.connect(
            host=settings.host,
            port=settings.port,
            user=settings.user,
            password=settings.password.get_secret_value(),
            dbname=settings.warehouse_db,
            connect_timeout=10,
            application_name="cdc-mirror",
        )
    except psycopg.OperationalError as exc:
        reason = " ".join(str(exc).split())
        if "password authentication failed" in reason:
            raise ConfigError(
                f"PostgreSQL refused user {settings.user!r}; check postgres.user and "
                "postgres.password in the config."
            ) from None
        raise ServiceUnavailableError(
            f"PostgreSQL database {settings.warehouse_db!r} at {settings.host}:{settings.port} "
            f"cannot be reached ({reason})."
        ) from None


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
        # Columns (name → PostgreSQL type) of each table as last seen; refreshed after errors.
        self._columns: dict[str, dict[str, str]] = {}
        # The staging table of each logical table in this session, by the columns it holds.
        self._stages: dict[str, list[str]] = {}
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
                result += self._apply_table(conn, table, latest, plan.column_types(table))
            return result

        return self._run(apply)

    def set_tables(self, tables: Sequence[TableMirror]) -> None:
        fresh = {t.name: t for t in tables}
        for name, old in self._tables.items():
            if fresh.get(name) != old:
                self._columns.pop(name, None)  # read again from the warehouse when next used
        self._tables = fresh

    def close(self) -> None:
        self._conn.close()

    # -- one transaction with error translation ----------------------------------------------
    def _run(self, work: Callable[[Connection], R]) -> R:
        if self._conn.closed or self._conn.broken:
            self._stages.clear()  # temporary tables die with their session
            self._conn = connect_warehouse(self._postgres)
        try:
            with self._conn.transaction():
                return work(self._conn)
        except psycopg.OperationalError as exc:
            self._columns.clear()
            self._stages.clear()
            raise ServiceUnavailableError(
                f"the warehouse connection failed ({_one_line(exc)})."
            ) from None
        except psycopg.Error as exc:
            # DDL of a failed transaction is rolled back too: forget what we thought we added.
            self._columns.clear()
            self._stages.clear()
            raise ServiceUnavailableError(
                f"the warehouse refused a batch ({_reason_without_values(exc)})."
            ) from None

    def _ensure_schema(self, conn: Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('cdc-mirror-ddl'))")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))

    # -- DDL ----------------------------------------------------------------------------------
    def _load_columns(self, conn: Connection, table: str) -> dict[str, str]:
        rows = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (self._schema, table),
        ).fetchall()
        return {str(name): str(kind) for name, kind in rows}

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
        missing = [name for name in types if name not in known]
        if known and not missing:
            return [c for c in known if c not in _BOOKKEEPING]
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{self._schema}.{table}",))
        known = self._load_columns(conn, table)  # another process may have done it meanwhile
        target = sql.Identifier(self._schema, table)
        if not known:
            self._create(conn, table, key_columns, types, soft)
        else:
            for name, spec in types.items():
                if name not in known:
                    log.info("warehouse table %s.%s: adding column %s", self._schema, table, name)
                    conn.execute(
                        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                            target, sql.Identifier(name), sql.SQL(pg_type(spec))
                        )
                    )
        known = self._columns[table] = self._load_columns(conn, table)
        return [c for c in known if c not in _BOOKKEEPING]

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


def _reason_without_values(exc: psycopg.Error) -> str:
    """PostgreSQL's reason, with the offending value cut off and the COPY column named: the
    full message and its detail quote a row's values, which do not belong in logs."""
    reason = re.sub(r': ".*"$', "", exc.diag.message_primary or type(exc).__name__)
    column = re.search(r"COPY \S+, line \d+, column (\S+?):", exc.diag.context or "")
    return f"{reason}, column {column.group(1)}" if column else reason


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
