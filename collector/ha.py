"""Active/standby collectors per MySQL instance, elected through ZooKeeper
(``cdc_platform.election``).

Split brain is prevented by Kafka, not by timing: all collectors of an instance share one
``transactional.id``, so the new active's ``init_transactions`` fences the previous one. A
leader that was paused past its session and resumes can no longer commit anything (the broker
aborts its transaction); it finds out on its next commit, or earlier through its lost
ZooKeeper session, and steps down by itself.
"""

from __future__ import annotations

from cdc_platform.config import ZooKeeperSettings
from cdc_platform.election import LeaderElection as _Election
from cdc_platform.election import LeaderWork

__all__ = ["LeaderElection", "LeaderWork", "collectors_base"]


def collectors_base(settings: ZooKeeperSettings, instance: str) -> str:
    """The ZooKeeper path of an instance's collector election."""
    return f"{settings.root}/collectors/{instance}"


class LeaderElection(_Election):
    """The election of one instance's collectors."""

    def __init__(
        self, settings: ZooKeeperSettings, instance: str, identifier: str | None = None
    ) -> None:
        super().__init__(
            settings,
            collectors_base(settings, instance),
            f"the active collector of {instance}",
            identifier,
        )
