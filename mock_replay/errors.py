"""What a replay tells its caller when it cannot go on. ``str(err)`` is one sentence."""

from __future__ import annotations

from simple_binlog.errors import CdcMirrorError, ConfigError


class ReplayError(CdcMirrorError):
    """The replay cannot run as asked (tables not found, no usable key, run unknown, …)."""


class ConditionError(ReplayError, ConfigError):
    """The ``--where`` condition is refused; nothing was read or published."""


class ReplayCancelled(ReplayError):
    """The run was cancelled; everything committed before stays committed."""
