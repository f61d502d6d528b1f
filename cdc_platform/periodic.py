"""One action repeated in a daemon thread until stopped: how the processes poll and beat in the
background (the configuration watch, the component heartbeat, the collector's remote
configuration, the governance policy poll).

The first call is one interval after ``start``: each owner does its first poll or beat itself,
in its own thread, before it starts repeating. ``stop`` wakes the wait at once and waits up to
``timeout_s`` for a call under way to end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    """Calls ``action`` every ``interval_s`` in a daemon thread named ``name``, until ``stop()``
    or until ``done()`` is true after a call."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        action: Callable[[], object],
        done: Callable[[], bool] = lambda: False,
    ) -> None:
        self._name = name
        self._interval_s = interval_s
        self._action = action
        self._done = done
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._action()
            if self._done():
                return

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
