"""Supervised components: environment flattening, start, kill -9, pause, stop everything."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_mirror.processes import Component, ComponentError, Supervisor, config_env, wait_until
from cdc_platform.config import Settings

# A child that writes its pid and the environment value it was given, then waits forever.
_SLEEPER = (
    "import os, sys, time\n"
    "open(sys.argv[1], 'w').write(os.environ.get('CDC_MIRROR_KAFKA__PARTITIONS', '-'))\n"
    "while True: time.sleep(1)\n"
)


def _sleeper(tmp_path: Path, name: str = "sleeper") -> Component:
    marker = tmp_path / f"{name}.started"
    return Component(
        name,
        [str(marker)],
        env={"CDC_MIRROR_KAFKA__PARTITIONS": "3"},
        log_path=tmp_path / f"{name}.log",
        program=[sys.executable, "-c", _SLEEPER],
    )


def _state(pid: int) -> str:
    # Field 3 of /proc/<pid>/stat: R, S, T (stopped), Z ...
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_config_env_flattens_nested_settings_as_settings_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = config_env(
        {
            "kafka": {"partitions": 3, "topic_prefix": "cdc.demo."},
            "instances": [{"name": "demo", "host": "127.0.0.1"}],
            "mirror": {"metrics_port": 0, "group_prefix": None},
            "webui": {"secure_cookies": False},
        }
    )
    assert env == {
        "CDC_MIRROR_KAFKA__PARTITIONS": "3",
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": "cdc.demo.",
        "CDC_MIRROR_INSTANCES": '[{"name": "demo", "host": "127.0.0.1"}]',
        "CDC_MIRROR_MIRROR__METRICS_PORT": "0",
        "CDC_MIRROR_WEBUI__SECURE_COOKIES": "false",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.kafka.partitions == 3
    assert settings.kafka.topic_prefix == "cdc.demo."
    assert [i.name for i in settings.instances] == ["demo"]
    assert settings.mirror.metrics_port == 0
    assert settings.mirror.group_prefix == "cdc-mirror"  # None left the default alone


def test_component_gets_its_environment_and_dies_with_kill(tmp_path: Path) -> None:
    component = _sleeper(tmp_path).start()
    try:
        marker = tmp_path / "sleeper.started"
        component.wait_until(marker.exists, 30, "the child to start")
        wait_until(lambda: marker.read_text() != "", 5, "the marker to be written")
        assert marker.read_text() == "3"
        assert component.running
        component.kill()
        assert not component.running
        assert component.returncode == -signal.SIGKILL
    finally:
        component.terminate()


def test_pause_stops_the_process_and_resume_continues_it(tmp_path: Path) -> None:
    component = _sleeper(tmp_path).start()
    try:
        assert component.pid is not None
        pid = component.pid
        component.pause()
        wait_until(lambda: _state(pid) == "T", 5, "the child to stop")
        component.resume()
        wait_until(lambda: _state(pid) != "T", 5, "the child to continue")
    finally:
        component.terminate()
    assert not component.running


def test_wait_until_fails_early_when_the_component_exits(tmp_path: Path) -> None:
    component = Component(
        "short", [], log_path=tmp_path / "short.log", program=[sys.executable, "-c", "exit(4)"]
    ).start()
    with pytest.raises(ComponentError, match=r"short exited with code 4 .*short\.log"):
        component.wait_until(lambda: False, 30, "something that never happens")


def test_restart_counts_starts_and_replaces_the_process(tmp_path: Path) -> None:
    component = _sleeper(tmp_path).start()
    try:
        first = component.pid
        component.restart()
        assert component.pid != first
        assert component.running
        assert component.starts == 2
    finally:
        component.terminate()


def test_supervisor_stops_everything_even_when_the_block_fails(tmp_path: Path) -> None:
    supervisor = Supervisor()
    a = supervisor.add(_sleeper(tmp_path, "a"))
    b = supervisor.add(_sleeper(tmp_path, "b"))
    with pytest.raises(RuntimeError, match="boom"), supervisor.running():
        a.start()
        b.start()
        b.pause()  # a paused component must be stopped too
        raise RuntimeError("boom")
    assert not a.running and not b.running
    pids = [a.pid, b.pid]
    assert all(pid is not None and not Path(f"/proc/{pid}").exists() for pid in pids)


def test_two_components_may_not_share_a_name(tmp_path: Path) -> None:
    supervisor = Supervisor()
    supervisor.add(_sleeper(tmp_path, "a"))
    with pytest.raises(ComponentError, match="two components are named 'a'"):
        supervisor.add(_sleeper(tmp_path, "a"))



def test_sigterm_to_the_supervising_process_still_stops_its_components(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    script = (
        "import sys, os, threading\n"
        "from pathlib import Path\n"
        "from cdc_mirror.processes import Component, Supervisor\n"
        "sup = Supervisor()\n"
        "child = sup.add(Component('c', [], program=[sys.executable, '-c', "
        "'import time\\nwhile True: time.sleep(1)']))\n"
        "with sup.running():\n"
        "    child.start()\n"
        f"    Path({str(marker)!r}).write_text(str(child.pid))\n"
        "    threading.Event().wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[3])
    try:
        wait_until(lambda: marker.exists() and marker.read_text() != "", 30, "the child")
        child_pid = int(marker.read_text())
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 128 + signal.SIGTERM
        wait_until(lambda: not _alive(child_pid), 10, "the child to be stopped")
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        return _state(pid) != "Z"
    except FileNotFoundError:
        return False
