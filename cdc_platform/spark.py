"""One way to build a SparkSession for every Spark job of cdc-mirror.

Jars come from the stack's Maven step (``<stack.home>/jars/spark``), never from Ivy at run
time: the Kafka source of the same Spark release plus JDBC drivers. Hive support talks to the
shared metastore (PostgreSQL by default) so several Spark processes can use it at once.
``pyspark`` is imported lazily: importing this module starts nothing. PySpark is the optional
``spark`` extra (pyproject.toml): only the lake's commands need it, and when it is missing they
end with :data:`SPARK_MISSING` (:func:`spark_missing_error`) instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc_platform.config import Settings
from simple_binlog.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The one sentence a command that needs Spark ends with when the extra is not installed.
SPARK_MISSING = (
    "this command needs PySpark, which is not installed: pip install 'cdc-mirror[spark]'"
)
# The packages the extra brings: py4j is PySpark's bridge to the JVM and comes with it.
SPARK_PACKAGES = frozenset({"pyspark", "py4j"})


def spark_missing_error(error: ImportError) -> ConfigError | None:
    """The user's error for an import that failed because the ``spark`` extra is missing, or
    None when ``error`` is about some other module (a real bug, left to propagate)."""
    missing = getattr(error, "name", None) or ""
    if missing.split(".", 1)[0] in SPARK_PACKAGES:
        return ConfigError(SPARK_MISSING)
    return None


def require_spark() -> None:
    """Raise :data:`SPARK_MISSING` (a ``ConfigError``) unless PySpark can be imported; for
    callers that start Spark in a child process, whose own error would be a log file's."""
    if importlib.util.find_spec("pyspark") is None:
        raise ConfigError(SPARK_MISSING)


# HotSpot never JIT-compiles a method of more than 8,000 bytes of bytecode: it runs it
# interpreted for ever. Spark's whole-stage code generation can make one that big: the stream
# writer's batch stage (Kafka rows, parse, routing, checks, the raw table's row struct) had
# its generated processNext interpreted, the top frame of ~35 % of the task threads' JFR
# samples at 1M-row batches (bench/results/2026-11-27-writer-rows-s17). Executors too: they
# run the tasks off local mode.
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"

# Settings whose value is a secret, by key: Spark's own default ``spark.redaction.regex``
# plus the hyphenated ``access-key`` of Iceberg's S3FileIO (``s3.access-key-id``) and a JAAS
# configuration, whose value holds a password (Kafka's ``sasl.jaas.config``: the Kafka
# source's ``kafka.sasl.jaas.config`` option, which Spark shows in plans unless this matches).
# They never go through the session builder: PySpark starts the JVM with every builder setting
# as a ``--conf key=value`` argument of ``spark-submit``, and a process's arguments are readable
# by every local user (``ps -ww``, /proc/<pid>/cmdline). :func:`set_secret_conf` sets them once
# the JVM runs, before anything reads them.
SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.\-]?key|jaas")
# Secrets Spark itself reads only while its JVM starts (its RPC authentication, its TLS key
# stores): set afterwards they would be ignored, and on the builder they would be on argv.
# Refused by ``split_secret_conf``, saying where they go instead.
JVM_START_SECRET = re.compile(r"^spark\.(?:authenticate|ssl)\.")
HADOOP_PREFIX = "spark.hadoop."

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")
_JDO_PACKAGE = re.compile(r'<package\s+name="(?P<name>[\w.]+)"')
_JDO_CLASS = re.compile(r'<class\s+name="(?P<name>\w+)"(?P<attributes>[^>]*)>')


def _artifact(jar_name: str) -> str:
    match = _VERSIONED_JAR.match(jar_name)
    return match.group("artifact") if match else jar_name


def extra_jars(jars_dir: Path, spark_home: Path) -> list[Path]:
    """The resolved jars that PySpark does not ship already (same artifact, any version)."""
    shipped = {_artifact(p.name) for p in (spark_home / "jars").glob("*.jar")}
    jars = sorted(p for p in jars_dir.glob("*.jar") if _artifact(p.name) not in shipped)
    if not any(p.name.startswith("spark-sql-kafka") for p in jars):
        raise ConfigError(
            f"the Spark Kafka connector is missing from {jars_dir}; run 'cdc-mirror stack up'."
        )
    return jars


def metastore_model_classes(spark_home: Path) -> list[str]:
    """The persistent classes of the Hive metastore shipped with PySpark (its package.jdo).

    DataNucleus creates a class's tables only when the class is first used; naming every
    class at start-up makes the one-off initialisation create the whole schema.
    """
    names: list[str] = []
    for jar in sorted((spark_home / "jars").glob("hive-metastore-*.jar")):
        with zipfile.ZipFile(jar) as archive:
            jdo = archive.read("package.jdo").decode()
        package = _JDO_PACKAGE.search(jdo)
        if package is None:
            continue
        names += [
            f"{package['name']}.{match['name']}"
            for match in _JDO_CLASS.finditer(jdo)
            if 'embedded-only="true"' not in match["attributes"]
        ]
    return names


def spark_conf(
    settings: Settings,
    jars: list[Path],
    create_schema: bool = False,
    model_classes: Sequence[str] = (),
) -> dict[str, str]:
    """Pure: the Spark configuration for a cdc-mirror job."""
    lake = settings.lake_dir
    classpath = ":".join(str(p) for p in jars)
    conf = {
        "spark.master": settings.spark.master,
        "spark.jars": ",".join(str(p) for p in jars),
        # JDBC drivers must be visible to the metastore client's classloader at JVM start.
        "spark.driver.extraClassPath": classpath,
        "spark.executor.extraClassPath": classpath,
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(lake / "warehouse"),
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": (
            f"-Dderby.system.home={lake / 'derby'} {COMPILE_HUGE_METHODS}"
        ),
        "spark.executor.extraJavaOptions": COMPILE_HUGE_METHODS,
        "spark.hadoop.hive.metastore.schema.verification": "false",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        # What Spark hides in its logs, SET output and plans: the secrets above.
        "spark.redaction.regex": SECRET_KEY.pattern,
    }
    if settings.spark.master.startswith("local"):
        # One executor, so no locality to wait for; and waiting can stall a stage for good:
        # a task preferring a host where no executor runs (an HDFS block's DataNode, as
        # Iceberg's scans on hdfs:// report them) is launched only once the locality wait has
        # passed at a new resource offer, and the local backend offers only when a task
        # starts or ends (seen: Iceberg's expire_snapshots on the stack's HDFS, forever).
        conf["spark.locality.wait"] = "0s"
    if settings.spark.metastore == "postgres":
        pg = settings.postgres
        conf.update(
            {
                "spark.hadoop.javax.jdo.option.ConnectionURL": (
                    f"jdbc:postgresql://{pg.host}:{pg.port}/{pg.metastore_db}"
                ),
                "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
                "spark.hadoop.javax.jdo.option.ConnectionUserName": pg.user,
                "spark.hadoop.javax.jdo.option.ConnectionPassword": pg.password.get_secret_value(),
                # Only the one-off initialisation creates tables; jobs never race to.
                "spark.hadoop.datanucleus.schema.autoCreateAll": str(create_schema).lower(),
                "spark.hadoop.datanucleus.autoCreateSchema": str(create_schema).lower(),
            }
        )
        if create_schema and model_classes:
            # Create the tables of every class now, not only those the init session touches
            # (jobs, which may not create tables, would otherwise fail on e.g. TBL_PRIVS).
            conf["spark.hadoop.datanucleus.autoStartMechanism"] = "Classes"
            conf["spark.hadoop.datanucleus.autoStartClassNames"] = ",".join(model_classes)
    else:
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={lake / 'metastore_db'};create=true"
        )
        conf["spark.hadoop.datanucleus.schema.autoCreateAll"] = "true"
    return conf


def split_secret_conf(conf: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Pure: ``conf`` as the settings the JVM may start with and those it gets afterwards
    (a key :data:`SECRET_KEY` matches). ConfigError, naming the first such key, for a secret
    Spark reads only at its JVM's start (:data:`JVM_START_SECRET`): neither works."""
    # ``….secret.file`` (Spark's ``spark.authenticate.secret.file``) names a file, not a secret.
    secret = {
        key: value
        for key, value in conf.items()
        if SECRET_KEY.search(key) and not key.endswith(".file")
    }
    too_late = sorted(key for key in secret if JVM_START_SECRET.match(key))
    if too_late:
        raise ConfigError(
            f"{too_late[0]} cannot be given to a cdc-mirror Spark session: Spark reads it only "
            "as its JVM starts, and a setting given to the session would be on the JVM's "
            "command line; put it in spark-defaults.conf in $SPARK_CONF_DIR (a file only the "
            "service's user can read), which spark-submit reads as it starts the JVM."
        )
    return {key: value for key, value in conf.items() if key not in secret}, secret


def set_secret_conf(spark: SparkSession, secret: Mapping[str, str]) -> None:
    """Give the running session the settings :func:`split_secret_conf` kept off the JVM's
    command line, where each reader looks for them first (call before any catalog, metastore
    or file system is used: each reads its settings once, when first made).

    ``spark.hadoop.<key>``: the Hadoop configuration the session state copies for every
    Hadoop user (Hive's metastore client, Iceberg's Hive catalog, S3A, the jobs' broadcast
    configuration) and the SparkContext's (the lake's storage check, FileSystem.get).
    Others (``spark.sql.catalog.<c>.s3.*``): the session's SQL configuration, which Spark
    reads when it first loads the catalog, and the shared state's SparkConf, from which
    sessions made later take theirs (the SQL server's, one per connection). Executors get
    them from the driver: Iceberg serialises its FileIO with its properties into the tasks,
    and jobs carry the session's Hadoop configuration."""
    if not secret:
        return
    java_session: Any = spark._jsparkSession
    shared = java_session.sharedState()
    hadoop_confs = (shared.hadoopConf(), spark._jsc.hadoopConfiguration())
    for key, value in secret.items():
        if key.startswith(HADOOP_PREFIX):
            for hadoop_conf in hadoop_confs:
                hadoop_conf.set(key.removeprefix(HADOOP_PREFIX), value)
        else:
            shared.conf().set(key, value)
            spark.conf.set(key, value)


def build_session(
    settings: Settings,
    app_name: str,
    extra_conf: dict[str, str] | None = None,
    create_schema: bool = False,
) -> SparkSession:
    import pyspark  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    jars_home = settings.stack.home.resolve() / "jars"
    # Iceberg's jars too (stack/jvm/iceberg), inert until a session configures its catalog
    # (cdc_platform.iceberg): the driver's class path is fixed when the first session of a
    # process starts the JVM, so every session carries them.
    jars = [*extra_jars(jars_home / "spark", spark_home), *sorted(jars_home.glob("iceberg/*.jar"))]
    model_classes = metastore_model_classes(spark_home) if create_schema else []
    conf = spark_conf(settings, jars, create_schema, model_classes)
    launch, secret = split_secret_conf({**conf, **(extra_conf or {})})
    builder = SparkSession.builder.appName(app_name)
    for key, value in launch.items():
        builder = builder.config(key, value)
    session = builder.enableHiveSupport().getOrCreate()
    set_secret_conf(session, secret)
    return session


def spark_error_sentence(exc: BaseException, limit: int = 400) -> str:
    """One line saying what Spark, Iceberg or the JVM refused, for a log or a report.

    A PySpark error carries its own message (``desc``). A py4j Java error's text starts with
    py4j's line "An error occurred while calling o123.sql.", which names only the call: the
    sentence is then the Java exception's class and message, and its root cause's when that
    is another one (Iceberg's commit conflicts often arrive wrapped)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
            root, seen = java, 0
            while root.getCause() is not None and seen < 16:
                root, seen = root.getCause(), seen + 1
            if root is not java:
                text = f"{text} (cause: {root.toString()})"
        except Exception:  # noqa: BLE001 - a dead gateway: fall back to py4j's own text
            text = str(exc)
    else:
        lines = str(getattr(exc, "desc", None) or exc).strip().splitlines()
        text = lines[0] if lines else ""  # what follows is Spark's plan or a stack
    text = " ".join(text.split())
    return (text or type(exc).__name__)[:limit]
