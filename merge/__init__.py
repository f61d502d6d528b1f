"""Daily Hive snapshots: readiness check, delta extraction, archive-delete rule, merge and check."""
