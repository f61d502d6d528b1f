"""The figures a benchmark prints, also written as JSON (``--json PATH``) for the report.

Every component benchmark keeps printing its figures for a person; with ``--json PATH`` it also
writes the same numbers here, so ``bench.report`` never has to parse printed text. The file is
``{"component": …, "machine": …, "figures": [Figure, …]}``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.machine import describe as describe_machine


@dataclass(frozen=True)
class Figure:
    """One measured figure and, when the benchmark has one, its baseline from the same run.

    ``key`` is stable (``<component>.<what>``): the report looks its target up by it.
    ``value`` and ``baseline`` are in ``unit``; ``higher_is_better`` says which way the ratio
    reads, so a ratio above 1 always means "better than the baseline". ``extra`` holds the
    figure's other numbers (latency percentiles, seconds, file counts), keyed by a short name
    that targets may name too.
    """

    key: str
    label: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_label: str | None = None
    higher_is_better: bool = True
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """value / baseline (baseline / value when lower is better); None without a baseline."""
        if self.baseline is None or self.baseline == 0 or self.value == 0:
            return None
        if self.higher_is_better:
            return self.value / self.baseline
        return self.baseline / self.value

    def field(self, name: str) -> float | None:
        """``value``, ``ratio`` or one of ``extra``: what a target is checked against."""
        if name == "value":
            return self.value
        if name == "ratio":
            return self.ratio
        return self.extra.get(name)


def figure_from_json(data: dict[str, Any]) -> Figure:
    return Figure(
        key=str(data["key"]),
        label=str(data["label"]),
        value=float(data["value"]),
        unit=str(data["unit"]),
        baseline=None if data.get("baseline") is None else float(data["baseline"]),
        baseline_label=data.get("baseline_label"),
        higher_is_better=bool(data.get("higher_is_better", True)),
        extra={str(k): float(v) for k, v in (data.get("extra") or {}).items()},
    )


def write_figures(path: str | Path | None, component: str, figures: list[Figure]) -> None:
    """Write ``figures`` to ``path`` (nothing when ``path`` is None: ``--json`` not given)."""
    if path is None:
        return
    document = {
        "component": component,
        "machine": describe_machine(),
        "figures": [asdict(figure) for figure in figures],
    }
    Path(path).write_text(json.dumps(document, indent=2) + "\n")


def read_figures(path: str | Path) -> list[Figure]:
    document = json.loads(Path(path).read_text())
    return [figure_from_json(item) for item in document["figures"]]
