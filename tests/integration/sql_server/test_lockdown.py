"""``cdc-mirror sql-server`` attacked as a hostile client would: one real server for the module
(loopback, a password configured through the environment), reached with the HiveServer2 JDBC
driver that PySpark ships (in a py4j JVM of the test's own, one for the module, so each
connection and statement costs milliseconds). A login without the right password is refused;
a logged-in user cannot read a file of the host, call a Java method or run a command, and can
still query.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from py4j.java_gateway import JavaGateway
from py4j.protocol import Py4JJavaError

from cdc_mirror.processes import free_port
from cdc_platform.config import Settings
from tests.support.sql_server import running_sql_server

ROOT = Path(__file__).resolve().parents[3]
SPARK_JARS = Path(pyspark.__file__).parent / "jars"
STARTUP_TIMEOUT_S = 300.0
USER = "bi_reader"
PASSWORD = "lockdown-test-Secret-7"
SECRET = "the-host-secret-4f1c"  # the content of the host file the attacks go after
RUN = uuid.uuid4().hex[:8]  # names of what a successful attack would create


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("host") / "secret.txt"
    path.write_text(SECRET + "\n")
    return path


def cli_sql(*statements: str) -> None:
    """Statements through ``cdc-mirror sql`` (a process of its own: a SparkSession in this one
    would patch py4j for every gateway, the JDBC client's too)."""
    result = subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "sql", *statements],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def hive_text_table(local_stack: Settings, secret_file: Path) -> Iterator[str]:
    """A Hive text table in the shared metastore for LOAD DATA to aim at, made with the
    operator's ``cdc-mirror sql`` (the server's own sessions may not create tables)."""
    name = f"default.lockdown_target_{RUN}"
    location = secret_file.parent / "target"
    cli_sql(f"CREATE TABLE {name} (line string) STORED AS TEXTFILE LOCATION '{location}'")
    try:
        yield name
    finally:
        cli_sql(f"DROP TABLE IF EXISTS {name}")


@pytest.fixture(scope="module")
def server(local_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    log_path = tmp_path_factory.mktemp("sql-server") / "sql-server.log"
    port = free_port()
    with running_sql_server(port, USER, PASSWORD, log_path, STARTUP_TIMEOUT_S):
        yield port


@pytest.fixture(autouse=True, scope="module")
def plain_py4j_errors() -> Iterator[None]:
    """Once a Spark session has run in this process, PySpark routes every py4j error through
    its own converter, which asks the Spark JVM about an exception of this module's own JVM
    and fails with an unrelated Py4JError; this module's JDBC calls get py4j's own errors."""
    import py4j.java_gateway
    import py4j.protocol

    patched = py4j.java_gateway.get_return_value
    py4j.java_gateway.get_return_value = py4j.protocol.get_return_value
    yield
    py4j.java_gateway.get_return_value = patched


@pytest.fixture(scope="module")
def jvm() -> Iterator[Any]:
    """A JVM with Hive's JDBC driver (from PySpark's jars), driven through py4j."""
    py4j_jar = next(SPARK_JARS.glob("py4j-*.jar"))
    gateway = JavaGateway.launch_gateway(
        jarpath=str(py4j_jar),
        classpath=str(SPARK_JARS / "*"),
        die_on_exit=True,
        redirect_stdout=subprocess.DEVNULL,
        redirect_stderr=subprocess.DEVNULL,
    )
    gateway.jvm.java.sql.DriverManager.setLoginTimeout(60)
    yield gateway.jvm
    gateway.shutdown()


def connect(jvm: Any, port: int, user: str, password: str | None) -> Any:
    properties = jvm.java.util.Properties()
    properties.setProperty("user", user)
    if password is not None:
        properties.setProperty("password", password)
    url = f"jdbc:hive2://127.0.0.1:{port}/default"
    return jvm.java.sql.DriverManager.getConnection(url, properties)


@pytest.fixture(scope="module")
def session(jvm: Any, server: int) -> Iterator[Any]:
    connection = connect(jvm, server, USER, PASSWORD)
    yield connection
    connection.close()


def run(connection: Any, statement: str) -> list[list[str | None]]:
    with_result = connection.createStatement()
    try:
        if not with_result.execute(statement):
            return []
        rows = with_result.getResultSet()
        width = rows.getMetaData().getColumnCount()
        found = []
        while rows.next():
            found.append([rows.getString(i) for i in range(1, width + 1)])
        return found
    finally:
        with_result.close()


def refused(connection: Any, statement: str) -> str:
    """The server's error for ``statement``, which must fail and must not show the secret."""
    with pytest.raises(Py4JJavaError) as caught:
        rows = run(connection, statement)
        pytest.fail(f"{statement!r} was run: {rows}")  # pragma: no cover - the bug
    message = str(caught.value.java_exception.getMessage())
    assert SECRET not in message
    return message


def login_error(jvm: Any, port: int, user: str, password: str | None) -> str:
    with pytest.raises(Py4JJavaError) as caught:
        connect(jvm, port, user, password).close()
    return str(caught.value.java_exception.getMessage())


# -- logins ---------------------------------------------------------------------------------
def test_a_login_without_a_password_is_refused(jvm: Any, server: int) -> None:
    assert "Error validating the login" in login_error(jvm, server, USER, None)


def test_a_login_with_a_wrong_password_is_refused(jvm: Any, server: int) -> None:
    assert "Error validating the login" in login_error(jvm, server, USER, PASSWORD + "x")


def test_a_login_as_another_user_with_the_password_is_refused(jvm: Any, server: int) -> None:
    assert "Error validating the login" in login_error(jvm, server, "admin", PASSWORD)


def test_the_configured_user_can_query(session: Any) -> None:
    assert run(session, "SELECT upper('ok'), 40 + 2") == [["OK", "42"]]
    assert ["default"] in run(session, "SHOW DATABASES")
    run(session, "CREATE TEMPORARY VIEW numbers AS SELECT id FROM range(3)")
    assert run(session, "SELECT sum(id) FROM numbers") == [["3"]]


# -- files of the host ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM text.`{path}`",
        "SELECT * FROM csv.`file://{path}`",
        "SELECT * FROM IDENTIFIER('text.`{path}`')",
        "CREATE TEMPORARY VIEW leak USING text OPTIONS (path '{path}')",
        "CREATE TABLE leak_a_{run} (line string) USING text LOCATION 'file://{dir}'",
        "CREATE TABLE leak_b_{run} (line string) STORED AS TEXTFILE LOCATION 'file://{dir}'",
        "ADD FILE {path}",
        "ADD JAR {path}",
        "INSERT OVERWRITE LOCAL DIRECTORY '{dir}/out' SELECT 1",
        "SELECT TRANSFORM(id) USING 'cat {path}' FROM range(1)",
    ],
)
def test_a_host_file_cannot_be_read(session: Any, secret_file: Path, statement: str) -> None:
    refused(session, statement.format(path=secret_file, dir=secret_file.parent, run=RUN))


def test_a_host_file_cannot_be_loaded_into_a_table(
    session: Any, secret_file: Path, hive_text_table: str
) -> None:
    refused(session, f"LOAD DATA LOCAL INPATH '{secret_file}' INTO TABLE {hive_text_table}")
    assert run(session, f"SELECT count(*) FROM {hive_text_table}") == [["0"]]


def test_sql_on_files_cannot_be_switched_back_on(session: Any, secret_file: Path) -> None:
    message = refused(session, "SET spark.sql.runSQLOnFiles=true")
    assert "cannot be changed" in message
    refused(session, f"SELECT * FROM text.`{secret_file}`")


# -- Java ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "statement",
    [
        "SELECT reflect('java.lang.System', 'getProperty', 'user.home')",
        "SELECT java_method('java.lang.System', 'getenv', 'PATH')",
        "SELECT try_reflect('java.lang.System', 'getProperty', 'user.home')",
        "SELECT 1 WHERE 'x' IN (SELECT java_method('java.lang.System', 'getenv', 'PATH'))",
        "SELECT reflect('java.lang.System', 'setProperty', 'hive.server2.authentication', 'NONE')",
        "CREATE TEMPORARY FUNCTION r AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
    ],
)
def test_java_methods_cannot_be_called(session: Any, statement: str) -> None:
    message = refused(session, statement)
    assert "cdc-mirror SQL server" in message


# -- settings ------------------------------------------------------------------------------
JDBC_CATALOG = "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"


def test_a_jdbc_catalog_cannot_be_registered_by_set(session: Any, secret_file: Path) -> None:
    """SET of a catalog would let a user create a Derby database at a path of their choosing,
    read any JDBC-reachable database and run SQL there (sessionInitStatement)."""
    database = secret_file.parent / f"evil_{RUN}"
    message = refused(session, f"SET spark.sql.catalog.evil_{RUN}={JDBC_CATALOG}")
    assert "cannot be changed" in message
    refused(session, f"SET spark.sql.catalog.evil_{RUN}.url=`jdbc:derby:{database};create=true`")
    refused(
        session, f"SET spark.sql.catalog.evil_{RUN}.sessionInitStatement=`CREATE TABLE t (a INT)`"
    )
    with pytest.raises(Py4JJavaError):
        run(session, f"SELECT * FROM evil_{RUN}.SYS.SYSTABLES")
    assert not database.exists()


@pytest.mark.parametrize(
    "statement",
    [
        "SET spark.hadoop.fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem",
        "SET spark.sql.warehouse.dir=/tmp/elsewhere",
        "RESET",
        "RESET spark.sql.ansi.enabled",
    ],
)
def test_other_settings_and_reset_are_refused(session: Any, statement: str) -> None:
    assert "cdc-mirror SQL server" in refused(session, statement)


def test_the_harmless_settings_can_be_changed(session: Any) -> None:
    for statement in (
        "SET spark.sql.session.timeZone=UTC",
        "SET spark.sql.ansi.enabled=true",
        "SET spark.sql.shuffle.partitions=4",
        "SET spark.sql.adaptive.enabled=true",
    ):
        run(session, statement)
    assert run(session, "SET spark.sql.shuffle.partitions") == [
        ["spark.sql.shuffle.partitions", "4"]
    ]
    assert run(session, "SELECT 40 + 2") == [["42"]]


def connect_url(jvm: Any, url: str) -> Any:
    properties = jvm.java.util.Properties()
    properties.setProperty("user", USER)
    properties.setProperty("password", PASSWORD)
    return jvm.java.sql.DriverManager.getConnection(url, properties)


@pytest.mark.parametrize(
    "suffix",
    [
        # ?key=value: a Hive setting (set:hiveconf:), copied into the Spark session.
        f"?spark.sql.catalog.evil_{RUN}={JDBC_CATALOG}",
        # #var=value: a Hive variable (set:hivevar:), copied into the Spark session too.
        f"#spark.sql.catalog.evil_{RUN}={JDBC_CATALOG}",
        "?spark.sql.runSQLOnFiles=true",
    ],
)
def test_settings_given_when_connecting_are_refused(
    jvm: Any, server: int, secret_file: Path, suffix: str
) -> None:
    """HiveServer2 applies them to the session without a SET statement: the session is refused
    when it opens (its ``USE default`` is checked) or, at the latest, at its first statement."""
    url = f"jdbc:hive2://127.0.0.1:{server}/default{suffix}"
    try:
        connection = connect_url(jvm, url)
    except Py4JJavaError as caught:
        message = str(caught.java_exception.getMessage())
        assert "cdc-mirror SQL server" in message or "Failed to open new session" in message
        return
    try:
        assert "cdc-mirror SQL server" in refused(connection, "SELECT 1")
        refused(connection, f"SELECT * FROM text.`{secret_file}`")
    finally:
        connection.close()


def test_a_clean_connection_still_works_after_a_refused_one(jvm: Any, server: int) -> None:
    url = f"jdbc:hive2://127.0.0.1:{server}/default"
    with contextlib.suppress(Py4JJavaError):  # refused when it opens
        connect_url(jvm, f"{url}?spark.sql.catalog.x={JDBC_CATALOG}").close()
    connection = connect_url(jvm, url)
    try:
        assert run(connection, "SELECT upper('ok')") == [["OK"]]
    finally:
        connection.close()


@pytest.fixture(scope="module")
def hive_udtf(local_stack: Settings) -> Iterator[str]:
    """A permanent Hive UDTF in the shared metastore (Hive's own explode), made with the
    operator's ``cdc-mirror sql``: the server's users cannot create functions."""
    name = f"default.lockdown_explode_{RUN}"
    cli_sql(f"CREATE FUNCTION {name} AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDTFExplode'")
    try:
        yield name
    finally:
        cli_sql(f"DROP FUNCTION IF EXISTS {name}")


def test_a_hive_udtf_is_refused(session: Any, hive_udtf: str) -> None:
    """Hive functions are refused by class (UDF, UDAF and UDTF wrappers alike), not by name."""
    message = refused(session, f"SELECT {hive_udtf}(array(1, 2))")
    assert "Hive functions" in message
