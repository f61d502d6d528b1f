"""A lake the writer cannot use stops it before it reads anything: an S3 endpoint where
nothing answers, a missing bucket, credentials S3 refuses, an HDFS NameNode where nothing
answers. Each time the writer exits with one sentence naming the location and the cause
(never the secret), after a few seconds of the check's short timeouts, and its query never started (no offset in Spark's
checkpoint, no table)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    message,
    produce_messages,
)
from tests.support.closed_port import NOTHING_ANSWERS, closed_port

WAIT_S = 300.0


def bad_lake(case: str, database: str, secret: str) -> tuple[dict[str, str], str]:
    """The settings of a lake the writer cannot use (environment overrides) and the cause its
    sentence names."""
    prefix = f"cdc-tests/{database}"
    if case == "s3 endpoint unreachable":
        return {
            "CDC_MIRROR_LAKE__LOCATION": f"s3://{LOCAL_S3_BUCKET}/{prefix}",
            "CDC_MIRROR_LAKE__S3__ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        }, NOTHING_ANSWERS
    if case == "missing bucket":
        bucket = f"cdc-missing-{uuid.uuid4().hex[:12]}"
        return {
            "CDC_MIRROR_LAKE__LOCATION": f"s3://{bucket}/{prefix}"
        }, f"the bucket {bucket} does not exist"
    if case == "wrong credentials":
        return {
            "CDC_MIRROR_LAKE__LOCATION": f"s3://{LOCAL_S3_BUCKET}/{prefix}",
            "CDC_MIRROR_LAKE__S3__SECRET_ACCESS_KEY": secret,
        }, "the S3 credentials were refused"
    assert case == "hdfs namenode unreachable"
    location = f"hdfs://127.0.0.1:{closed_port()}/{prefix}"
    return {"CDC_MIRROR_LAKE__LOCATION": location}, NOTHING_ANSWERS


@pytest.mark.parametrize(
    "case",
    ["s3 endpoint unreachable", "missing bucket", "wrong credentials", "hdfs namenode unreachable"],
)
def test_a_lake_the_writer_cannot_use_stops_it_before_it_reads(
    local_stack: Settings,
    remote_storage: set[str],
    topic: str,
    tmp_path: Path,
    case: str,
) -> None:
    produce_messages(local_stack, topic, [message("shop", "orders", 1, 1_709_251_200_000, 1)])
    env = WriterEnv.create(tmp_path, topic, local_stack, "local")
    secret = f"wrong-{uuid.uuid4().hex}"
    overrides, cause = bad_lake(case, env.database, secret)
    env.overrides.update(overrides)
    with LakeRun(env, tmp_path) as run:
        code = run.writer.wait_killed(WAIT_S)
        log = run.writer.log_file.read_text(errors="replace")
        run.skip_drop()
    assert code != 0, log[-3000:]
    location = overrides["CDC_MIRROR_LAKE__LOCATION"]
    assert f"the lake at {location} cannot be used: {cause}" in log, log[-3000:]
    assert secret not in log
    assert not (env.checkpoint / "offsets").exists()
