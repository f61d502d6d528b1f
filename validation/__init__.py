"""Row-level validation of a table mirror against MySQL (``cdc-mirror validate``).
Imports the platform and the contract; no other component.

**Chunks.** The key space is cut on MySQL by a key-ordered scan of keys only (every
``chunk_rows``-th key of the UNION ALL of the table's shards; each step reads at most
``chunk_rows`` keys of each shard's index, and no row). Index statistics would be cheaper but
give uneven chunks on skewed keys; the keys-only scan costs one index read per row, once.

**Hashes.** Per chunk, each store computes a count and an order-independent hash of a
canonical row encoding (``validation.canonical``) in its own engine: MySQL and the
warehouse in SQL (nothing but three numbers leaves the server), Redis in Python over
pipelined reads. Differing chunks are halved (at a middle key) and compared again until at
most ``leaf_rows`` rows remain, whose per-row hashes name the keys missing, extra or
different (``validation.plan.descend``); only those keys' rows are read, side by side.

**Consistent while the source changes.** MySQL's digest of a chunk is read between two
reads of its binlog position (``@@gtid_binlog_pos``; read again while they differ), so it is
the chunk as of that position. A target read at about the same time may lag it, or lead it
(when it was read later), so a differing chunk alone proves nothing. The rule, per key the
descent found (``validation.plan.settle``): a round reads the key's row on MySQL (r1), takes a
watermark (the end of the instance's Kafka topic, after r1) and waits until the target's
consumer group has committed past it (``validation.watermark``: the target has applied
everything published before it), then reads the target's row (t) and MySQL's row again (r2).

* r1 = r2 = t: the key was in flight; it is dropped, never reported;
* r1 = r2 ≠ t: the key did not change on MySQL while the target caught up with r1, and the
  target still differs: one confirmation. Two confirmations in consecutive rounds report it
  (the second covers a change the collector had not published when the first mark was
  taken, and an A→B→A change seen half-applied);
* r1 ≠ r2: the key changed meanwhile; its confirmations start over. A key that changes in
  every one of ``max_rounds`` rounds is reported as *unsettled*, not as a difference.

A real difference is never hidden: the mirror only writes a key when MySQL changed it, so a
drifted key stays different through every round unless MySQL itself changes it (and then it
is no longer a difference). A target that is unreachable, or a consumer group that does not
catch up in time, fails the run with that reason; it is never reported as a mismatch.
"""
