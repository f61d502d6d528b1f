"""The operator's entry points: the `cdc-mirror` CLI, the live demo, the process supervisor and
the row-for-row check. May import every package; nothing imports it.
"""
