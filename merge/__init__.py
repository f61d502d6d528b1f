"""Daily snapshots: readiness, delta extraction, archive-delete rule, merge and check (PySpark).
Imports the platform (lake, MySQL, Spark) and the contract; no other component.
"""
