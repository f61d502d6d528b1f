"""The snapshot read as downstream users read it: ``cdc-mirror sql-server`` (Spark's Thrift
server, HiveServer2 protocol) in a process of its own, queried with beeline (the HiveServer2
client shipped with Spark). The merge runs in this module's Spark session; the server finds
the snapshot table, its day tags and the dt view through the shared metastore, also after the
next day's merge changed the view's stored text. Here on local disk; on S3 (every run) and
HDFS (``CDC_TEST_HDFS=1``) in ``test_merge_remote.py``'s Spark session, so that no storage
needs a Spark session of its own for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark

from cdc_mirror.processes import Component, free_port, port_free
from cdc_platform.lake_snapshots import day_tag, days_view
from merge.job import Merger, MergeRequest
from tests.integration.merge.harness import Shop, snapshot_rows
from tests.integration.merge.test_merge import DAY1, DAY2, ROOT, merged_first_day

SPARK_HOME = Path(pyspark.__file__).parent
STARTUP_TIMEOUT_S = 300.0


def beeline(port: int, query: str, timeout_s: float = 300.0) -> list[list[str]]:
    """Rows of ``query`` through beeline, tab-separated values as text (NULL as 'NULL')."""
    result = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "beeline"),
            "-u",
            f"jdbc:hive2://127.0.0.1:{port}/default",
            "-n",
            "cdc",
            "--silent=true",
            "--showHeader=false",
            "--outputformat=tsv2",
            "--nullemptystring=false",
            "-e",
            query,
        ],
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = []
    for printed in result.stdout.splitlines():
        # beeline echoes its prompt before the first line of output.
        line = printed.split("> ", 1)[1] if "jdbc:hive2://" in printed else printed
        if line:
            rows.append(line.split("\t"))
    return rows


def test_snapshot_through_the_thrift_server_with_beeline(
    spark: Any, shop: Shop, tmp_path: Path
) -> None:
    thrift_query_scenario(spark, shop, tmp_path)


def thrift_query_scenario(spark: Any, shop: Shop, tmp_path: Path) -> None:
    """A day merged in ``spark``'s lake, then read through a ``cdc-mirror sql-server`` of its
    own with beeline: the day tag, the days view, the table and its tags equal MySQL."""
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    placed = merged_first_day(spark, shop, merger, 30)
    expected = snapshot_rows(spark, settings, shop.table, DAY1)
    mysql = shop.mysql_rows()
    assert sorted(expected) == sorted(mysql)

    port = free_port()
    server = Component(
        "sql-server",
        [
            "--config",
            str(shop.write_config(tmp_path / "sql.yaml")),
            "sql-server",
            "--port",
            str(port),
        ],
        env={"PYSPARK_PYTHON": sys.executable},
        log_path=tmp_path / "sql-server.log",
        cwd=ROOT,
    ).start()
    try:
        server.wait_until(lambda: not port_free(port), STARTUP_TIMEOUT_S, "the SQL server")
        table = merger.store.name(shop.table)
        columns = "order_no, cast(amount AS string), status, note, _shard"
        found = beeline(
            port,
            f"SELECT {columns} FROM {table} VERSION AS OF '{day_tag(DAY1)}' ORDER BY order_no",
        )
        assert [row[0] for row in found] == sorted(mysql)
        for order_no, amount, status, note, shard in found:
            row = mysql[order_no]
            assert (amount, status, shard) == (row["amount"], row["status"], row["_shard"])
            assert note == (row["note"] if row["note"] is not None else "NULL")
        # The old dt layout's query, through the days view; the newest day, the plain table.
        view = days_view(settings, shop.table)
        by_day = beeline(
            port, f"SELECT {columns} FROM {view} WHERE dt = '{DAY1}' ORDER BY order_no"
        )
        assert by_day == found
        assert beeline(port, f"SELECT {columns} FROM {table} ORDER BY order_no") == found
        tags = beeline(port, f"SELECT name FROM {table}.refs WHERE type = 'TAG'")
        assert tags == [[day_tag(DAY1)]]
        # The next day changes the view's stored text in place (no CREATE VIEW): the server,
        # another process, reads both days through it, each as its tag.
        shop.start_day(DAY2)
        changed = sorted(placed)[0]
        shop.update(placed[changed], changed)
        shop.write_raw(spark, DAY2)
        merger.merge(MergeRequest(shop.table, DAY2))
        day2 = beeline(port, f"SELECT {columns} FROM {view} WHERE dt = '{DAY2}' ORDER BY order_no")
        tagged = f"SELECT {columns} FROM {table} VERSION AS OF '{day_tag(DAY2)}' ORDER BY order_no"
        assert day2 == beeline(port, tagged)
        assert [row[0] for row in day2] == sorted(shop.mysql_rows())
        days = f"SELECT {columns} FROM {view} WHERE dt = '{DAY1}' ORDER BY order_no"
        assert beeline(port, days) == found
    finally:
        server.terminate(timeout_s=60)
    assert server.returncode == 0, (tmp_path / "sql-server.log").read_text()[-3000:]
