"""The one query of the Hive metastore's tables (``cdc_platform.hive_metastore``): a table
parameter of a database's tables, or of one table, with the metastore's upper-case names
quoted and the asked names lowered as the metastore keeps them; nothing to ask a Derby
metastore."""

from __future__ import annotations

from cdc_platform.config import Settings
from cdc_platform.hive_metastore import METADATA_LOCATION, parameter_query, table_parameter

JOINS = (
    'FROM "TBLS" t JOIN "DBS" d ON "t"."DB_ID" = "d"."DB_ID" '
    'JOIN "TABLE_PARAMS" tp ON "tp"."TBL_ID" = "t"."TBL_ID"'
)


def test_every_table_of_a_database_in_the_case_the_metastore_keeps() -> None:
    statement, arguments = parameter_query("ODS_Snapshot", METADATA_LOCATION)
    assert statement.as_string() == (
        f'SELECT "t"."TBL_NAME", "tp"."PARAM_VALUE" {JOINS} '
        'WHERE "d"."NAME" = %s AND "tp"."PARAM_KEY" = %s'
    )
    # The parameter's key is Iceberg's, case and all; names are lowered.
    assert arguments == ("ods_snapshot", "metadata_location")


def test_one_table_of_a_database() -> None:
    statement, arguments = parameter_query("ods", "current-snapshot-summary", "_CDC_Progress")
    assert statement.as_string().endswith(
        'WHERE "d"."NAME" = %s AND "tp"."PARAM_KEY" = %s AND "t"."TBL_NAME" = %s'
    )
    assert arguments == ("ods", "current-snapshot-summary", "_cdc_progress")


def test_a_derby_metastore_has_nothing_to_ask() -> None:
    base = Settings()
    derby = base.model_copy(update={"spark": base.spark.model_copy(update={"metastore": "derby"})})
    assert table_parameter(derby, "ods", METADATA_LOCATION, what="a read") is None
