"""A job's failure history: every error that ended a job attempt (each followed by a restart
from the latest checkpoint, unless the restart strategy gave up) and the job's status
transitions, for the REST API's `/jobs/:id/exceptions` and the dashboard. Thread-safe."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from tidegate.common.job_status import JobStatus

#: failures remembered (older ones are dropped and the history says it was truncated)
MAX_FAILURES = 100


@dataclass(frozen=True, slots=True)
class FailureRecord:
    timestamp_ms: int
    #: the job attempt that failed (0: the first deployment)
    attempt: int
    #: the error's type (mostly JobFailure; another type is a crash of the JobMaster itself)
    name: str
    message: str
    #: the failing slot's traceback, when there is one
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "exceptionName": self.name,
            "message": self.message,
            "stacktrace": self.detail,
            "timestamp": self.timestamp_ms,
            "attempt": self.attempt,
        }


class JobTimeline:
    """The job's failures and when it entered each status."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: deque[FailureRecord] = deque(maxlen=MAX_FAILURES)
        self._recorded = 0
        self._last_error: object = None
        #: status -> wall-clock ms it was last entered
        self.status_timestamps: dict[str, int] = {}

    def status_changed(self, status: JobStatus) -> None:
        self.status_timestamps = {
            **self.status_timestamps,
            status.value: int(time.time() * 1000),
        }

    def record_failure(self, attempt: int, error: BaseException) -> None:
        """Remember `error` (a JobFailure, whose `detail` is the traceback); recording the
        same error object twice keeps one entry."""
        with self._lock:
            if error is self._last_error:
                return
            self._last_error = error
            self._recorded += 1
            self._failures.append(
                FailureRecord(
                    int(time.time() * 1000),
                    attempt,
                    type(error).__name__,
                    str(error),
                    getattr(error, "detail", ""),
                )
            )

    def failures(self) -> list[FailureRecord]:
        """Oldest first."""
        with self._lock:
            return list(self._failures)

    def to_json(self) -> dict[str, Any]:
        """Flink's `/jobs/:id/exceptions` shape: the newest failure first."""
        with self._lock:
            entries = [f.to_json() for f in reversed(self._failures)]
            truncated = self._recorded > len(self._failures)
        root = entries[0] if entries else None
        return {
            "root-exception": None if root is None else root["message"],
            "timestamp": None if root is None else root["timestamp"],
            "exceptionHistory": {"entries": entries, "truncated": truncated},
        }
