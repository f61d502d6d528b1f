"""No secret on a process's command line: a Spark job's JVM (PySpark starts it with
``spark-submit --conf key=value`` for each builder setting), which every local user can read
(``ps -ww``, /proc/<pid>/cmdline), never carries the lake's S3 keys or the metastore's
database password, and the lake still works on S3 with the keys given after the start.

The job runs in a process of its own (``lake_session`` as every component calls it), so its
JVM is started here and not reused from another test's session."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from cdc_mirror.processes import free_port
from cdc_platform.config import Settings
from cdc_platform.iceberg import S3Storage, storage_for
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from tests.integration.lake.conftest import with_lake
from tests.support.sql_server import running_sql_server

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 600

# The child: a product session on the S3 lake; prints its pid, waits until the test has read
# the command lines, then writes and reads a table through the catalog, in its session and in
# a new one (as the SQL server's connections get), and drops it.
JOB = """
import os
import sys
from cdc_platform.config import load_settings
from cdc_platform.iceberg import LakeCatalog, lake_session, storage_for

settings = load_settings()
spark = lake_session(settings, "cdc-mirror-secrets-test")
print("PID", os.getpid(), flush=True)
sys.stdin.readline()
LakeCatalog.open(spark, settings)  # the storage check: S3A with the keys
table = f"{settings.lake.catalog}.{sys.argv[1]}.t"
spark.sql(f"CREATE NAMESPACE {settings.lake.catalog}.{sys.argv[1]}")
spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg")
spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
rows = spark.newSession().sql(f"SELECT id, v FROM {table} ORDER BY id").collect()
print("ROWS", [(row.id, row.v) for row in rows], flush=True)
print("SET", spark.newSession().sql("SET").collect(), flush=True)  # what a SQL client sees
# What jobs ship to executors (a cluster's do not share the driver's JVM): the S3A keys too.
shipped = spark._jsparkSession.sessionState().newHadoopConf().get("fs.s3a.secret.key")
print("SHIPPED", shipped in storage_for(settings).secrets(), flush=True)
spark.sql(f"DROP TABLE {table} PURGE")
spark.sql(f"DROP NAMESPACE {settings.lake.catalog}.{sys.argv[1]}")
spark.stop()
"""


def job_pid(stdout: IO[str]) -> int:
    """The pid the child prints once its session runs (the JVM prints lines of its own)."""
    for line in stdout:
        if line.startswith("PID "):
            return int(line.split()[1])
    return 0


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (by their parent, from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_line(pid: int) -> list[str]:
    return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode().split("\0")


def assert_no_secret_in_arguments(pid: int, secrets: set[str]) -> None:
    """Neither ``pid`` nor a process under it (its Spark JVM) has a secret in its arguments."""
    lines = {p: command_line(p) for p in [pid, *descendants(pid)]}
    jvms = [p for p, argv in lines.items() if Path(argv[0]).name == "java"]
    assert jvms, lines  # the session's JVM is under the process
    for p, argv in lines.items():
        # Counted, not listed: a failure must not print them either.
        leaked = sum(any(s in argument for argument in argv) for s in secrets)
        assert leaked == 0, f"process {p} carries {leaked} secret(s) in its arguments"


def lake_secrets(settings: Settings) -> set[str]:
    """The S3 keys of the lake of ``settings`` and the metastore database's password."""
    storage = storage_for(settings)
    assert isinstance(storage, S3Storage)
    assert settings.spark.metastore == "postgres"
    return {*storage.secrets(), settings.postgres.password.get_secret_value()}


def lake_env(settings: Settings) -> dict[str, str]:
    return {
        "CDC_MIRROR_LAKE__LOCATION": settings.lake.location or "",
        "CDC_MIRROR_LAKE__CATALOG": settings.lake.catalog,
    }


@pytest.fixture
def s3_lake(local_stack: Settings, s3_service: Settings) -> Iterator[Settings]:
    yield with_lake(
        local_stack, f"s3://{LOCAL_S3_BUCKET}/cdc-tests/secrets-{uuid.uuid4().hex[:8]}", "lake_s3"
    )


def test_a_lake_job_has_no_secret_on_its_jvms_command_line(s3_lake: Settings) -> None:
    secrets = lake_secrets(s3_lake)
    assert len(secrets) == 3
    namespace = f"sec_{uuid.uuid4().hex[:10]}"
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, namespace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, **lake_env(s3_lake)},
    )
    try:
        assert job.stdout is not None and job.stdin is not None
        pid = job_pid(job.stdout)
        assert pid == job.pid, job.stderr.read() if job.stderr else ""
        assert_no_secret_in_arguments(pid, secrets)
        out, err = job.communicate("\n", timeout=TIMEOUT_S)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, err[-3000:]
    assert "ROWS [(1, 'a'), (2, 'b')]" in out.splitlines(), err[-3000:]
    # Spark redacts them where it shows settings (SET lists the catalog's, S3 keys included).
    assert "s3.access-key-id" in out
    assert "SHIPPED True" in out.splitlines()
    assert sum(secret in out + err for secret in secrets) == 0


def test_the_sql_server_has_no_secret_on_its_jvms_command_line(
    s3_lake: Settings, tmp_path: Path
) -> None:
    # ``cdc-mirror sql-server`` (``./run sql-server``): its login password as well.
    password = f"sql-{uuid.uuid4().hex}"
    secrets = {*lake_secrets(s3_lake), password}
    log_path = tmp_path / "sql-server.log"
    with running_sql_server(
        free_port(), "bi_reader", password, log_path, TIMEOUT_S, lake_env(s3_lake)
    ) as server:
        assert server.pid is not None
        assert_no_secret_in_arguments(server.pid, secrets)
    log = log_path.read_text()
    assert sum(secret in log for secret in secrets) == 0
