"""Supervision rules with the fake launcher and clock: no process is started, no time passes.

What is checked: what a start hands the launcher (command, environment, folder, log file),
the stop sequence (SIGCONT, SIGTERM to the child alone, SIGKILL to its group), the escalation
when a child ignores SIGTERM, exit codes as they come back, a child that dies while waited
for, and that a supervisor stops everything in reverse order, also when its block fails.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from cdc_mirror.processes import (
    Component,
    ComponentError,
    FakeClock,
    FakeLauncher,
    FakeProcess,
    Supervisor,
    wait_until,
)


def _component(
    launcher: FakeLauncher, name: str = "worker", clock: FakeClock | None = None, **kwargs: object
) -> Component:
    return Component(
        name,
        ["collector", "run", "--instance", name],
        env={"CDC_MIRROR_KAFKA__PARTITIONS": "3"},
        log_path=Path("/logs") / f"{name}.log",
        cwd=Path("/repo"),
        program=["cdc-mirror"],
        launcher=launcher,
        clock=clock or FakeClock(),
        **kwargs,  # type: ignore[arg-type]
    )


def _child(component: Component) -> FakeProcess:
    assert isinstance(component.process, FakeProcess)
    return component.process


def test_start_hands_the_launcher_command_env_folder_and_log_file() -> None:
    launcher = FakeLauncher()
    component = _component(launcher).start()
    (child,) = launcher.launched
    assert child.command == ["cdc-mirror", "collector", "run", "--instance", "worker"]
    assert child.env == {"CDC_MIRROR_KAFKA__PARTITIONS": "3"}
    assert child.cwd == Path("/repo")
    assert child.log_path == Path("/logs/worker.log")
    assert component.running and component.pid == child.pid and component.starts == 1


def test_a_restart_appends_to_the_same_log_and_replaces_the_process() -> None:
    launcher = FakeLauncher()
    component = _component(launcher).start()
    first = _child(component)
    component.restart()
    second = _child(component)
    assert first.returncode == -signal.SIGKILL  # the old one was kill -9ed, not left behind
    assert second is not first and second.pid != first.pid and second.returncode is None
    assert [c.log_path for c in launcher.launched] == [Path("/logs/worker.log")] * 2
    assert component.starts == 2


def test_starting_a_running_component_is_refused() -> None:
    component = _component(FakeLauncher()).start()
    with pytest.raises(ComponentError, match=r"worker is already running \(pid \d+\)"):
        component.start()


def test_a_dead_component_may_be_started_again() -> None:
    launcher = FakeLauncher()
    component = _component(launcher).start()
    _child(component).exit(1)
    assert not component.running and component.returncode == 1
    component.start()
    assert component.running and len(launcher.launched) == 2


def test_terminate_asks_the_child_alone_then_clears_its_group() -> None:
    launcher = FakeLauncher()
    launcher.configure("collector", sigterm_code=0)  # a clean shutdown on SIGTERM
    component = _component(launcher).start()
    assert component.terminate() == 0
    # SIGCONT first (a paused child cannot handle SIGTERM); SIGTERM to the child alone, as
    # `docker stop` does; then SIGKILL to the group for children that outlived it (a JVM).
    assert _child(component).signals == [
        ("group", signal.SIGCONT),
        ("pid", signal.SIGTERM),
        ("group", signal.SIGKILL),
    ]
    assert not component.running


def test_terminate_kills_a_child_that_ignores_sigterm() -> None:
    launcher = FakeLauncher()
    launcher.configure("collector", ignores_sigterm=True)
    component = _component(launcher).start()
    assert component.terminate(timeout_s=5) == -signal.SIGKILL
    assert ("group", signal.SIGKILL) in _child(component).signals


def test_terminate_resumes_a_paused_child_so_it_stops_cleanly() -> None:
    launcher = FakeLauncher()
    launcher.configure("collector", sigterm_code=0)
    component = _component(launcher).start()
    component.pause()
    assert _child(component).paused
    assert component.terminate() == 0  # not -9: SIGCONT let it handle SIGTERM
    assert not _child(component).paused


def test_terminate_keeps_the_exit_code_of_a_child_that_had_ended() -> None:
    component = _component(FakeLauncher()).start()
    _child(component).exit(3)
    assert component.terminate() == 3
    # No SIGTERM to a pid that is gone; the group is still cleared.
    assert _child(component).signals == [("group", signal.SIGKILL)]


def test_a_component_never_started_stops_as_none() -> None:
    component = _component(FakeLauncher())
    assert component.terminate() is None
    component.kill()
    assert component.returncode is None and component.pid is None and not component.running


def test_waiting_fails_early_when_the_child_dies_naming_its_code_and_log() -> None:
    clock = FakeClock()
    component = _component(FakeLauncher(), clock=clock).start()
    polls = 0

    def crashes_on_third_poll() -> bool:
        nonlocal polls
        polls += 1
        if polls == 3:
            _child(component).exit(137)
        return False

    with pytest.raises(
        ComponentError,
        match=r"^worker exited with code 137 while waiting for the topic; see /logs/worker\.log\.$",
    ):
        component.wait_until(crashes_on_third_poll, 60, "the topic")
    assert clock.now < 60  # it did not wait for the deadline


def test_wait_until_reports_the_time_taken_and_times_out_naming_what() -> None:
    clock = FakeClock()
    answers = iter([False, False, True])
    assert wait_until(lambda: next(answers), 10, "x", poll_s=0.5, clock=clock) == 1.0
    assert clock.slept == [0.5, 0.5]
    with pytest.raises(ComponentError, match=r"timed out after 3 s waiting for the moon\.$"):
        wait_until(lambda: False, 3, "the moon", poll_s=1, clock=clock)


def test_wait_healthy_polls_the_probe_until_it_answers() -> None:
    answers: list[object] = [None, None, {"role": "standby"}]
    asked: list[str] = []

    def probe(url: str) -> object:
        asked.append(url)
        return answers.pop(0)

    component = _component(FakeLauncher(), health_url="http://h/health", probe=probe).start()
    component.wait_healthy(60)
    assert asked == ["http://h/health"] * 3


def test_wait_healthy_needs_a_health_endpoint() -> None:
    component = _component(FakeLauncher()).start()
    with pytest.raises(ComponentError, match="worker has no health endpoint"):
        component.wait_healthy()


def test_supervisor_stops_in_reverse_order_and_reports_every_exit_code() -> None:
    launcher = FakeLauncher()
    supervisor = Supervisor()
    feeder = supervisor.add(_component(launcher, "feeder")).start()
    consumer = supervisor.add(_component(launcher, "consumer")).start()
    never = supervisor.add(_component(launcher, "never"))
    _child(feeder).exit(2)  # died on its own before the stop
    codes = supervisor.stop_all()
    assert codes == {"never": None, "consumer": -signal.SIGTERM, "feeder": 2}
    terms = [pid for pid, target, signum in launcher.journal if signum == signal.SIGTERM]
    assert terms == [consumer.pid]  # the dead feeder gets no SIGTERM; nothing restarts it
    kills = [pid for pid, target, signum in launcher.journal if signum == signal.SIGKILL]
    assert kills == [consumer.pid, feeder.pid]  # the consumer first: reverse order of adding
    assert never.process is None and len(launcher.launched) == 2


def test_supervisor_block_stops_everything_when_it_fails() -> None:
    launcher = FakeLauncher()
    supervisor = Supervisor()
    a = supervisor.add(_component(launcher, "a"))
    b = supervisor.add(_component(launcher, "b"))
    with pytest.raises(RuntimeError, match="boom"), supervisor.running():
        a.start()
        b.start()
        b.pause()
        raise RuntimeError("boom")
    assert not a.running and not b.running
    assert supervisor["b"] is b
