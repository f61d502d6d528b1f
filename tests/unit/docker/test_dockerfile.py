"""The Dockerfile builds the product as it is: every package pyproject.toml installs is copied
into the image before ``pip install --no-deps .`` (its dependencies come from the runtime
lock, hash-checked), its Maven step is ``ensure_jars``' and puts the
repository's own JVM classes (the stream writer's) where the image's Spark sessions load them.

Parsed from the files themselves, so a new package or module cannot be forgotten by a hand
list. tests/integration/docker/test_image_install.py installs what the COPY lines copy.
"""

from __future__ import annotations

import inspect
import re
import tomllib
from xml.etree import ElementTree

from stack import install
from stream_writer.localfs import JAR_GLOB
from tests.support.dockerfile import (
    ROOT,
    copied_sources,
    dockerfile_instructions,
    dockerfile_stages,
    installed_packages,
)

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
PROJECT_INSTALL = "pip install --no-deps . && pip check"
DEPENDENCIES_INSTALL = "pip install --require-hashes --no-deps -r requirements-runtime.lock"


def test_every_installed_package_is_copied_before_pip_install() -> None:
    packages = installed_packages()
    assert "scheduler" in packages and "cdc_platform" in packages  # the parse found the list
    copied = {source.rstrip("/") for source in copied_sources()}
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"
    # ... and before the install step that needs them.
    instructions = dockerfile_instructions()
    install_at = instructions.index(("RUN", PROJECT_INSTALL))
    copied_before = {
        word.rstrip("/")
        for keyword, arguments in instructions[:install_at]
        if keyword == "COPY"
        for word in arguments.split()[:-1]
    }
    assert packages <= copied_before
    for package in packages:
        assert (ROOT / package / "__init__.py").is_file(), package


def test_the_dependencies_are_the_runtime_lock_hash_checked_before_the_project() -> None:
    # Exactly the locked pins (tests/unit/packaging/test_lock.py ties them to the tests' lock),
    # nothing resolved at build time; then the project without dependencies, and pip check.
    instructions = dockerfile_stages()[-1]
    runs = [arguments for keyword, arguments in instructions if keyword == "RUN"]
    assert [run for run in runs if run.startswith("pip install")] == [
        DEPENDENCIES_INSTALL,
        PROJECT_INSTALL,
    ]
    dependencies_at = instructions.index(("RUN", DEPENDENCIES_INSTALL))
    assert ("COPY", "requirements-runtime.lock ./") in instructions[:dependencies_at]
    assert dependencies_at < instructions.index(("RUN", PROJECT_INSTALL))


def test_every_copied_source_exists() -> None:
    for source in copied_sources():
        assert list(ROOT.glob(source.rstrip("/"))), (
            f"the Dockerfile copies {source}, which is missing"
        )


def test_the_maven_step_is_ensure_jars_and_builds_the_writer_jar_where_spark_loads_it() -> None:
    runs = [arguments for keyword, arguments in dockerfile_instructions() if keyword == "RUN"]
    mvn = next(run for run in runs if " mvn " in f" {run} ")
    match = re.search(r"mvn (.*) -Dlib\.root=(\S+)", mvn)
    assert match is not None, mvn
    # The options and goal ensure_jars runs (stack/install.py), with the same pom.
    source = inspect.getsource(install._resolve_jars)
    assert '["mvn", "-q", "-B", "-f", str(JVM_DIR / "pom.xml"), "package"' in source
    assert match.group(1).split() == ["-q", "-B", "-f", "stack/jvm/pom.xml", "package"]
    lib_root = match.group(2)

    # The reactor builds every module ensure_jars expects and the writer's own classes ...
    parent = ElementTree.parse(ROOT / "stack" / "jvm" / "pom.xml")
    modules = {m.text for m in parent.getroot().iterfind("m:modules/m:module", POM_NS)}
    assert set(install.JVM_MODULES) | {"writer"} <= modules
    assert (
        ROOT / "stack/jvm/writer/src/main/java/io/cdcmirror/spark/IcebergBatchWrite.java"
    ).is_file()
    # ... into <lib.root>/spark, the folder the stream writer looks in (<stack.home>/jars/spark).
    writer = ElementTree.parse(ROOT / "stack" / "jvm" / "writer" / "pom.xml").getroot()
    assert writer.findtext("m:artifactId", namespaces=POM_NS) == JAR_GLOB.split("-*")[0]
    outputs = {e.text for e in writer.iter("{http://maven.apache.org/POM/4.0.0}outputDirectory")}
    assert outputs == {"${lib.root}/spark"}

    # The stage that runs Maven has a compiler (Debian's maven brings only a JRE, and the poms
    # compile Java), and the image copies that stage's lib.root.
    stages = dockerfile_stages()
    build = next(stage for stage in stages if any(mvn == a for k, a in stage if k == "RUN"))
    apt = " ".join(a for k, a in build if k == "RUN" and "apt-get install" in a)
    assert re.search(r"\bopenjdk-\d+-jdk(-headless)?\b", apt), apt
    stage_name = build[0][1].split()[-1]
    assert build[0][1].split()[-2].upper() == "AS", "the Maven stage needs a name to copy from"
    image = stages[-1]
    assert ("COPY", f"--from={stage_name} {lib_root}/ {lib_root}/") in image

    # The image's <stack.home>/jars is a link to lib.root: the jars the build resolved.
    environment = " ".join(
        arguments for keyword, arguments in dockerfile_instructions() if keyword == "ENV"
    )
    home = re.search(r"CDC_MIRROR_STACK__HOME=(\S+)", environment)
    assert home is not None
    assert f"ln -s {lib_root} {home.group(1)}/jars" in " ".join(runs)


def test_the_jars_stamp_is_written_by_the_installed_package() -> None:
    """ensure_jars keeps the built jars only if <jars>/.resolved holds the digest the installed
    stack package computes: computed from / (not the source copy) and over the same files, so
    the wheel carries the Java sources it digests."""
    stamp = next(
        arguments
        for keyword, arguments in dockerfile_instructions()
        if keyword == "RUN" and "_poms_digest" in arguments
    )
    assert stamp.startswith("cd / && python -c")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    stack_data = pyproject["tool"]["setuptools"]["package-data"]["stack"]
    assert "jvm/*/src/**/*.java" in stack_data
