"""`JobStatus` (Flink's job states that tidegate uses)."""

from __future__ import annotations

import enum


class JobStatus(enum.Enum):
    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FAILING = "FAILING"
    FAILED = "FAILED"
    FINISHED = "FINISHED"

    def is_globally_terminal_state(self) -> bool:
        return self in (JobStatus.CANCELED, JobStatus.FAILED, JobStatus.FINISHED)
