"""The mirror tests' scoped settings (unique Redis prefix and warehouse schema, cleaned up),
and the validation tests' pipeline (``harness``)."""

from tests.integration.mirror.conftest import mirror_settings
from tests.integration.validation.harness import pipeline

__all__ = ["mirror_settings", "pipeline"]
