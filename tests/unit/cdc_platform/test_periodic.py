"""``cdc_platform.periodic.Periodic``: the action repeats in its own named daemon thread until
``stop()`` (its thread has ended when it returns) or until ``done()`` says so."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cdc_platform.periodic import Periodic


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.005)


def test_it_repeats_in_a_named_daemon_thread_until_stopped() -> None:
    threads: list[threading.Thread] = []
    periodic = Periodic("test-poll", 0.001, lambda: threads.append(threading.current_thread()))
    assert not periodic.running
    periodic.start()
    wait_for(lambda: len(threads) >= 3, "three calls")
    periodic.stop()
    assert not periodic.running  # the thread has ended: no call can come after stop()
    assert {t.name for t in threads} == {"test-poll"} and all(t.daemon for t in threads)
    assert threading.current_thread() not in threads


def test_it_ends_by_itself_once_done() -> None:
    calls: list[int] = []
    periodic = Periodic("test-poll", 0.001, lambda: calls.append(1), done=lambda: len(calls) == 2)
    periodic.start()
    wait_for(lambda: not periodic.running, "the thread's end")
    assert len(calls) == 2


def test_stop_wakes_a_long_wait_at_once() -> None:
    calls: list[int] = []
    periodic = Periodic("test-poll", 3600, lambda: calls.append(1))
    periodic.start()
    periodic.stop(timeout_s=10)
    assert not periodic.running and calls == []
