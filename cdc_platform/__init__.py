"""The platform layer: one adapter per outside system (Kafka, MySQL, the lake, ...), each
mapping its driver's errors into the product's taxonomy once. Imports only the contract.

- ``cdc_platform.kafka``: confluent-kafka settings, topics, read-to-end, the error table.
- ``cdc_platform.retry``: the one retry policy (tenacity, jittered back-off, by error class).
"""
