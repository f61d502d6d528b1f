"""Bringing the whole local stack up and down, in dependency order."""

from __future__ import annotations

import logging
from collections.abc import Callable

from cdc_platform.config import Settings
from stack.services import SERVICE_ORDER, Service, ServiceStatus, StackPaths

log = logging.getLogger(__name__)


class LocalStack:
    def __init__(self, settings: Settings) -> None:
        self.paths = StackPaths(settings.stack.home.resolve())
        self.services: list[Service] = [cls(settings, self.paths) for cls in SERVICE_ORDER]

    def select(self, names: list[str] | None) -> list[Service]:
        if not names:
            return self.services
        known = {s.name: s for s in self.services}
        unknown = [n for n in names if n not in known]
        if unknown:
            from simple_binlog.errors import StackError  # noqa: PLC0415

            raise StackError(f"unknown service {unknown[0]!r}; the stack has {', '.join(known)}.")
        return [s for s in self.services if s.name in names]

    def up(
        self, names: list[str] | None = None, report: Callable[[str, str], None] | None = None
    ) -> dict[str, str]:
        """Start what is not running. Returns service → what was done. Without ``names``,
        services the configuration does not use (Kudu without a Kudu table) are left out."""
        done: dict[str, str] = {}
        for service in self.select(names):
            if not names and not service.configured():
                done[service.name] = "not configured"
            else:
                done[service.name] = service.up()
            if report:
                report(service.name, done[service.name])
        return done

    def down(
        self, names: list[str] | None = None, report: Callable[[str, str], None] | None = None
    ) -> dict[str, str]:
        """Stop, in reverse order, only the services the stack started."""
        done: dict[str, str] = {}
        for service in reversed(self.select(names)):
            done[service.name] = service.down()
            if report:
                report(service.name, done[service.name])
        return done

    def status(self) -> list[ServiceStatus]:
        return [service.status() for service in self.services]
