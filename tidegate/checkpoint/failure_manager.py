"""Decides when consecutive checkpoint failures should fail the job (Flink's semantics)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class CheckpointFailureManager:
    """Counts consecutive checkpoint failures and fails the job past `tolerable_failures`.

    - `tolerable_failures=0`: the first failure fails the job; `n`: the (n+1)-th in a row does.
    - A failure of a checkpoint not newer than the last successful one does not count (it
      finished late; the job has made progress since), and each checkpoint counts once.
    - A success resets the count. So does failing the job, so that the next attempt of the job
      starts with the full tolerance, as in Flink.

    Which failures reach this class is the coordinator's decision (subsumed or stopped
    checkpoints never do). Thread-safe; `fail_job` is called outside the lock.
    """

    def __init__(self, tolerable_failures: int, fail_job: Callable[[str], None]) -> None:
        if tolerable_failures < 0:
            raise ValueError(f"tolerable_failures must be >= 0, got {tolerable_failures}")
        self.tolerable_failures = tolerable_failures
        self._fail_job = fail_job
        self._lock = threading.Lock()
        self._counted_ids: set[int] = set()
        self._last_success_id: int | None = None

    @property
    def consecutive_failures(self) -> int:
        with self._lock:
            return len(self._counted_ids)

    def on_failure(self, checkpoint_id: int, reason: str) -> None:
        with self._lock:
            if self._last_success_id is not None and checkpoint_id <= self._last_success_id:
                return
            self._counted_ids.add(checkpoint_id)
            count = len(self._counted_ids)
            exceeded = count > self.tolerable_failures
            if exceeded:
                self._counted_ids.clear()
        log.warning(
            "checkpoint %d failed (%d consecutive failure(s), %d tolerated): %s",
            checkpoint_id,
            count,
            self.tolerable_failures,
            reason,
        )
        if exceeded:
            self._fail_job(
                f"exceeded the checkpoint failure tolerance ({self.tolerable_failures} "
                f"consecutive failure(s) tolerated); last failure, checkpoint {checkpoint_id}: "
                f"{reason}"
            )

    def on_success(self, checkpoint_id: int) -> None:
        with self._lock:
            if self._last_success_id is None or checkpoint_id > self._last_success_id:
                self._last_success_id = checkpoint_id
                self._counted_ids.clear()
