"""The stream applied to Redis and the real-time warehouse (PostgreSQL, Kudu), version-guarded.
Imports the platform and the contract; no other component.
"""
