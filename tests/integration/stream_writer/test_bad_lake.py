"""A lake the writer cannot use stops it before it reads anything: with credentials S3
refuses, the writer exits with one sentence naming the location and the cause (never the
secret), and its query never started (no offset in Spark's checkpoint, no table)."""

from __future__ import annotations

import uuid
from pathlib import Path

from cdc_platform.config import Settings
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    message,
    produce_messages,
)

WAIT_S = 300.0


def test_refused_s3_credentials_stop_the_writer_before_it_reads(
    local_stack: Settings,
    remote_storage: set[str],
    topic: str,
    tmp_path: Path,
) -> None:
    produce_messages(local_stack, topic, [message("shop", "orders", 1, 1_709_251_200_000, 1)])
    env = WriterEnv.create(tmp_path, topic, local_stack, "s3")
    secret = f"wrong-{uuid.uuid4().hex}"
    env.overrides["CDC_MIRROR_LAKE__S3__SECRET_ACCESS_KEY"] = secret
    with LakeRun(env, tmp_path) as run:
        code = run.writer.wait_killed(WAIT_S)
        log = run.writer.log_file.read_text(errors="replace")
        run.skip_drop()
    assert code != 0, log[-3000:]
    location = env.overrides["CDC_MIRROR_LAKE__LOCATION"]
    assert f"the lake at {location} cannot be used: the S3 credentials were refused" in log
    assert secret not in log
    assert not (env.checkpoint / "offsets").exists()
