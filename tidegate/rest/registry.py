"""The jobs of one driver process, for its REST API: every JobMaster submitted in this process,
in submission order. Ended jobs stay listed (with their final statistics) until more than
MAX_ENDED have ended; then the oldest ended ones are dropped."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

MAX_ENDED = 100


class JobRegistry:
    """Thread-safe."""

    def __init__(self, max_ended: int = MAX_ENDED) -> None:
        self.max_ended = max_ended
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, Any] = OrderedDict()

    def add(self, jm: Any) -> None:
        with self._lock:
            self._jobs[jm.job_id] = jm
            ended = [j for j, m in self._jobs.items() if m.done.is_set()]
            for job_id in ended[: max(len(ended) - self.max_ended, 0)]:
                del self._jobs[job_id]

    def get(self, job_id: str) -> Any | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all(self) -> list[Any]:
        with self._lock:
            return list(self._jobs.values())
