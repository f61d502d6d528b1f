"""The mirror tests' scoped settings (unique Redis prefix and warehouse schema, cleaned up)."""

from tests.integration.mirror.conftest import mirror_settings

__all__ = ["mirror_settings"]
