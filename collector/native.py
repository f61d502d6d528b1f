"""The C extension ``collector._native`` (``collector/_native.c``): whether it is here, and
which of its parts this process uses.

The editable install compiles it; built without a compiler, the collector runs the Python
reference paths (row readers, packet reading, message construction) and says so once at
start-up, in ``/health`` and in the ``cdc_collector_native_decoder`` metric.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from simple_binlog.message import BinlogPosition, SimpleBinlog

try:
    from collector import _native
except ImportError:  # built without a compiler: the Python readers do all the work
    _native = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# The interface version this code speaks; a stale build of the extension is not used.
_API_VERSION = 4

# An operator may turn the extension off (to rule it out while chasing a decoding problem);
# the Python reference paths then do all the work, about half as fast.
SWITCH = "CDC_MIRROR_COLLECTOR_NATIVE"
TURNED_OFF = os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off")

AVAILABLE = not TURNED_OFF and _native is not None and _native.API_VERSION == _API_VERSION


def _fields_match() -> bool:
    """The extension fills SimpleBinlog's and BinlogPosition's slots by name: only while the
    dataclasses have exactly the fields it knows (a field added to the contract turns the
    native construction off until the extension learns it)."""
    if not AVAILABLE:
        return False
    return (
        tuple(f.name for f in dataclasses.fields(SimpleBinlog)) == _native.MESSAGE_FIELDS
        and tuple(f.name for f in dataclasses.fields(BinlogPosition)) == _native.POSITION_FIELDS
    )


MESSAGES = _fields_match()


def module() -> Any:
    """The C extension (check ``AVAILABLE`` first)."""
    return _native


def decoder_name() -> str:
    """Which row decoder this process runs: ``native`` or ``python``."""
    return "native" if AVAILABLE else "python"


def log_decoder() -> None:
    """One line at start-up saying which decoder runs, and why not the native one."""
    if AVAILABLE:
        log.info("row decoding: native (collector._native)")
    elif TURNED_OFF:
        log.warning("row decoding: Python (the C extension is turned off by %s)", SWITCH)
    elif _native is None:
        log.warning(
            "row decoding: Python (the C extension collector._native is not built; install "
            "the project with a C compiler and the Python headers for about twice the speed)"
        )
    else:
        log.warning(
            "row decoding: Python (collector._native is a stale build; reinstall the project)"
        )
