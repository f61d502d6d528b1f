"""The cdc-mirror application shell: the ``cdc-mirror`` command and the live demo."""
