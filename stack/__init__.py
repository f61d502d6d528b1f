"""The local stack: real services as local processes on loopback, installed on demand
(`cdc-mirror stack up|down|status`). Imports the platform and the contract; no component.
"""
