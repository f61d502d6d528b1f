"""Data governance: plaintext detection, column policies and standardisation (issue 10).

Pure logic: ``model`` (the settings and records every component shares), ``detectors``
(regex + validator), ``policy`` (what a row looks like after its columns' policies). The
collector and the replay apply it before a message leaves them; the web admin edits it.
"""

from cdc_platform.governance_model import (
    BUILTIN_DETECTORS,
    BUILTIN_VALIDATORS,
    ColumnPolicy,
    DetectionRecord,
    DetectorRule,
    GovernanceSettings,
    GovernanceWebUISource,
    LookupTable,
    PolicyAction,
    StandardiseRule,
    describe_governance_error,
    detections_topic,
)

__all__ = [
    "BUILTIN_DETECTORS",
    "BUILTIN_VALIDATORS",
    "ColumnPolicy",
    "DetectionRecord",
    "DetectorRule",
    "GovernanceSettings",
    "GovernanceWebUISource",
    "LookupTable",
    "PolicyAction",
    "StandardiseRule",
    "describe_governance_error",
    "detections_topic",
]
