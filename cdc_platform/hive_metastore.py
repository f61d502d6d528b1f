"""What the Hive metastore's PostgreSQL database says of the lake's tables, read without Spark:
the one place that knows the metastore's schema.

Hive keeps a table's parameters in ``TABLE_PARAMS`` (``TBL_ID``, ``PARAM_KEY``,
``PARAM_VALUE``), its name in ``TBLS`` (``TBL_ID``, ``DB_ID``, ``TBL_NAME``) and its
database's name in ``DBS`` (``DB_ID``, ``NAME``), all in lower case; the upper-case table and
column names are quoted identifiers in PostgreSQL. Iceberg's Hive catalog keeps there the
table's current metadata file (``metadata_location``) and its current snapshot's summary
(``current-snapshot-summary``, JSON), which is what a process without Spark reads
(``cdc_platform.snapshot_tags``, ``cdc_platform.lake.ready_days_from_metastore``).

With a Derby metastore (embedded in a Spark process) there is nothing to query:
``table_parameter`` answers None and the caller says what that means for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_platform.config import Settings

if TYPE_CHECKING:
    from psycopg import sql

# The table parameter where Iceberg's Hive catalog keeps the current metadata file.
METADATA_LOCATION = "metadata_location"
# The table parameter where Iceberg's Hive catalog copies the current snapshot's summary.
CURRENT_SNAPSHOT_SUMMARY = "current-snapshot-summary"


def parameter_query(
    database: str, key: str, table: str | None = None
) -> tuple[sql.Composed, tuple[str, ...]]:
    """The statement and its arguments that read parameter ``key`` of every table of
    ``database`` (of ``table`` only, when named), as rows (table name, value). Names are
    lowered: the metastore keeps them in lower case, whatever case Spark was given."""
    from cdc_platform.warehouse import sql  # noqa: PLC0415 - psycopg only for the metastore's readers

    def column(alias: str, name: str) -> sql.Identifier:
        return sql.Identifier(alias, name)  # "alias"."NAME"

    conditions = [
        sql.SQL("{} = %s").format(column("d", "NAME")),
        sql.SQL("{} = %s").format(column("tp", "PARAM_KEY")),
    ]
    arguments = [database.lower(), key]
    if table is not None:
        conditions.append(sql.SQL("{} = %s").format(column("t", "TBL_NAME")))
        arguments.append(table.lower())
    statement = sql.SQL(
        "SELECT {table_name}, {value} FROM {tbls} t "
        "JOIN {dbs} d ON {t_db} = {d_db} "
        "JOIN {params} tp ON {tp_tbl} = {t_tbl} "
        "WHERE {conditions}"
    ).format(
        table_name=column("t", "TBL_NAME"),
        value=column("tp", "PARAM_VALUE"),
        tbls=sql.Identifier("TBLS"),
        dbs=sql.Identifier("DBS"),
        params=sql.Identifier("TABLE_PARAMS"),
        t_db=column("t", "DB_ID"),
        d_db=column("d", "DB_ID"),
        tp_tbl=column("tp", "TBL_ID"),
        t_tbl=column("t", "TBL_ID"),
        conditions=sql.SQL(" AND ").join(conditions),
    )
    return statement, tuple(arguments)


def table_parameter(
    settings: Settings, database: str, key: str, *, table: str | None = None, what: str
) -> dict[str, str] | None:
    """Table name → the value of its parameter ``key``, for every table of ``database`` (only
    ``table``, when named) that has one; None when the metastore is not PostgreSQL (Derby:
    only Spark can ask it). ``what`` names the read in an error (``warehouse_errors``)."""
    if settings.spark.metastore != "postgres":
        return None
    from cdc_platform import warehouse  # noqa: PLC0415 - only readers of the metastore need psycopg

    statement, arguments = parameter_query(database, key, table)
    pg = settings.postgres
    with (
        warehouse.warehouse_errors(what),
        warehouse.connect(pg, database=pg.metastore_db, autocommit=True) as conn,
    ):
        rows = conn.execute(statement, arguments).fetchall()
    return {str(name): str(value) for name, value in rows}
