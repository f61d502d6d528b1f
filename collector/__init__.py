"""The binlog collector: MySQL/MariaDB row binlog (live or archived files) → SimpleBinlog → Kafka,
HA and fenced. Imports governance, the platform and the contract; no other component.
"""
