"""`CheckpointingMode` (PyFlink's names)."""

from __future__ import annotations

import enum


class CheckpointingMode(enum.Enum):
    #: barriers are aligned: every record affects state exactly once
    EXACTLY_ONCE = 0
    #: barriers are only counted (no blocking): after a restore some records count twice
    AT_LEAST_ONCE = 1
