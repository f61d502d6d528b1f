"""A table mirror's validation policy (``tables[].validation``, ``validation_targets``,
``validation_repair_max_keys``): which targets the scheduler validates, and the settings it
refuses with their reason."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from cdc_platform.config import TableMirror


def mirror(**spec: object) -> TableMirror:
    return TableMirror.model_validate({"db_prefix": "db", "table_prefix": "orders", **spec})


def test_the_default_validates_the_warehouse_and_redis_among_the_mirrors_targets() -> None:
    assert mirror().validation == "report"
    assert mirror().validation_repair_max_keys == 1000
    assert mirror().scheduled_validation_targets == ["warehouse", "redis"]
    assert mirror(targets=["redis", "kudu"]).scheduled_validation_targets == ["redis"]
    assert mirror(targets=["hive"]).scheduled_validation_targets == []


def test_chosen_targets_in_validations_order_and_off_validates_none() -> None:
    chosen = mirror(targets=["hive", "kudu", "redis"], validation_targets=["lake", "kudu"])
    assert chosen.scheduled_validation_targets == ["kudu", "lake"]
    off = chosen.model_copy(update={"validation": "off"})
    assert off.scheduled_validation_targets == []


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"validation_targets": []}, "must name at least one target (or set validation: off)"),
        (
            {"targets": ["redis"], "validation_targets": ["redis", "lake"]},
            "validation_targets: lake is not a target of this mirror ('lake' needs hive)",
        ),
        ({"validation": "fix"}, "Input should be 'off', 'report' or 'repair'"),
        ({"validation_repair_max_keys": 0}, "greater than or equal to 1"),
    ],
)
def test_a_policy_that_cannot_run_is_refused_with_its_reason(
    spec: dict[str, object], reason: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(reason)):
        mirror(**spec)
