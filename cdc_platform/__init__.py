"""The platform layer: one adapter per outside system (configuration, Kafka, MySQL sources,
Redis, PostgreSQL, Kudu, Spark and the lake, retries), each mapping its driver's errors once.
Imports only the contract.

- ``config``, ``config_store``, ``governance_model``, ``lake_location``: the settings of every
  component and the one interface they read instances and table mirrors through;
- ``kafka``: confluent-kafka settings, topics, read-to-end, the error table;
- ``mysql_source``: every connection to a source (no cleartext password without TLS), and
  GTID positions as the servers print them (``position_covers``);
- ``redis_store``, ``warehouse``: every Redis client and PostgreSQL connection (the only
  importers of redis-py and psycopg but for the mirror's appliers); ``kudu``: the JVM and the
  Kudu client;
- ``spark``, ``lake``, ``iceberg``: the Spark session, the raw layer's tables, the Iceberg catalog;
- ``observability``: metrics and live/ready probes on a configurable address;
- ``retry``: the one retry policy (tenacity, jittered back-off, by error class).
"""
