"""The lake writer: Kafka → the raw change layer, PySpark Structured Streaming, exactly once.
Imports the platform (its lake adapter) and the contract; no other component.
"""
