"""Continuous validation in the web admin (issue 25, item 4): a table mirror's cadence is set
in its form (checked, audited); the scheduler, holding a component token, runs the table's
validation on it and records each target's outcome through the admin API
(``AdminControl``); the table's status page shows the last validation per target and the
history. The scheduler's jobs are the fake (``FakeJobs``); everything between it and the page
is the real code over HTTP."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime

from fastapi.testclient import TestClient
from pydantic import SecretStr

from cdc_platform.config import SchedulerSettings, TableMirror
from cdc_platform.control import AdminControl, ValidationResult
from scheduler.jobs import FakeJobs, JobResult, MemoryLake
from scheduler.service import Scheduler
from tests.unit.webui.harness import instance_body, make_token, mirror_body
from tests.unit.webui.test_control_plane import _via

NAME = "ordercenter_orderinfo"
TODAY = date(2026, 11, 26)
FORM = {
    "instance": "orders",
    "db_prefix": "ordercenter",
    "table_prefix": "orderinfo",
    "targets": ["warehouse", "redis"],
    "key": "",
    "check_column": "created_at",
    "warehouse_delete": "hard",
}


def _section(page: str, element_id: str) -> str:
    return page.split(f'id="{element_id}"', 1)[1].split("</table>", 1)[0]


def test_a_scheduled_validation_shows_on_the_tables_page(
    client: TestClient, admin_csrf: str
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    body = mirror_body(targets=["warehouse", "redis"])
    assert client.post("/api/table-mirrors", json=body, headers=headers).status_code == 201
    assert "Not validated yet." in client.get(f"/status/{NAME}").text

    # The cadence, from the table mirror's form: checked, then saved and audited.
    form = {**FORM, "csrf_token": admin_csrf}
    refused = client.post(f"/tables/{NAME}", data={**form, "validation_every_h": "0"})
    assert refused.status_code == 422
    assert "validation_every_h: Input should be greater than 0." in refused.text
    saved = client.post(
        f"/tables/{NAME}", data={**form, "validation_every_h": "6"}, follow_redirects=False
    )
    assert saved.status_code == 303
    mirror = TableMirror.model_validate(client.get(f"/api/table-mirrors/{NAME}").json()["mirror"])
    assert mirror.validation_every_h == 6.0
    assert 'name="validation_every_h" value="6.0"' in client.get(f"/tables/{NAME}").text
    audit = client.get("/api/audit").json()
    assert any(
        e["object_name"] == NAME and (e.get("after") or {}).get("validation_every_h") == 6.0
        for e in audit
    )
    assert "the scheduler validates it every 6.0 h" in client.get(f"/status/{NAME}").text

    # The scheduler validates on that cadence and records each target's outcome.
    token = make_token(client, admin_csrf, "component")
    store = AdminControl("http://admin", SecretStr(token), transport=_via(client))
    jobs = FakeJobs(MemoryLake())
    differs = ValidationResult(
        target="redis", verdict="differs", rows=1200, chunks=3, missing=1, different=2,
        sample_keys=["7", "8", "9"], seconds=1.5,
    )  # fmt: skip
    unreachable = ValidationResult(
        target="warehouse", verdict="unreachable", error="PostgreSQL cannot be reached."
    )
    equal = [
        ValidationResult(target="redis", verdict="equal", rows=1200, chunks=3),
        ValidationResult(target="warehouse", verdict="equal", rows=1200, chunks=2),
    ]
    jobs.results[("validation", NAME, TODAY)] = [
        JobResult("mismatch", rows=1200, check_ok=False, validation=[differs, unreachable]),
        JobResult("succeeded", rows=2400, check_ok=True, validation=equal),
    ]
    now = {"t": datetime(2026, 11, 26, 9, 0, tzinfo=UTC).timestamp()}
    scheduler = Scheduler(
        SchedulerSettings(validation=True),
        lambda: [mirror],
        jobs.lake,
        jobs,
        store,
        "test-scheduler",
        clock=lambda: now["t"],
        today=lambda: TODAY,
    )
    assert scheduler.tick(threading.Event()) == 1
    page = client.get(f"/status/{NAME}").text
    last = _section(page, "validation-last")
    assert "<td>redis</td>" in last and "differs" in last and "<td>1200</td>" in last
    assert "<code>7</code>, <code>8</code>, <code>9</code>" in last
    assert "warehouse" in last and "PostgreSQL cannot be reached." in last

    now["t"] += 6 * 3600  # the next one is due six hours later: both targets equal
    assert scheduler.tick(threading.Event()) == 1
    page = client.get(f"/status/{NAME}").text
    last = _section(page, "validation-last")
    assert "differs" not in last and last.count('class="verdict-equal"') == 2
    history = _section(page, "validation-history")
    assert history.count("<tr>") == 3  # the header and the two runs, newest first
    assert history.index("succeeded") < history.index("mismatch")
    assert "redis: differs (1 missing, 0 extra, 2 different)" in history
    # The API carries the same records to any reader.
    runs = client.get("/api/runs", params={"kind": "validation"}).json()
    assert [r["validation"][0]["verdict"] for r in runs] == ["differs", "equal"]


def test_a_validation_run_by_hand_and_its_repair_show_on_the_tables_page(
    client: TestClient, admin_csrf: str
) -> None:
    """``cdc-mirror validate --repair`` records its run (``cdc_mirror.validation_runs``)."""
    from cdc_mirror.validation_runs import record_validation
    from cdc_platform.config import Settings
    from validation.plan import Difference
    from validation.run import KeyReport, RepairRequest, TableValidation, TargetReport

    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    client.post("/api/table-mirrors", json=mirror_body(targets=["redis"]), headers=headers)
    token = make_token(client, admin_csrf, "component")
    store = AdminControl("http://admin", SecretStr(token), transport=_via(client))
    report = TargetReport(NAME, "redis", rows=500, chunks=2)
    report.differences = [
        KeyReport((41,), Difference.MISSING, {"id": "41"}, None),
        KeyReport((42,), Difference.DIFFERENT, {"id": "42"}, {"id": "42"}),
    ]
    repaired = TargetReport(NAME, "redis")
    repaired.unsettled = [(42,)]
    result = TableValidation(
        NAME,
        reports=[report],
        repair=RepairRequest(NAME, "orders", (), ("id",), ((41,), (42,))),
        repaired="2 keys re-published.",
        after_repair=[repaired],
    )
    started = datetime(2026, 11, 26, 10, 0, tzinfo=UTC).timestamp()
    saved = record_validation(Settings(), result, started, started + 3, store)
    assert saved is not None and saved.state == "mismatch" and saved.check_ok is False
    page = client.get(f"/status/{NAME}").text
    last = _section(page, "validation-last")
    assert "differs" in last and "<td>500</td>" in last
    assert "<code>41</code>, <code>42</code>" in last
    assert "2 re-published, 1 still differ" in last
    assert "cdc-mirror validate on" in client.get("/api/runs").json()[0]["scheduler"]
    # With the file store there is no shared history: nothing is recorded, nothing fails.
    assert record_validation(Settings(), result, started, started + 3) is None


def test_the_validation_policy_is_set_in_the_form_and_its_repairs_show(
    client: TestClient, admin_csrf: str
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    body = mirror_body(targets=["hive", "warehouse", "redis"])
    assert client.post("/api/table-mirrors", json=body, headers=headers).status_code == 201
    page = client.get(f"/tables/{NAME}").text
    assert '<option value="report" selected>' in page  # the default, with its boxes checked
    assert 'value="warehouse" checked> warehouse' in page.split('id="validation-policy"')[1]
    assert "validates warehouse, redis after each day's merge and reports" in (
        client.get(f"/status/{NAME}").text
    )

    form = {**FORM, "targets": ["hive", "warehouse", "redis"], "csrf_token": admin_csrf}
    form |= {"validation_targets_shown": "1", "validation_every_h": "2"}
    # No target checked, or one the mirror does not have: refused with the reason.
    refused = client.post(f"/tables/{NAME}", data={**form, "validation": "repair"})
    assert refused.status_code == 422
    assert "must name at least one target (or set validation: off)" in refused.text
    kudu = {**form, "validation_targets": ["redis", "kudu"]}
    refused = client.post(f"/tables/{NAME}", data=kudu)
    assert "validation_targets: kudu is not a target of this mirror" in refused.text
    capped = {**form, "validation": "repair", "validation_repair_max_keys": "0"}
    refused = client.post(f"/tables/{NAME}", data={**capped, "validation_targets": ["redis"]})
    assert "validation_repair_max_keys: Input should be greater than or equal to 1" in (
        refused.text
    )
    # Repair, at most 50 keys, of Redis and the lake: saved and audited.
    chosen = {**capped, "validation_repair_max_keys": "50", "validation_targets": ["redis", "lake"]}
    saved = client.post(f"/tables/{NAME}", data=chosen, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    mirror = TableMirror.model_validate(client.get(f"/api/table-mirrors/{NAME}").json()["mirror"])
    assert (mirror.validation, mirror.validation_repair_max_keys) == ("repair", 50)
    assert mirror.scheduled_validation_targets == ["redis", "lake"]
    audit = client.get("/api/audit").json()
    assert any(
        (e.get("after") or {}).get("validation") == "repair"
        and (e.get("before") or {}).get("validation") == "report"
        for e in audit
        if e["object_name"] == NAME
    )
    page = client.get(f"/tables/{NAME}").text
    assert '<option value="repair" selected>' in page
    assert 'name="validation_repair_max_keys" value="50"' in page
    # Off: the cadence stays in the settings, the scheduler does not validate the mirror.
    off = {**chosen, "validation": "off"}
    assert client.post(f"/tables/{NAME}", data=off, follow_redirects=False).status_code == 303
    status = client.get(f"/status/{NAME}").text
    assert "The scheduler does not validate this mirror (validation: off)." in status
    assert '<p id="validation-none">Not validated yet.</p>' in status
    # The defaults checked again are stored as "the defaults" (None).
    defaults = {**chosen, "validation_targets": ["warehouse", "redis"]}
    assert client.post(f"/tables/{NAME}", data=defaults, follow_redirects=False).status_code == 303
    mirror = TableMirror.model_validate(client.get(f"/api/table-mirrors/{NAME}").json()["mirror"])
    assert mirror.validation_targets is None
    # The warehouse target unticked with its default validation box left checked: the box
    # goes with the target (saved, not refused), and the warehouse is no longer validated.
    no_warehouse = {**defaults, "targets": ["hive", "redis"]}
    saved = client.post(f"/tables/{NAME}", data=no_warehouse, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    mirror = TableMirror.model_validate(client.get(f"/api/table-mirrors/{NAME}").json()["mirror"])
    assert (mirror.targets, mirror.validation_targets) == (["hive", "redis"], None)
    assert mirror.scheduled_validation_targets == ["redis"]
    restored = {**defaults, "targets": ["hive", "warehouse", "redis"]}
    assert client.post(f"/tables/{NAME}", data=restored, follow_redirects=False).status_code == 303

    # The scheduler's runs: a repair that converged, then one above the cap.
    status = client.get(f"/status/{NAME}").text
    assert "validates warehouse, redis every 2.0 h and repairs the differing keys" in status
    assert "at most 50 (more are only reported)" in status
    token = make_token(client, admin_csrf, "component")
    store = AdminControl("http://admin", SecretStr(token), transport=_via(client))
    jobs = FakeJobs(MemoryLake())
    skipped = "not repaired: 60 keys differ, more than the 50 a repair may re-publish"
    jobs.results[("validation", NAME, TODAY)] = [
        JobResult(
            "succeeded",
            rows=900,
            check_ok=True,
            validation=[
                ValidationResult(
                    target="redis",
                    verdict="differs",
                    rows=900,
                    missing=2,
                    sample_keys=["5", "6"],
                    repaired=2,
                    still_differing=0,
                )
            ],
        ),
        JobResult(
            "mismatch",
            rows=900,
            check_ok=False,
            error=f"the validation found a difference; {skipped}",
            validation=[
                ValidationResult(
                    target="redis",
                    verdict="differs",
                    rows=900,
                    different=60,
                    repair_skipped=skipped,
                )
            ],
        ),
    ]
    now = {"t": datetime(2026, 11, 26, 9, 0, tzinfo=UTC).timestamp()}
    scheduler = Scheduler(
        SchedulerSettings(validation=True),
        lambda: [mirror],
        jobs.lake,
        jobs,
        store,
        "test-scheduler",
        clock=lambda: now["t"],
        today=lambda: TODAY,
    )
    assert scheduler.tick(threading.Event()) == 1
    last = _section(client.get(f"/status/{NAME}").text, "validation-last")
    assert "2 re-published, 0 still differ" in last
    now["t"] += 2 * 3600
    assert scheduler.tick(threading.Event()) == 1
    page = client.get(f"/status/{NAME}").text
    assert skipped in _section(page, "validation-last")
    history = _section(page, "validation-history")
    assert "redis: differs (0 missing, 0 extra, 60 different), not repaired (above the cap)" in (
        history
    )
    assert "repaired: 2 re-published, 0 still differ" in history
    runs = client.get("/api/runs", params={"kind": "validation"}).json()
    assert [r["validation"][0]["repair_skipped"] for r in runs] == [None, skipped]
