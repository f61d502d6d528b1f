"""The scheduler (issue 22, item 5): merges each table's days as they become ready, catches up,
retries with back-off, validates and maintains, one active process elected through ZooKeeper.
A control-plane layer above the components: it starts merge, validation and maintenance
through their command lines and asks merge's public readiness API (``merge.readiness``);
it imports no other component and never the web admin.
"""
