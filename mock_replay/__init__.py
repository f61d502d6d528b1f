"""History replay: existing rows in key-ordered batches, published as SimpleBinlog MOCK events.
Imports governance, the platform and the contract; no other component.
"""
