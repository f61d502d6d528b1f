"""What a view's metastore record holds of the session that stored it, for tests of views
changed by a metastore call (``cdc_platform.lake.replace_view_text``): Spark stores the
session's SQL settings and namespace with a view (``view.sqlConfig.*``,
``view.catalogAndNamespace.*``) and runs the view with them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cdc_platform import lake


def session_part(client: Any, database: str, view: str) -> dict[str, str]:
    """The view's stored properties Spark takes from the session (settings, namespace)."""
    return lake.session_part(client.getTable(database, view).getParameters())


def made_by_sql(spark: Any, client: Any, database: str, text: str) -> dict[str, str]:
    """``session_part`` of a view of ``text`` made now by ``CREATE VIEW`` (then dropped)."""
    spark.sql(f"CREATE VIEW spark_catalog.`{database}`.`by_sql` AS {text}")
    try:
        return session_part(client, database, "by_sql")
    finally:
        spark.sql(f"DROP VIEW spark_catalog.`{database}`.`by_sql`")


@contextmanager
def session_settings(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in the session, then the session's own again (the session is shared)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
