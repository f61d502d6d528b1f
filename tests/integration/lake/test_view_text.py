"""A view's query changed by one metastore call (``cdc_platform.lake.replace_view_text``) runs
with the SQL settings of the session that changed it, as a view made by ``CREATE OR REPLACE
VIEW`` in that session would: Spark stores the session's settings with a view and runs the
view with them, so keeping those of its creation would make a view read differently from the
same view made again (a time zone, ANSI mode)."""

from __future__ import annotations

import uuid

from cdc_platform.lake import (
    VIEW_COLUMNS_PROPERTY,
    metastore_client,
    replace_view_text,
    view_session_properties,
)
from tests.integration.lake.conftest import LakeSpark
from tests.support.views import made_by_sql, session_part, session_settings

_MARK = "one-string-column"
# The text of an epoch second, in the time zone the view runs with.
_EPOCH_TEXT = "SELECT CAST(TIMESTAMP_SECONDS({}) AS STRING) AS t"


def test_a_replaced_view_text_runs_with_the_settings_of_the_session_that_replaced_it(
    lake_spark: LakeSpark,
) -> None:
    spark = lake_spark.spark
    database = f"vt_{uuid.uuid4().hex[:10]}"
    view = f"spark_catalog.`{database}`.`epoch`"
    spark.sql(f"CREATE DATABASE spark_catalog.`{database}`")
    client = metastore_client(spark)

    def replace_text(text: str) -> bool:
        """The view's text ``text`` by the metastore, with the session as it is now."""
        session = view_session_properties(spark)
        return replace_view_text(client, database, "epoch", text, _MARK, session)

    try:
        with session_settings(
            spark, {"spark.sql.session.timeZone": "UTC", "spark.sql.ansi.enabled": "false"}
        ):
            spark.sql(
                f"CREATE VIEW {view} TBLPROPERTIES ('{VIEW_COLUMNS_PROPERTY}' = '{_MARK}') "
                f"AS {_EPOCH_TEXT.format(0)}"
            )
        with session_settings(spark, {"spark.sql.session.timeZone": "Asia/Tokyo"}):
            # A new text: stored with Tokyo's time zone, and without the ANSI setting the view
            # was made with (this session has the default, which Spark does not store).
            assert replace_text(_EPOCH_TEXT.format(3600))
            assert spark.sql(f"SELECT t FROM {view}").first()[0] == "1970-01-01 10:00:00"
            assert session_part(client, database, "epoch") == made_by_sql(
                spark, client, database, _EPOCH_TEXT.format(3600)
            )
            assert "view.sqlConfig.spark.sql.ansi.enabled" not in session_part(
                client, database, "epoch"
            )
        with session_settings(spark, {"spark.sql.session.timeZone": "America/New_York"}):
            # The same text under other settings: the settings are stored still.
            assert replace_text(_EPOCH_TEXT.format(3600))
            assert spark.sql(f"SELECT t FROM {view}").first()[0] == "1969-12-31 20:00:00"
    finally:
        client.close()
        spark.sql(f"DROP DATABASE spark_catalog.`{database}` CASCADE")
