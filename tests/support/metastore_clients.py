"""The Hive metastore clients a piece of the product makes (``cdc_platform.lake.metastore_client``),
recorded, each still the real client of the stack's metastore, with the calls of its ``close``
counted: a test then checks its owner's stop closed every one."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from cdc_platform import lake

if TYPE_CHECKING:
    import pytest


class CountedClient:
    """A real metastore client whose ``close`` calls are counted (every other call goes to
    the client as it is)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
        self._client.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def record_metastore_clients(monkeypatch: pytest.MonkeyPatch) -> list[CountedClient]:
    """From now on (the test's end undoes it), every client ``metastore_client`` makes, in the
    order made, by any thread."""
    made: list[CountedClient] = []
    lock = threading.Lock()
    make = lake.metastore_client

    def counted(spark: Any) -> CountedClient:
        client = CountedClient(make(spark))
        with lock:
            made.append(client)
        return client

    monkeypatch.setattr(lake, "metastore_client", counted)
    return made
