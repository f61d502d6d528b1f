"""Kudu's test binaries for the local stack: unpacking the kudu-binary jar, and health checks.

Maven resolves ``org.apache.kudu:kudu-binary`` (classifier ``linux-x86_64``) into
``<home>/jars/kudu/``: a jar holding ``kudu-master``, ``kudu-tserver``, the ``kudu`` tool and
the libraries they link against. It is unpacked once into ``<home>/kudu/<jar name>/`` and the
processes run with ``LD_LIBRARY_PATH`` at its ``lib/`` and ``SASL_PATH`` at its ``lib/sasl2/``
(without the latter every connection fails SASL negotiation). These binaries are built by the
Kudu project for test clusters: the local stack and the tests use them; a deployment points
``kudu.masters`` at its own cluster.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from simple_binlog.errors import StackError

_BINARIES = ("kudu", "kudu-master", "kudu-tserver")


def unpack_binaries(jars: Path, home: Path) -> Path:
    """The unpacked ``kudu-binary-<version>-linux-x86_64`` folder (unpacked when missing)."""
    found = sorted(jars.glob("kudu-binary-*.jar"))
    if not found:
        raise StackError(f"kudu: no kudu-binary jar in {jars}; the jar resolution failed.")
    jar = found[-1]
    folder = home / jar.stem
    if all((folder / "bin" / name).is_file() for name in _BINARIES):
        return folder
    staging = home / f".{jar.stem}.unpacking"
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(jar) as archive:
        archive.extractall(staging)
    unpacked = staging / jar.stem
    if not unpacked.is_dir():
        raise StackError(f"kudu: {jar.name} does not hold the folder {jar.stem}/.")
    for name in _BINARIES:
        (unpacked / "bin" / name).chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)
    unpacked.rename(folder)
    shutil.rmtree(staging, ignore_errors=True)
    return folder


def environment(folder: Path) -> dict[str, str]:
    """What the binaries need: their own libraries, and SASL's plugins among them."""
    return {"LD_LIBRARY_PATH": str(folder / "lib"), "SASL_PATH": str(folder / "lib" / "sasl2")}


def _entities(web_port: int) -> dict[str, object] | None:
    try:
        url = f"http://127.0.0.1:{web_port}/dump-entities"
        with urllib.request.urlopen(url, timeout=2) as response:
            document = json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def master_answers(web_port: int) -> bool:
    """The master's web server answers and the master is the (only) leader."""
    entities = _entities(web_port)
    masters = entities.get("masters") if entities else None
    return isinstance(masters, list) and any(
        isinstance(m, dict) and m.get("role") == "LEADER" for m in masters
    )


def tserver_registered(master_web_port: int, tserver_rpc: str) -> bool:
    """The master counts the tablet server at ``tserver_rpc`` as live (tables can be made)."""
    entities = _entities(master_web_port)
    servers = entities.get("tablet_servers") if entities else None
    return isinstance(servers, list) and any(
        isinstance(s, dict) and s.get("live") is True and tserver_rpc in (s.get("rpc_addrs") or ())
        for s in servers
    )
