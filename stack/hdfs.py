"""A single-node HDFS for the local stack: its configuration and health checks.

The NameNode and the DataNode run as two processes from the Hadoop client minicluster jar
(``<home>/jars/hdfs/``), on loopback with the stack's ports, with one configuration folder
(``<home>/conf/hdfs``: core-site.xml, hdfs-site.xml, log4j.properties) first on their
classpath. Replication 1, no permissions checks, no safe-mode wait: a disposable local
filesystem for the lake tests, not a deployment (which points ``lake.location`` at its own
``hdfs://`` NameNode).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from cdc_platform.config import LOCAL_PORTS

HOST = "127.0.0.1"


def uri() -> str:
    """The local stack's filesystem, as ``lake.location`` names it (plus a path)."""
    return f"hdfs://{HOST}:{LOCAL_PORTS['hdfs_namenode']}"


def web_uri() -> str:
    """The local stack's NameNode WebHDFS address (``lake.webhdfs``)."""
    return f"http://{HOST}:{LOCAL_PORTS['hdfs_namenode_http']}"


def site_files(data_dir: Path) -> dict[str, str]:
    """File name → content of the configuration folder."""
    core = {"fs.defaultFS": uri(), "hadoop.tmp.dir": str(data_dir / "tmp")}
    hdfs = {
        "dfs.namenode.name.dir": str(data_dir / "name"),
        "dfs.datanode.data.dir": str(data_dir / "data"),
        "dfs.replication": "1",
        "dfs.namenode.rpc-address": f"{HOST}:{LOCAL_PORTS['hdfs_namenode']}",
        "dfs.namenode.http-address": f"{HOST}:{LOCAL_PORTS['hdfs_namenode_http']}",
        "dfs.namenode.secondary.http-address": f"{HOST}:0",
        "dfs.datanode.address": f"{HOST}:{LOCAL_PORTS['hdfs_datanode']}",
        "dfs.datanode.http.address": f"{HOST}:{LOCAL_PORTS['hdfs_datanode_http']}",
        "dfs.datanode.ipc.address": f"{HOST}:{LOCAL_PORTS['hdfs_datanode_ipc']}",
        "dfs.datanode.hostname": HOST,
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.permissions.enabled": "false",
        # Leave safe mode as soon as the blocks are reported, without waiting 30 s.
        "dfs.namenode.safemode.extension": "0",
        "dfs.namenode.safemode.min.datanodes": "0",
        "dfs.webhdfs.enabled": "true",
        # A file may close once its last block is written through the pipeline (COMMITTED),
        # without waiting for the DataNode's report of it, as on a cluster. Not here: the
        # NameNode allows it only when the block expects more replicas than the minimum
        # (1), and this one keeps 1 ("is COMMITTED but numExpectedLocations = 1 <=
        # minReplication = 1" in its log), so each close waits for the report and the
        # client asks again after its re-ask delay (the lake's sessions: 4 ms,
        # cdc_platform/iceberg.py).
        "dfs.namenode.file.close.num-committed-allowed": "1",
    }
    return {
        "core-site.xml": _site(core),
        "hdfs-site.xml": _site(hdfs),
        "log4j.properties": (
            "log4j.rootLogger=INFO, console\n"
            "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.console.layout.ConversionPattern=%d %p %c{1}: %m%n\n"
            "log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN\n"
            "log4j.logger.BlockStateChange=WARN\n"
        ),
    }


def _site(properties: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in properties.items()
    )
    return (
        "<?xml version=\"1.0\"?>\n<!-- Written by 'cdc-mirror stack up'; edits are "
        f"overwritten. -->\n<configuration>\n{body}</configuration>\n"
    )


def formatted(data_dir: Path) -> bool:
    return (data_dir / "name" / "current" / "VERSION").is_file()


def _bean(query: str) -> dict[str, Any] | None:
    url = f"http://{HOST}:{LOCAL_PORTS['hdfs_namenode_http']}/jmx?qry={query}"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            beans = json.load(response).get("beans") or []
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return beans[0] if beans and isinstance(beans[0], dict) else None


def namenode_answers() -> bool:
    """Active: it serves the filesystem. After a restart it stays in safe mode until the
    DataNode reports its blocks, so leaving safe mode is the DataNode's check."""
    status = _bean("Hadoop:service=NameNode,name=NameNodeStatus")
    return status is not None and status.get("State") == "active"


def datanode_registered() -> bool:
    """The NameNode counts a live DataNode and has left safe mode: blocks can be written."""
    state = _bean("Hadoop:service=NameNode,name=FSNamesystemState")
    return (
        state is not None
        and int(state.get("NumLiveDataNodes") or 0) >= 1
        and state.get("FSState") == "Operational"
    )
