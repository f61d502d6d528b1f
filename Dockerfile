# syntax=docker/dockerfile:1
# The cdc-mirror application image (docker-compose.yml builds it as cdc-mirror:local).
# Java runs Spark (PySpark starts a JVM); Maven resolves the Spark Kafka connector and the JDBC
# drivers from stack/jvm/pom.xml at build time, so nothing is downloaded at run time.

# Stage "jars": Maven with a JDK. The poms compile the repository's own classes, and Debian's
# maven package brings only a JRE, which has no compiler; the image itself needs only the JRE.
FROM python:3.11-slim-bookworm AS jars

# The JDK's post-install step links its man pages into /usr/share/man/man1, which the slim
# image leaves out.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/cdc-mirror/src

# The same command as stack/install.py ensure_jars, into <lib.root>/<module>/ (kafka,
# zookeeper, spark, kudu, hdfs, iceberg); the repository's own classes (stack/jvm/writer: the
# stream writer's IcebergBatchWrite, the JSON parse, the SQL server's lockdown) are compiled
# here too and land in <lib.root>/spark/, where every Spark session of the image loads them from.
COPY stack/jvm/ stack/jvm/
RUN --mount=type=cache,target=/root/.m2 \
    mvn -q -B -f stack/jvm/pom.xml package -Dlib.root=/opt/cdc-mirror/jars

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The JRE's post-install step links its man pages into /usr/share/man/man1 (as above).
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/cdc-mirror/src

# The jars first: this layer changes only when stack/jvm does.
COPY --from=jars /opt/cdc-mirror/jars/ /opt/cdc-mirror/jars/

# Python dependencies next (PySpark is large): rebuilt only when the runtime lock changes. It
# holds pyproject.toml's dependencies and the spark extra (the image runs the lake's jobs too)
# at the versions of requirements.lock, the ones the tests ran with, every one hash-checked and
# nothing resolved here ('./run lock' writes both; docs/operations.md, Installing).
COPY requirements-runtime.lock ./
RUN pip install --require-hashes --no-deps -r requirements-runtime.lock

# The packages themselves: every top-level package of pyproject.toml's
# [tool.setuptools.packages.find] (tests/unit/docker/test_dockerfile.py checks the two agree).
# Listed one by one rather than `COPY . .`, so a checkout's .venv and var/ (the local stack's
# data, jars and logs) never enter the image. pip check: the runtime lock satisfies what
# pyproject.toml asks for.
COPY pyproject.toml README.m[d] ./
COPY simple_binlog/ simple_binlog/
COPY cdc_platform/ cdc_platform/
COPY governance/ governance/
COPY cdc_mirror/ cdc_mirror/
COPY stack/ stack/
COPY collector/ collector/
COPY mock_replay/ mock_replay/
COPY stream_writer/ stream_writer/
COPY merge/ merge/
COPY mirror/ mirror/
COPY webui/ webui/
COPY validation/ validation/
COPY scheduler/ scheduler/
RUN pip install --no-deps . && pip check

# ensure_jars re-resolves (deleting the jars first) unless <jars>/.resolved holds the digest of
# the installed poms; record it so 'cdc-mirror stack up spark' in a container keeps these jars.
# From / so Python imports the installed stack package (what runs later), not the source copy
# in the working directory: their stack/jvm trees differ (the wheel holds the poms only).
RUN cd / && python -c "from pathlib import Path; from stack.install import _poms_digest; Path('/opt/cdc-mirror/jars/.resolved').write_text(_poms_digest() + '\n')"

# An unprivileged user owning the state directory. Spark reads <stack.home>/jars/spark, so
# <stack.home>/jars links to the build's jars: a new named volume mounted on /var/lib/cdc-mirror
# starts as a copy of this directory, link and ownership included, and the link always points
# at the jars of the image that runs.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/cdc-mirror --shell /usr/sbin/nologin cdc \
    && mkdir -p /var/lib/cdc-mirror /etc/cdc-mirror \
    && ln -s /opt/cdc-mirror/jars /var/lib/cdc-mirror/jars \
    && chown -h -R cdc:cdc /var/lib/cdc-mirror

ENV CDC_MIRROR_STACK__HOME=/var/lib/cdc-mirror
USER cdc
WORKDIR /var/lib/cdc-mirror

CMD ["cdc-mirror", "--help"]
