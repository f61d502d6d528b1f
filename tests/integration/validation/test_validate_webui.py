"""``cdc-mirror validate`` as the scheduler starts it with ``config_store.source: webui``: the
table mirror comes from the web admin (the config file names none), the MySQL login from the
snapshot of the instance's ``source_reader`` token (the file's password for the instance is
wrong), and validation runs its chunk hashes on the real MariaDB against the real Redis
mirror, finding the drift induced there; its ``--repair`` reads the keys' rows from MariaDB
with the same login and the re-check finds them equal. Without a source token for the
instance it stops with one sentence. The pipeline's history is an hour old, so the repair's
MOCK events win over the drifted copies (``mock_replay.keys``); a light workload writes on
the source meanwhile (the mirror's group passes a transaction's end only when records follow
it). The web admin is the real one (``cdc-mirror webui`` in a subprocess)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cdc_platform.config import Settings
from simple_binlog.errors import ExitCode
from tests.integration.validation.harness import (
    BASE,
    ROWS_PER_SHARD,
    Pipeline,
    Workload,
    drift_redis,
    make_pipeline,
    wait_until,
)
from tests.integration.webui.harness import ROOT, Server, start_server

ADMIN_PASSWORD = "source-reader-admin-1"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture()
def pipeline(mirror_settings: Settings) -> Iterator[Pipeline]:
    """The pipeline with an hour-old history, pumped continuously (the collector's part)."""
    for flow in make_pipeline(mirror_settings, history_age_s=3600):
        flow.pump_continuously()
        yield flow


@pytest.fixture()
def admin(pipeline: Pipeline, tmp_path: Path) -> Iterator[Server]:
    server = start_server(
        tmp_path,
        {
            "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": "[]",
            "CDC_MIRROR_WEBUI__COUNT_DETECTIONS": "false",
            "CDC_MIRROR_WEBUI__REPLAYS": "simulated",
            # The mirror's topic is the pipeline's: provisioning finds it there.
            "CDC_MIRROR_KAFKA__TOPIC_PREFIX": pipeline.scene.topic_prefix,
            "CDC_MIRROR_REDIS__KEY_PREFIX": pipeline.settings.redis.key_prefix,
        },
        with_replay_worker=False,
    )
    yield server
    server.stop()


def _logged_in(url: str) -> tuple[httpx.Client, dict[str, str]]:
    client = httpx.Client(base_url=url, timeout=30)
    form = CSRF.search(client.get("/login").text)
    assert form is not None
    data = {"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": form.group(1)}
    assert client.post("/login", data=data).status_code == 303
    csrf = CSRF.search(client.get("/").text)
    assert csrf is not None
    return client, {"X-CSRF-Token": csrf.group(1)}


def _token(client: httpx.Client, headers: dict[str, str], **body: str) -> str:
    made = client.post("/api/tokens", json=body, headers=headers)
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def _validate(
    pipeline: Pipeline,
    url: str,
    component: str,
    sources: dict[str, str],
    result: Path,
    *more: str,
) -> subprocess.CompletedProcess[str]:
    settings = pipeline.settings
    mariadb = settings.instances[0]
    env = pipeline.scene.env(
        # The file knows no table mirror and a wrong password: both must come from the admin.
        CDC_MIRROR_TABLES="[]",
        CDC_MIRROR_INSTANCES=json.dumps(
            [{"name": "local", "host": "127.0.0.1", "port": mariadb.port, "password": "wrong"}]
        ),
        CDC_MIRROR_CONFIG_STORE__SOURCE="webui",
        CDC_MIRROR_CONFIG_STORE__WEBUI_URL=url,
        CDC_MIRROR_CONFIG_STORE__TOKEN=component,
        CDC_MIRROR_CONFIG_STORE__SOURCE_TOKENS=json.dumps(sources),
    )
    env.pop("CDC_MIRROR_CONFIG", None)
    table = settings.tables[0].name
    options = ["--target=redis", "--no-resume", "--chunk-rows=25", "--result-file", str(result)]
    options += more
    return subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "validate", table, *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.timeout(420)
def test_validate_reads_mysql_with_the_login_of_its_source_reader_token(
    pipeline: Pipeline, admin: Server, tmp_path: Path
) -> None:
    settings = pipeline.settings
    mirror = settings.tables[0]
    mariadb = settings.instances[0]
    client, headers = _logged_in(admin.url)
    try:
        instance = {
            "name": "local",
            "host": "127.0.0.1",
            "port": mariadb.port,
            "user": mariadb.user,
            "password": mariadb.password.get_secret_value(),
        }
        made = client.post("/api/instances", json=instance, headers=headers)
        assert made.status_code == 201, made.text
        body = {"db_prefix": mirror.db_prefix, "table_prefix": mirror.table_prefix}
        made = client.post(
            "/api/table-mirrors?initial_load=false",
            json={**body, "instance": "local", "targets": ["redis"]},
            headers=headers,
        )
        assert made.status_code == 201, made.text
        component = _token(client, headers, name="scheduler", role="component")
        reader = _token(
            client, headers, name="validate-local", role="source_reader", instance="local"
        )

        # No source token for the instance: one sentence, nothing read.
        refused = _validate(pipeline, admin.url, component, {}, tmp_path / "refused.json")
        assert refused.returncode == ExitCode.USAGE, refused.stderr
        assert "config_store.source_tokens['local']" in refused.stderr
        assert "source_reader" in refused.stderr

        changed, deleted, extra = BASE + 3, BASE + 77, BASE + 10_000
        drift_redis(settings, mirror.name, changed, deleted, extra)
        result_file = tmp_path / "result.json"
        with Workload(pipeline, rate=5.0) as workload:
            wait_until(lambda: workload.statements >= 3, 30, "the workload did not start")
            found = _validate(
                pipeline, admin.url, component, {"local": reader}, result_file, "--repair"
            )
        assert found.returncode == ExitCode.OK, found.stdout + found.stderr
        outcome = json.loads(result_file.read_text())
        [target] = outcome["targets"]
        assert target["target"] == "redis"
        assert target["rows"] >= 4 * ROWS_PER_SHARD  # and the workload's inserts
        differences = {
            kind: sorted(int(key) for key in keys)
            for kind, keys in target["differences"].items()
            if keys
        }
        assert differences == {"different": [changed], "missing": [deleted], "extra": [extra]}
        assert outcome["repair"]["keys"] == 3
        assert outcome["repair"]["stillDiffering"] == {"redis": []}

        # The password went to the source_reader token only, audited under its name.
        audit = client.get("/api/audit", params={"limit": 50}).json()
        reads = {
            (entry["actor"], entry["object_name"])
            for entry in audit
            if (entry["action"], entry["object_type"]) == ("read_secret", "config_snapshot")
        }
        assert reads == {("token:validate-local", "local")}
    finally:
        client.close()
