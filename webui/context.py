"""What every request handler of the admin needs, built once by ``create_app``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fastapi import Request
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.live_tables import LiveTableSource
from cdc_platform.mysql_schema import LiveTables
from webui.admin import CollectorConfigCache, RenderedByVersion, SnapshotEtags
from webui.auth import HashingPool, LoginThrottle
from webui.provisioning import Provisioner
from webui.replay import ReplayService
from webui.schema_source import SchemaSource
from webui.security import Keys


@dataclass(frozen=True)
class WebContext:
    settings: Settings
    keys: Keys
    sessions: sessionmaker[Session]
    replays: ReplayService
    schemas: SchemaSource
    # Sets up a new table mirror's topic and warehouse table (webui.provisioning).
    provisioner: Provisioner
    # Reads a table mirror's live shape and counts for a component token (GET
    # /api/table-mirrors/{name}/live-schema), over a snapshot holding the instance's password.
    live_tables: Callable[[ConfigSnapshot], LiveTableSource] = LiveTables
    collector_configs: CollectorConfigCache = field(default_factory=CollectorConfigCache)
    config_snapshots: SnapshotEtags = field(default_factory=SnapshotEtags)
    rendered: RenderedByVersion = field(default_factory=RenderedByVersion)
    login_throttle: LoginThrottle = field(default_factory=LoginThrottle)
    hashing: HashingPool = field(default_factory=HashingPool)


def context(request: Request) -> WebContext:
    ctx = request.app.state.ctx
    assert isinstance(ctx, WebContext)
    return ctx


def db_session(request: Request) -> Iterator[Session]:
    """One transaction per request: committed when the handler returns, rolled back when it
    raises, so a rejected form leaves nothing half-saved."""
    db = context(request).sessions()
    try:
        yield db
        db.commit()
    except BaseException:
        db.rollback()
        raise
    finally:
        db.close()
