"""Row-level validation of a table mirror against MySQL (``cdc-mirror validate``).
Imports the platform and the contract; no other component.

**Chunks.** The key space is cut on MySQL as the scan goes: the next chunk ends at the
``n``-th key after the last (an index read of keys only); ``n`` follows a time budget per
chunk (``Options.chunk_time_s``).

**Hashes.** Per chunk, each store computes a count and an order-independent hash of a
canonical row encoding (``validation.canonical``) in its own engine: MySQL and the
warehouse in SQL (nothing but three numbers leaves the server), Redis in Python over
pipelined reads; one md5 per row. A thread hashes MySQL's chunks while the target hashes
the ones before. Differing chunks are halved (at a middle key) and compared again until at
most ``leaf_rows`` rows remain, whose per-row hashes name the keys missing, extra or
different (``validation.plan.descend``); only those keys' rows are read, side by side.

**Consistent while the source changes.** MySQL chunks are hashed for a window of time, then
a watermark is waited for (``validation.watermark.PositionWatermark``: MySQL's GTID position
after the window, covered by the collector's committed position, then the target's consumer
group past the topic's end), then the target hashes the same chunks: it has applied at least
the state MySQL's hashes reflect. A key the target got ahead on is a candidate; candidates
are settled (``validation.plan.settle``): a round reads the key on MySQL (r1), waits for a
watermark, reads the target (t) and MySQL again (r2).

* t = r1 or t = r2: the target holds a state MySQL had during the round: in flight, dropped;
* r1 = r2 ≠ t: one confirmation; two in consecutive rounds report it;
* otherwise the key changed during the round; its confirmations start over. A key that
  changes in every one of ``max_rounds`` rounds is reported as *unsettled*, not as a
  difference.

A real difference is never hidden: the mirror only writes a key when MySQL changed it, so a
drifted key stays different through every round unless MySQL itself changes it (and then it
is no longer a difference). A target that is unreachable, or a watermark not reached in time,
fails the run with that reason; it is never reported as a mismatch.

**Repair, resume, load.** ``validation.run.validate_table`` takes a ``Repairer`` (the CLI's
publishes through ``mock_replay.keys``) and re-checks the keys it re-published; the scan's
progress is stored after each window (``validation.progress``) and an unfinished scan
resumes; the replay's load guard (``cdc_platform.load_guard``) is asked before each MySQL
chunk. See docs/validation.md.
"""
