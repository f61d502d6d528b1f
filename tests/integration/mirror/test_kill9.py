"""``kill -9`` of ``cdc-mirror mirror run`` mid-stream, twice, then a restart: the target (Redis,
PostgreSQL, Kudu) ends equal to the reference, and no key's stored offset ever went backwards
while it ran (sampled continuously). A malformed message on the way goes to the dead-letter topic with its offset
and does not stop the mirror."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import redis

from cdc_platform.config import Settings
from mirror.applier import MemoryApplier
from mirror.consumer import dead_letter_topic
from mirror.plan import ChangeRouter
from simple_binlog.routing import ShardRouter
from tests.integration.mirror.harness import MirrorProcess, MirrorScene, free_port, scrape, wait_for
from tests.integration.mirror.targets import pg_connect
from tests.unit.mirror.workload import LOGICAL, Workload


def _kudu_offsets(settings: Settings) -> dict[str, int]:
    from tests.integration.mirror.kudu_store import kudu_rows

    try:
        rows = kudu_rows(settings, LOGICAL)
    except Exception as exc:  # the table is made by the mirror's first batch
        if "does not exist" in str(exc) or "not found" in str(exc).lower():
            return {}
        raise
    return {key: row["_binlog_offset"] for key, row in rows.items()}


def _offsets(settings: Settings, target: str) -> dict[str, int]:
    """key → stored offset (rows and tombstones)."""
    if target == "kudu":
        return _kudu_offsets(settings)
    if target == "redis":
        client = redis.Redis.from_url(settings.redis.url.get_secret_value(), socket_timeout=10)
        try:
            keys = list(client.scan_iter(f"{settings.redis.key_prefix}:{LOGICAL}:*", count=5000))
            values = client.mget(keys) if keys else []
        finally:
            client.close()
        return {k.decode(): int(v[12:32]) for k, v in zip(keys, values, strict=True) if v}
    schema = settings.mirror.warehouse_schema
    found: dict[str, int] = {}
    with pg_connect(settings) as conn:
        exists = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchone()[0]
        if exists < 2:
            return found
        for table in (LOGICAL, f"{LOGICAL}__tombstone"):
            for key, offset in conn.execute(f'SELECT id, _binlog_offset FROM "{schema}"."{table}"'):
                found[str(key)] = max(found.get(str(key), 0), offset)
    return found


class _Monotonic(threading.Thread):
    """Samples every key's offset again and again; records any that went backwards."""

    def __init__(self, settings: Settings, target: str) -> None:
        super().__init__(daemon=True)
        self.settings, self.target = settings, target
        self.seen: dict[str, int] = {}
        self.backwards: list[tuple[str, int, int]] = []
        self.samples = 0
        self.error: BaseException | None = None  # what stopped the sampler, if anything
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for key, offset in _offsets(self.settings, self.target).items():
                    if offset < self.seen.get(key, 0):
                        self.backwards.append((key, self.seen[key], offset))
                    self.seen[key] = max(offset, self.seen.get(key, 0))
                self.samples += 1
                self.halt.wait(0.05)  # pacing of the sampler, not synchronisation
        except BaseException as exc:
            self.error = exc  # the test fails with it instead of waiting for samples
            raise


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", ["redis", "warehouse", "kudu"])
def test_kill9_mid_stream_then_restart_ends_equal_and_nothing_went_backwards(
    mirror_settings: Settings, target: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if target == "kudu":  # the table mirrored to Kudu, under a table prefix of the test's own
        mirror_settings = request.getfixturevalue("kudu_settings")
    scene = MirrorScene(mirror_settings)
    workload = Workload(random.Random(21))
    first = workload.messages(4000)
    workload.evolve()
    second = workload.messages(4000)
    scene.publish(first, raw=[b"{not json", b'{"version": 1}'])
    env = scene.env(
        CDC_MIRROR_MIRROR__BATCH_SIZE="150",
        CDC_MIRROR_MIRROR__MAX_WAIT_MS="50",
        CDC_MIRROR_KUDU__TABLE_PREFIX=mirror_settings.kudu.table_prefix,
    )
    log = tmp_path / "mirror.log"
    sampler = _Monotonic(mirror_settings, target)
    sampler.start()
    try:
        process = MirrorProcess(env, target, log).start()
        wait_for(lambda: len(sampler.seen) > 300, 90, "the mirror to apply a first part")
        process.kill()
        scene.publish(second[:2000])
        progress = len(sampler.seen)
        process = MirrorProcess(env, target, log).start()
        wait_for(lambda: len(sampler.seen) > progress + 300, 90, "progress after the restart")
        process.kill()
        # Published only now, so the last process has work left even when the second one
        # got through all of its part before the kill.
        scene.publish(second[2000:])
        port = free_port()
        process = MirrorProcess(env, target, log, metrics_port=port).start()
        wait_for(lambda: scene.committed_lag(target) == 0, 120, "the group to commit everything")
        metrics = scrape(port)
        assert process.stop() == 0
        # A fast mirror gets through the stream in a few samples' time; the later samples
        # check the final state as well.
        wait_for(
            lambda: sampler.samples > 10 or sampler.error is not None,
            60,
            "ten samples of the stored offsets",
        )
        assert sampler.error is None, repr(sampler.error)
    finally:
        sampler.halt.set()
        sampler.join(10)
    assert sampler.backwards == [], sampler.backwards[:5]
    assert sampler.samples > 10

    router = ChangeRouter(
        mirror_settings.tables, ShardRouter(list(mirror_settings.shard_rules)), target
    )
    reference = MemoryApplier()
    reference.apply_batch(c for m in first + second for c in router.route("local", m).changes)
    expected = {key[0]: entry.offset for key, entry in reference.tables[LOGICAL].items()}
    stored = _offsets(mirror_settings, target)
    prefix = f"{mirror_settings.redis.key_prefix}:{LOGICAL}:"
    stored = {k.removeprefix(prefix): v for k, v in stored.items()}
    assert stored == expected

    dead = scene.read_topic(dead_letter_topic(target), expected=2)
    mine = dead
    assert len(mine) >= 2
    assert {d["error"].split(" (")[0] for d in mine} >= {"a SimpleBinlog message is not valid JSON"}
    assert all(isinstance(d["offset"], int) and d["value"] for d in mine)
    # The last process saw the rest of the stream (the replays of what the killed ones had
    # applied but not committed are rejected as stale), and reports no lag.
    assert f'cdc_mirror_rows_total{{table="{LOGICAL}",target="{target}"}}' in metrics
    assert "cdc_mirror_freshness_seconds_count" in metrics
    lags = [line for line in metrics.splitlines() if line.startswith("cdc_mirror_consumer_lag{")]
    assert lags and all(line.endswith(" 0.0") for line in lags), lags
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
