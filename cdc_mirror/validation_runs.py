"""A validation run by hand (``cdc-mirror validate``) in the web admin's run history, beside
the scheduler's: its outcome per target, and its repair, show on the table's status page
(``docs/validation.md``). The scheduler records the runs it starts itself and passes
``--no-record``.

Only with ``config_store.source: webui`` (the file store has no shared history); a history
that cannot be reached is logged and never changes the validation's outcome or exit code.
"""

from __future__ import annotations

import logging
import socket
from datetime import UTC, datetime

from cdc_platform.config import Settings
from cdc_platform.control import (
    AdminControl,
    RunRecord,
    RunState,
    RunStore,
    open_control,
    validation_results,
)
from simple_binlog.errors import CdcMirrorError
from validation.run import TableValidation

log = logging.getLogger(__name__)


def validation_record(result: TableValidation, started: float, ended: float) -> RunRecord:
    """The run record of ``result`` (its verdict as the exit code says it)."""
    results = validation_results(result.to_json())
    state: RunState = (
        "failed" if result.unreachable else "succeeded" if result.converged else "mismatch"
    )
    errors = [r.error for r in results if r.error]
    return RunRecord(
        kind="validation",
        table=result.table,
        dt=datetime.fromtimestamp(started, UTC).date(),
        state=state,
        scheduler=f"cdc-mirror validate on {socket.gethostname()}"[:200],
        started_at=started,
        ended_at=ended,
        rows=sum(r.rows for r in results),
        check_ok=None if result.unreachable else result.converged,
        error=errors[0] if errors else None,
        validation=results,
    )


def record_validation(
    settings: Settings,
    result: TableValidation,
    started: float,
    ended: float,
    store: RunStore | None = None,
) -> RunRecord | None:
    """Save ``result`` in the web admin's run history (``store``, default the one
    ``config_store`` points at); None when there is none or it cannot be reached."""
    if store is None:
        control = open_control(settings)
        if not isinstance(control, AdminControl):
            return None
        store = control
    try:
        return store.save(validation_record(result, started, ended))
    except CdcMirrorError as exc:
        log.warning("the validation was not recorded in the web admin's run history: %s", exc)
        return None
    finally:
        store.close()
