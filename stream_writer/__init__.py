"""The lake writer: Kafka → the raw change layer (ods_binlog_source), PySpark streaming."""
