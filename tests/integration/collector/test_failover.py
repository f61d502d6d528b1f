"""HA: one active collector per instance, a standby that takes over, and no split brain.

Three collector processes with leader election through ZooKeeper (session timeout 4 s) run
while a workload writes. The active one is killed (a standby takes over with a higher
epoch); the next active is paused with SIGSTOP past its session timeout, another takes over,
and the paused one is resumed. It must step down by itself, and nothing it sends after the
new active started may reach a read_committed reader: at the end the topic holds every change
exactly once with the same binlogOffsets as a clean read.
"""

from __future__ import annotations

import re
import signal

from collector.row_decoder import NATIVE_DECODER
from tests.integration.collector.harness import CollectorScene, assert_exactly_once, reached
from tests.integration.collector.test_exactly_once import background


def _role(process) -> tuple[str, int] | None:
    health = process.health()
    return (health["role"], health["epoch"]) if health else None


def _active(processes):
    return [p for p in processes if p.alive() and (_role(p) or ("", 0))[0] == "active"]


def test_failover_and_a_paused_leader_cannot_publish(scene: CollectorScene) -> None:
    first, second, third = (scene.collector(29131 + i, ha=True, name=f"c{i}") for i in range(3))
    for process in (first, second, third):
        process.start()
    everyone = [first, second, third]
    first.wait_for(lambda: len(_active(everyone)) == 1, "one active collector")
    leader = _active(everyone)[0]
    epoch = _role(leader)[1]
    first.wait_for(
        lambda: all((_role(p) or ("",))[0] == "standby" for p in everyone if p is not leader),
        "the others to stand by",
    )

    thread, stop, failures = background(scene, big_every=0, pace_s=0.05)
    try:
        # 1. The active dies: a standby takes over with a higher epoch.
        leader.wait_for(lambda: leader.committed_gtid() != scene.start.gtid, "first commits")
        leader.kill()
        survivors = [p for p in everyone if p is not leader]
        leader.wait_for(lambda: len(_active(survivors)) == 1, "a standby to take over")
        paused = _active(survivors)[0]
        assert _role(paused)[1] > epoch
        assert 'cdc_collector_active{instance="local"} 1.0' in paused.metrics()
        # Which row decoder runs, in the health document and the metrics.
        decoder = "native" if NATIVE_DECODER else "python"
        assert paused.health()["decoder"] == decoder
        assert f'cdc_collector_native_decoder{{instance="local"}} {float(NATIVE_DECODER)}' in (
            paused.metrics()
        )

        # 2. The new active is paused past its session: the last process takes over.
        paused_epoch = _role(paused)[1]
        paused.signal(signal.SIGSTOP)
        last = next(p for p in survivors if p is not paused)
        last.wait_for(lambda: (_role(last) or ("", 0))[0] == "active", "the last standby to lead")
        last_epoch = _role(last)[1]
        assert last_epoch > epoch + 1
        before = last.committed_gtid()
        last.wait_for(
            lambda: last.committed_gtid() not in (None, before), "the new active to commit"
        )

        # 3. The paused one resumes: it must step down by itself, publishing nothing.
        paused.signal(signal.SIGCONT)

        def stepped_down() -> bool:
            role = _role(paused)
            # Standby, or leading again after a later, legitimate election.
            return role is not None and (role[0] != "active" or role[1] > paused_epoch)

        paused.wait_for(stepped_down, "the resumed one to step down")
        # Exactly one leads afterwards. Usually `last`; but the resumed one's stale
        # transaction can make the broker fail `last`'s commit (fatal for that producer),
        # and then `last` re-initialises after a new election: never two at once.
        last.wait_for(lambda: len(_active(survivors)) == 1, "one active collector")
    finally:
        stop.set()
        thread.join()
    assert failures == []

    end = scene.position_now()
    # The resumed one may have finished fencing the new active before it noticed it had lost
    # its session: then leadership moves once more. Whoever leads now catches up.
    alive = [p for p in survivors if p.alive()]

    def caught_up() -> bool:
        active = _active(alive)
        return len(active) == 1 and reached(active[0].committed_gtid(), end.gtid)

    leader.wait_for(caught_up, "one active collector to catch up", 300)
    final = _active(alive)[0]
    epoch_metric = re.search(r'cdc_collector_epoch\{instance="local"\} (\d+)', final.metrics())
    assert epoch_metric and int(epoch_metric.group(1)) == _role(final)[1] >= last_epoch

    expected = scene.expected(end)
    assert len(expected) > 1000
    assert_exactly_once(scene.received(len(expected)), expected)
