"""The binlog collector: MySQL/MariaDB row binlog → SimpleBinlog messages → Kafka."""
