"""``io.cdcmirror.spark.SqlLockdown`` in a LOCAL-MODE Spark session (no stack, no shared
metastore): Hive support over a Derby metastore in a temporary folder, and the writer module's
jar built by Maven into a temporary ``lib.root`` (the way ``stack/install.py ensure_jars``
builds it, without touching the stack's jars folder; ``CDC_MIRROR_TEST_LOCKDOWN_JAR`` names
another jar, e.g. one built from an older commit). Needs ``java`` and ``mvn``; skipped without
them.

A user of ``cdc-mirror sql-server`` cannot register a JDBC catalog by SET (which would create a
Derby database at a path of their choosing and read any JDBC-reachable database), RESET, call
a Hive UDTF, or bring such a setting in when connecting; plain queries and the harmless
settings still work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_mirror.sql_server import LOCKDOWN_EXTENSION

ROOT = Path(__file__).resolve().parents[3]
JDBC_CATALOG = "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"
REFUSED = "cdc-mirror SQL server"


@pytest.fixture(scope="module")
def lockdown_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if given := os.environ.get("CDC_MIRROR_TEST_LOCKDOWN_JAR"):
        return Path(given)
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("needs java and mvn to build the writer module's jar")
    lib_root = tmp_path_factory.mktemp("jars")
    subprocess.run(
        [
            "mvn", "-q", "-B", "-f", str(ROOT / "stack/jvm/pom.xml"), "-pl", "writer",
            "package", f"-Dlib.root={lib_root}",
        ],
        check=True,
        cwd=ROOT,
        timeout=600,
    )  # fmt: skip
    return next((lib_root / "spark").glob("cdc-mirror-writer-jvm-*.jar"))


@pytest.fixture(scope="module")
def spark(lockdown_jar: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    home = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("sql-lockdown-unit")
        .config("spark.jars", str(lockdown_jar))
        .config("spark.sql.extensions", LOCKDOWN_EXTENSION)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.warehouse.dir", str(home / "warehouse"))
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={home / 'metastore'};create=true",
        )
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={home}")
        .enableHiveSupport()
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()


def refused(spark: Any, statement: str) -> str:
    with pytest.raises(Exception) as caught:
        rows = spark.sql(statement).collect()
        pytest.fail(f"{statement!r} was run: {rows}")  # pragma: no cover - the bug
    message = str(caught.value)
    assert REFUSED in message, message
    return message


@pytest.mark.parametrize(
    ("key", "settable"),
    [
        ("spark.sql.session.timeZone", True),
        (" SPARK.SQL.ANSI.ENABLED ", True),
        ("spark.sql.shuffle.partitions", True),
        ("spark.sql.adaptive.enabled", True),
        ("hive.server2.thrift.resultset.default.fetch.size", True),
        ("spark.sql.catalog.evil", False),
        ("spark.sql.catalog.evil.url", False),
        ("spark.sql.runSQLOnFiles", False),
        ("spark.hadoop.fs.file.impl", False),
        ("hivevar:x", False),
        ("", False),
    ],
)
def test_the_allow_list_decision(spark: Any, key: str, settable: bool) -> None:
    assert spark._jvm.io.cdcmirror.spark.SqlLockdown.settable(key) is settable


def test_queries_and_the_harmless_settings_still_work(spark: Any) -> None:
    assert spark.sql("SELECT upper('ok') AS a, 40 + 2 AS b").collect()[0].asDict() == {
        "a": "OK",
        "b": 42,
    }
    assert spark.sql("SET").count() > 0
    assert spark.sql("SET -v").count() > 0
    for statement in (
        "SET spark.sql.session.timeZone=UTC",
        "SET TIME ZONE 'UTC'",
        "SET spark.sql.ansi.enabled=true",
        "SET spark.sql.shuffle.partitions=4",
        "SET spark.sql.adaptive.enabled=true",
    ):
        spark.sql(statement).collect()
    assert spark.sql("SET spark.sql.shuffle.partitions").collect()[0]["value"] == "4"
    assert spark.sql("SELECT count(*) AS n FROM range(10)").collect()[0]["n"] == 10


def test_a_jdbc_catalog_cannot_be_registered_by_set(spark: Any, tmp_path: Path) -> None:
    database = tmp_path / "evil"
    message = refused(spark, f"SET spark.sql.catalog.evil={JDBC_CATALOG}")
    assert "cannot be changed" in message
    refused(spark, f"SET spark.sql.catalog.evil.url=`jdbc:derby:{database};create=true`")
    refused(spark, "SET spark.sql.catalog.evil.sessionInitStatement=CREATE TABLE t (a INT)")
    with pytest.raises(Exception):  # noqa: B017 - no such catalog: any error will do
        spark.sql("SELECT * FROM evil.SYS.SYSTABLES").collect()
    assert not database.exists()


@pytest.mark.parametrize(
    "statement",
    [
        "SET spark.sql.runSQLOnFiles=true",
        "SET spark.hadoop.fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem",
        "SET fs.s3a.endpoint=http://attacker.example.com",
        "SET hivevar:spark.sql.catalog.evil=" + JDBC_CATALOG,
        "SET spark.sql.warehouse.dir=/tmp/elsewhere",
    ],
)
def test_other_settings_cannot_be_changed(spark: Any, statement: str) -> None:
    refused(spark, statement)


@pytest.mark.parametrize("statement", ["RESET", "RESET spark.sql.ansi.enabled"])
def test_reset_is_refused(spark: Any, statement: str) -> None:
    refused(spark, statement)


def test_a_hive_udtf_is_refused(spark: Any) -> None:
    """A Hive UDTF already in the catalog (the server's users cannot create one): the session
    registers it through the catalog API, as a metastore function would resolve."""
    jvm = spark._jvm
    function = jvm.org.apache.spark.sql.catalyst.catalog.CatalogFunction(
        jvm.org.apache.spark.sql.catalyst.FunctionIdentifier(
            "hive_explode", jvm.scala.Option.empty(), jvm.scala.Option.empty()
        ),
        "org.apache.hadoop.hive.ql.udf.generic.GenericUDTFExplode",
        jvm.scala.jdk.javaapi.CollectionConverters.asScala(jvm.java.util.ArrayList()).toSeq(),
    )
    spark._jsparkSession.sessionState().catalog().registerFunction(
        function, True, jvm.scala.Option.empty()
    )
    message = refused(spark, "SELECT hive_explode(array(1, 2))")
    assert "Hive functions" in message
    refused(spark, "SELECT * FROM range(1) LATERAL VIEW hive_explode(array(1, 2)) t AS x")


def test_settings_given_when_connecting_are_refused(spark: Any) -> None:
    """Spark's HiveServer2 copies a client's connect-time settings (``?key=value``,
    ``#var=value``) into the new session with ``setConf``, not through SET: the same call here.
    Every statement of such a session is refused; another session is not affected."""
    attacked = spark._jsparkSession.newSession()
    attacked.sessionState().conf().setConfString("spark.sql.catalog.evil", JDBC_CATALOG)
    with pytest.raises(Exception) as caught:
        attacked.sql("SELECT 1").collectAsList()
    assert REFUSED in str(caught.value) and "spark.sql.catalog.evil" in str(caught.value)

    clean = spark._jsparkSession.newSession()
    # What HiveServer2 and the Hive JDBC driver set for every session is accepted.
    clean.sessionState().conf().setConfString("spark.sql.datetime.java8API.enabled", "true")
    clean.sessionState().conf().setConfString(
        "hive.server2.thrift.resultset.default.fetch.size", "1000"
    )
    clean.sessionState().conf().setConfString("spark.sql.session.timeZone", "UTC")
    assert clean.sql("SELECT 7").collectAsList()[0].getInt(0) == 7
