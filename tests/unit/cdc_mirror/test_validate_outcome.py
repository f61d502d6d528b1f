"""``cdc-mirror validate``'s report after a repair names a key the target spells otherwise
(``…:0042`` in Redis for key 42) by its name there, as the report before the repair does
(printed by its value alone it looks like the canonical key, which may be equal), says that a
repair cannot remove such a name, and counts keys, not names."""

from __future__ import annotations

from cdc_mirror.validate import outcome_lines
from validation.plan import Difference, SpelledKey
from validation.run import KeyReport, RepairRequest, TableValidation, TargetReport


def _repaired(after: TargetReport, keys: tuple[tuple[int], ...]) -> list[str]:
    before = TargetReport("orders", "redis", rows=3, chunks=1)
    before.differences = [KeyReport(SpelledKey((42,), "orders:0042"), Difference.EXTRA, None, {})]
    result = TableValidation("orders", [before])
    result.repair = RepairRequest("orders", "local", (("d", "orders"),), ("id",), keys)
    result.repaired = "re-published the rows"
    result.after_repair = [after]
    lines = outcome_lines(result)
    return lines[lines.index("repair: re-published the rows") + 1 :]


def test_a_name_spelled_otherwise_keeps_its_target_name_after_the_repair() -> None:
    after = TargetReport("orders", "redis")
    after.differences = [KeyReport(SpelledKey((42,), "orders:0042"), Difference.EXTRA, None, {})]

    lines = _repaired(after, ((42,),))

    assert lines == [
        "  redis: 0 of 1 keys equal after the repair, 1 still differ:",
        "    key 42 (named 'orders:0042' in the target): extra (a name the mirror never "
        "writes: the repair cannot remove it; delete it in the target)",
    ]


def test_keys_are_counted_once_whatever_names_they_have() -> None:
    after = TargetReport("orders", "redis")
    after.differences = [
        KeyReport(SpelledKey((42,), "orders:0042"), Difference.EXTRA, None, {}),
        KeyReport((42,), Difference.MISSING, {"id": "42"}, None),
    ]
    after.unsettled = [SpelledKey((43,), "orders:043")]

    lines = _repaired(after, ((42,), (43,), (44,)))

    assert lines[0] == "  redis: 1 of 3 keys equal after the repair, 2 still differ:"
    assert lines[2].startswith("    key 42: missing (the target holds a newer change")
    assert lines[3] == "    key 43 (named 'orders:043' in the target): still changing"
