"""Fewer and cheaper cyclic garbage collections for a long-running component process.

The components allocate several objects per row (Kafka records, decoded messages, row
changes), freed by reference counting: they form no cycles. With CPython's default thresholds
the cyclic collector still runs every 700 allocations, and every tenth of its middle
collections walks every live object of the process, the libraries' included: in the mirror
such a full collection stopped the consumer loop for hundreds of milliseconds under load, and
each pause lands on the rows waiting in that batch (``bench.mirror_bench``'s MySQL → Redis
freshness p99). Called by a component's entry point once it has started, never at import: the
objects made at start-up move out of the collector's sight, and a young collection waits for
``young`` allocations.
"""

from __future__ import annotations

import gc

# CPython's defaults, for a process (a benchmark) that measures both ways.
DEFAULT_THRESHOLDS = (700, 10, 10)


def tune_gc(young: int = 50_000) -> None:
    gc.freeze()
    gc.set_threshold(young, 20, 20)


def untune_gc() -> None:
    """Back to CPython's defaults (the frozen objects are collectable again)."""
    gc.unfreeze()
    gc.set_threshold(*DEFAULT_THRESHOLDS)
