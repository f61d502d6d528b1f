"""The platform layer: one adapter per outside system (Kafka, MySQL, the lake, ...), each
mapping its driver's errors into the product's taxonomy once. Imports only the contract."""
