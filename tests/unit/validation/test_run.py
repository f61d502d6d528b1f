"""The outcome of a table's validation as the scheduler and the CLI read it (pure)."""

from __future__ import annotations

import json

from validation.plan import Difference
from validation.run import KeyReport, RepairRequest, TableValidation, TargetReport


def test_the_outcome_names_every_key_and_whether_the_repair_converged() -> None:
    report = TargetReport("t", "warehouse", rows=10, chunks=2)
    report.differences = [
        KeyReport((3,), Difference.DIFFERENT, {"a": "1"}, {"a": "2"}),
        KeyReport((7,), Difference.MISSING, {"a": "1"}, None),
    ]
    after = TargetReport("t", "warehouse")
    result = TableValidation("t", [report])
    assert not result.equal and not result.converged
    result.repair = RepairRequest("t", "local", (("d", "t"),), ("id",), ((3,), (7,)))
    result.repaired = "re-published 2 rows"
    result.after_repair = [after]
    assert result.converged
    document = json.loads(json.dumps(result.to_json()))
    [target] = document["targets"]
    assert target["differences"] == {"missing": ["7"], "different": ["3"]}
    assert document["repair"] == {
        "keys": 2,
        "published": "re-published 2 rows",
        "stillDiffering": {"warehouse": []},
    }
    result.unreachable["redis"] = "redis could not be validated: down."
    assert not result.converged and document["equal"] is False
