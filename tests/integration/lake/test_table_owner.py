"""Tables the stream writer creates through Iceberg's Java API (``create_table_directly``)
carry the ``owner`` table property as Spark's ``CREATE TABLE`` sets it (the session's user),
so tools that show or check a table's owner see the same for both kinds."""

from __future__ import annotations

import pytest

from tests.integration.lake.conftest import Lake

COLUMNS = (("id", "BIGINT"), ("dt", "STRING"))


def _properties(lake: Lake, table: str) -> dict[str, str]:
    java_table = lake.catalog._table(lake.namespace, table)
    return {str(key): str(value) for key, value in dict(java_table.properties()).items()}


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_a_table_created_directly_has_the_owner_spark_would_give_it(lake: Lake) -> None:
    lake.catalog.create_table(lake.namespace, "by_sql", COLUMNS, partitioned_by=["dt"])
    lake.catalog.create_table_directly(lake.namespace, "direct", COLUMNS, partitioned_by="dt")
    lake.catalog.create_table_directly(
        lake.namespace, "named", COLUMNS, partitioned_by="dt", properties={"owner": "etl"}
    )

    by_sql = _properties(lake, "by_sql")
    assert by_sql.get("owner"), "Spark's CREATE TABLE sets an owner"
    assert _properties(lake, "direct").get("owner") == by_sql["owner"]
    # An owner the caller names is kept, as Spark keeps one given in TBLPROPERTIES.
    assert _properties(lake, "named")["owner"] == "etl"
