"""An attacker's module: importing it is the attack, so its side effect runs at import.

The governance tests name it in a policy set and check it is never imported.
"""

from __future__ import annotations

import os

os.environ["CDC_MIRROR_ATTACKER_IMPORTED"] = "1"


def run(value: object) -> bool:
    return True
