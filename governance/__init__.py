"""Data governance, the policy engine the collector and the replay apply to each row: detection,
column policies, standardisation. Imports the platform (its policy model) and the contract.
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
